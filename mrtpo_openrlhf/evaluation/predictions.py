"""Read prediction files in the formats people already have (``--predictions [BENCHMARK=]FILE``).

Accepted, per file (the format is recognised from the content):

- **JSONL rows** ``{"id", "response" | "sql" | "responses" | "result" | "tool_calls", "benchmark"?, "sample"?}``.
  ``id`` as in the records (Spider = position in dev.json, BIRD = question_id, IFEval/IFBench = key, MulDimIF = id,
  BFCL = id). IFEval/IFBench rows may give ``"prompt"`` instead of ``id`` (the official
  ``{"prompt", "response"}`` rows of ``sample_output.jsonl``; matched exactly, then with surrounding spaces
  stripped, as allenai/IFBench's ``get_response_for_prompt``).
- **A benchmark's own formats**, declared by its task (``Benchmark.predictions``: ``detects_file``/``read_file``
  for a whole file, ``row_predictions`` for a row): Spider's official plain text (one query per line in dev order,
  blank lines skipped, a ``\\t`` and what follows it ignored, as ``evaluation.py`` reads
  ``l.strip().split('\\t')``), BIRD's official JSON ``{"<question_id>": "SQL\\t----- bird -----\\t<db_id>", ...}``,
  and for BFCL its prompt-mode python call list, FC-mode ``result`` and OpenAI-style ``tool_calls``
  (``tasks/tool/benchmarks.py``).
- **OpenAI chat completions** (any benchmark): ``"message": {...}`` or ``"choices": [{"message": {...}}, ...]``
  (each choice a sample) instead of ``response``: the message's ``content`` is the response, and for BFCL its
  ``tool_calls`` are the calls where it has them.

A file without any prediction, or with ids the benchmark does not have, is an error naming the file and the counts.

Several predictions of one id are samples: give them as ``"responses": [...]`` in one row, or as rows with
distinct ``"sample"`` indices; a repeated id without ``sample`` is an error (an accidental duplicate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl_numbered
from mrtpo_openrlhf.tasks import BENCHMARKS, get_benchmark

from .data import EvalExample


@dataclass(frozen=True)
class Prediction:
    """One sample for one example: the model's text, plus an answer already extracted by the file format
    (a bare SQL string, parsed tool calls), used instead of parsing ``response``."""

    response: str
    answer: Any = None


# ----------------------------------------------------------------------------------------------- rows
def chat_messages(row: dict, where: str) -> list[dict] | None:
    """The assistant message(s) of an OpenAI chat-completion row: ``message``, or ``choices[i].message`` (each
    choice one sample, as ``n`` > 1 returns them); None when the row has neither."""
    if "choices" in row:
        choices = row["choices"]
        if not (
            isinstance(choices, list)
            and choices
            and all(isinstance(c, dict) and isinstance(c.get("message"), dict) for c in choices)
        ):
            raise DatasetError(f"{where}: 'choices' must be a non-empty list of {{'message': {{...}}}} objects")
        return [c["message"] for c in choices]
    if "message" in row:
        if not isinstance(row["message"], dict):
            raise DatasetError(f"{where}: 'message' must be an object (an OpenAI chat-completion message)")
        return [row["message"]]
    return None


def message_text(message: dict, where: str) -> str | None:
    """A message's ``content``: a string, or the text of its content parts; None when it has none."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    raise DatasetError(f"{where}: the message's 'content' must be a string or a list of content parts")


def _message_prediction(message: dict, where: str) -> Prediction:
    text = message_text(message, where)
    if text is None:
        raise DatasetError(f"{where}: the message has no 'content'")
    return Prediction(text)


def texts(row: dict, where: str, alt: str = "") -> list[str]:
    """The row's ``responses`` or ``response``; ``alt`` names the benchmark's other fields in the error."""
    if "responses" in row:
        texts = row["responses"]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise DatasetError(f"{where}: 'responses' must be a non-empty list of strings")
        return texts
    if not isinstance(row.get("response"), str):
        raise DatasetError(f"{where}: 'response' must be a string (or give {alt}'message' or 'choices')")
    return [row["response"]]


def _answer_fields() -> dict[str, list[str]]:
    """{row field: the benchmarks whose rows may give their extracted answer under it} (``answer_field``)."""
    fields: dict[str, list[str]] = {}
    for entry in BENCHMARKS.values():
        if entry.answer_field:
            fields.setdefault(entry.answer_field, []).append(entry.name)
    return fields


def _row_predictions(row: dict, bench: str, where: str) -> list[Prediction]:
    entry = get_benchmark(bench)
    own = entry.hook("row_predictions")
    if own is not None:  # the benchmark reads its rows itself
        return own(row, where)
    for name, owners in _answer_fields().items():
        if name in row:
            if bench not in owners or not isinstance(row[name], str):
                raise DatasetError(f"{where}: {name!r} is allowed only for {'/'.join(owners)} and must be a string")
            return [Prediction(row.get("response") or "", row[name])]
    messages = chat_messages(row, where)
    if messages is not None:
        return [_message_prediction(m, where) for m in messages]
    alt = f"{entry.answer_field!r}, " if entry.answer_field else ""
    return [Prediction(t) for t in texts(row, where, alt)]


class _Collector:
    """{benchmark: {id: [Prediction]}} with the duplicate/sample rules, the unknown-id check and prompt keys."""

    def __init__(self, examples: Mapping[str, Sequence[EvalExample]]):
        self.examples = examples
        self.out: dict[str, dict[str, list[Prediction]]] = {b: {} for b in examples}
        self.samples: dict[tuple[str, str], set] = {}
        self.known = {b: {ex.id for ex in exs} for b, exs in examples.items()}
        self.rows: dict[str, dict[str, int]] = {}  # file -> benchmark -> rows read
        self.unknown: dict[str, dict[str, list[str]]] = {}  # file -> benchmark -> ids not in the data
        self._by_prompt: dict[str, dict[str, str]] = {}

    def id_for_prompt(self, bench: str, prompt: str) -> str:
        if bench not in self._by_prompt:
            table: dict[str, str] = {}
            for ex in self.examples[bench]:
                table.setdefault(ex.prompt, ex.id)
            for ex in self.examples[bench]:
                table.setdefault(ex.prompt.strip(), ex.id)
            self._by_prompt[bench] = table
        table = self._by_prompt[bench]
        return table.get(prompt, table.get(prompt.strip(), f"<prompt {prompt[:60]!r}>"))

    def add(self, path: str, bench: str, key: str, preds: list[Prediction], sample: Any, where: str) -> None:
        counts = self.rows.setdefault(path, {})
        counts[bench] = counts.get(bench, 0) + 1
        if key not in self.known[bench]:
            self.unknown.setdefault(path, {}).setdefault(bench, []).append(key)
            return
        seen = self.samples.setdefault((bench, key), set())
        if key in self.out[bench] and (sample is None or None in seen):
            raise DatasetError(
                f"{where}: duplicate prediction for {bench} id {key!r} (several samples of one id "
                "need distinct 'sample' indices, or one row with 'responses': [...])"
            )
        if sample is not None and sample in seen:
            raise DatasetError(f"{where}: duplicate sample {sample!r} for {bench} id {key!r}")
        seen.add(sample)
        self.out[bench].setdefault(key, []).extend(preds)

    def check_file(self, path: str) -> None:
        """A file without a single prediction, or with ids the data does not have, is an error naming the file,
        the counts and the first unknown ids in file order."""
        if not self.rows.get(path):
            raise DatasetError(f"{path}: no predictions in the file (it is empty)")
        for bench, unknown in self.unknown.get(path, {}).items():
            shown = ", ".join(repr(u) for u in unknown[:5])
            example_ids = ", ".join(repr(ex.id) for ex in self.examples[bench][:3]) or "none"
            raise DatasetError(
                f"{path}: {len(unknown)} of its {self.rows[path][bench]} {bench} prediction id(s) are not in the "
                f"benchmark data ({len(self.examples[bench])} examples); the first: {shown}"
                f"{' ...' if len(unknown) > 5 else ''} (ids look like {example_ids})"
            )


def _bench_of_file(spec: str) -> tuple[str | None, str]:
    name, sep, path = spec.partition("=")
    return (name, path) if sep and name in BENCHMARKS else (None, spec)


def _single(bench: str | None, requested: Sequence[str], allowed: Sequence[str], what: str, path: str) -> str:
    candidates = [b for b in requested if b in allowed]
    bench = bench or (candidates[0] if len(candidates) == 1 else None)
    if bench not in allowed:
        raise DatasetError(f"{path}: {what}; write {'|'.join(allowed)}=FILE")
    return bench


def _native_format(bench_of_file: str | None, requested: Sequence[str], text: str, whole: Any, path: str):
    """The benchmark whose own whole-file format ``path`` is in (its ``detects_file``), or None for JSONL rows."""
    found = []
    for entry in BENCHMARKS.values():
        detects = entry.hook("detects_file")
        what = detects(entry.name, text, whole) if detects is not None else None
        if what:
            found.append((entry.name, what))
    if not found:
        return None
    return _single(bench_of_file, requested, [name for name, _ in found], found[0][1], path)


def _read_jsonl(path: str, bench_of_file: str | None, requested: Sequence[str], col: _Collector) -> None:
    for lineno, row in iter_jsonl_numbered(path):  # bad JSON / non-object rows: DatasetError naming path:line
        where = f"{path}:{lineno}"
        bench = row.get("benchmark") or bench_of_file or (requested[0] if len(requested) == 1 else None)
        if bench is None:
            raise DatasetError(
                f"{where}: no 'benchmark' field, and several benchmarks were requested "
                "(add the field or pass BENCHMARK=FILE)"
            )
        if bench not in col.out:
            raise DatasetError(f"{where}: benchmark {bench!r} was not requested ({', '.join(requested)})")
        by_prompt = get_benchmark(bench).keyed_by_prompt
        if isinstance(row.get("id"), (str, int)) and not isinstance(row.get("id"), bool):
            key = str(row["id"])
        elif by_prompt and isinstance(row.get("prompt"), str):
            key = col.id_for_prompt(bench, row["prompt"])
        else:
            raise DatasetError(f"{where}: missing 'id' (string or integer)" + (" or 'prompt'" if by_prompt else ""))
        sample = row.get("sample")
        if sample is not None and (not isinstance(sample, int) or isinstance(sample, bool)):
            raise DatasetError(f"{where}: 'sample' must be an integer")
        col.add(path, bench, key, _row_predictions(row, bench, where), sample, where)


def read_predictions(
    specs: Sequence[str], examples: Mapping[str, Sequence[EvalExample]]
) -> dict[str, dict[str, list[Prediction]]]:
    """``[BENCHMARK=]FILE`` specs -> {benchmark: {id: [Prediction, one per sample]}}.

    ``examples``: the loaded examples of every requested benchmark (for the id check and prompt keys). Raises
    DatasetError naming the file and row on bad input, and the first ids that match no example.
    """
    requested = list(examples)
    col = _Collector(examples)
    for spec in specs:
        bench_of_file, path = _bench_of_file(spec)
        if not Path(path).is_file():
            raise DatasetError(f"predictions file {path} not found")
        text = Path(path).read_text(encoding="utf-8-sig")  # a BOM must not turn JSONL into "SQL lines"
        head = text.lstrip()[:1]
        whole = None
        if head == "{":
            try:
                whole = json.loads(text)
            except json.JSONDecodeError:
                whole = None  # JSONL
        native = _native_format(bench_of_file, requested, text, whole, path)
        if native is not None:
            read = get_benchmark(native).hook("read_file")
            for key, preds, where in read(native, path, text, whole, col.examples[native]):
                col.add(path, native, key, preds, None, where)
        else:
            _read_jsonl(path, bench_of_file, requested, col)
        col.check_file(path)
    return col.out


__all__ = ["Prediction", "chat_messages", "message_text", "read_predictions", "texts"]
