"""Read prediction files in the formats people already have (``--predictions [BENCHMARK=]FILE``).

Accepted, per file (the format is recognised from the content):

- **JSONL rows** ``{"id", "response" | "sql" | "responses" | "result" | "tool_calls", "benchmark"?, "sample"?}``.
  ``id`` as in the records (Spider = position in dev.json, BIRD = question_id, IFEval/IFBench = key, MulDimIF = id,
  BFCL = id). IFEval/IFBench rows may give ``"prompt"`` instead of ``id`` (the official
  ``{"prompt", "response"}`` rows of ``sample_output.jsonl``; matched exactly, then with surrounding spaces
  stripped, as allenai/IFBench's ``get_response_for_prompt``).
- **Spider's official prediction file**: plain text, one query per line in dev order (blank lines skipped, a
  ``\\t`` and what follows it ignored, as ``evaluation.py`` reads ``l.strip().split('\\t')``).
- **BIRD's official JSON**: ``{"<question_id>": "SQL\\t----- bird -----\\t<db_id>", ...}``.
- **BFCL**: besides the project's ``<tool_call>`` layout in ``response``, BFCL's own prompt-mode output (a python
  call list such as ``[get_weather(city='Paris'), f(x=1)]``, in ``response`` or BFCL's ``result`` field, parsed
  with ``ast``, never evaluated), BFCL's FC-mode ``result`` list ``[{"name": "<json args>"}]``, and OpenAI-style
  ``"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": "<json>"}}]``.
- **OpenAI chat completions** (any benchmark): ``"message": {...}`` or ``"choices": [{"message": {...}}, ...]``
  (each choice a sample) instead of ``response``: the message's ``content`` is the response, and for BFCL its
  ``tool_calls`` are the calls where it has them.

A file without any prediction, or with ids the benchmark does not have, is an error naming the file and the counts.

Several predictions of one id are samples: give them as ``"responses": [...]`` in one row, or as rows with
distinct ``"sample"`` indices; a repeated id without ``sample`` is an error (an accidental duplicate).
"""

from __future__ import annotations

import ast
import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl_numbered
from mrtpo_openrlhf.verifiers.tool import ParsedCalls, ToolCall

from .data import BENCHMARKS, IF_BENCHMARKS, SQL_BENCHMARKS, EvalExample

BIRD_SEPARATOR = "\t----- bird -----\t"


@dataclass(frozen=True)
class Prediction:
    """One sample for one example: the model's text, plus an answer already extracted by the file format
    (a bare SQL string for Spider/BIRD, ``ParsedCalls`` for BFCL), used instead of parsing ``response``."""

    response: str
    answer: Any = None


# ----------------------------------------------------------------------------------------------- BFCL calls
_BIN_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value(node: ast.AST) -> Any:
    """BFCL's ``resolve_ast_by_type`` without ``eval``: constants, containers, names (as strings), nested calls,
    and arithmetic on number literals (BFCL evaluates those; here +-*/ // % only, no power, no lambdas)."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand)
        if not _number(operand):
            raise ValueError(f"unary {type(node.op).__name__} on a non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking (**) is not a value")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_OPS:
        left, right = _value(node.left), _value(node.right)
        if _number(left) and _number(right):
            return _BIN_OPS[type(node.op)](left, right)
        if isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str):
            return left + right
        raise ValueError("arithmetic on non-numbers")
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node)
        call = _call(node)
        return {call.name: call.arguments}
    if isinstance(node, ast.Subscript):
        return ast.unparse(node)
    raise ValueError(f"unsupported expression {type(node).__name__}")


def _call(node: ast.Call) -> ToolCall:
    parts, func = [], node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    if any(k.arg is None for k in node.keywords):
        raise ValueError("keyword unpacking (**) is not an argument")
    if node.args:
        raise ValueError(f"positional arguments in a call of {'.'.join(reversed(parts))} (BFCL needs keywords)")
    return ToolCall(".".join(reversed(parts)), {k.arg: _value(k.value) for k in node.keywords})


def parse_python_calls(text: str) -> ParsedCalls:
    """BFCL prompt-mode output -> calls, as ``default_decode_ast_prompting`` decodes it (backticks/newlines
    stripped, brackets added when missing), with ``ast.parse`` and no evaluation. Never raises."""
    body = text.strip("`\n ")
    if not body.startswith("["):
        body = "[" + body
    if not body.endswith("]"):
        body = body + "]"
    try:
        tree = ast.parse(body.strip().strip("'"), mode="eval").body
        nodes = [tree] if isinstance(tree, ast.Call) else list(getattr(tree, "elts", [None]))
        if not all(isinstance(n, ast.Call) for n in nodes):
            return ParsedCalls(None, "not a python list of function calls")
        return ParsedCalls([_call(n) for n in nodes], "")
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        return ParsedCalls(None, f"not a python list of function calls: {exc}")


def _json_arguments(raw: Any, where: str) -> dict:
    args = json.loads(raw) if isinstance(raw, str) else ({} if raw is None else raw)
    if not isinstance(args, dict):
        raise ValueError(f"{where}: arguments must be a JSON object")
    return args


def parse_openai_tool_calls(tool_calls: Any) -> ParsedCalls:
    """OpenAI ``tool_calls`` list (``{"type": "function", "function": {"name", "arguments": "<json>"}}``)."""
    if not isinstance(tool_calls, list):
        return ParsedCalls(None, "'tool_calls' must be a list")
    calls = []
    try:
        for i, item in enumerate(tool_calls):
            fn = item.get("function") if isinstance(item, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ValueError(
                    f"tool_calls[{i}]: expected {{'type': 'function', 'function': {{'name', 'arguments'}}}}"
                )
            calls.append(ToolCall(fn["name"], _json_arguments(fn.get("arguments"), f"tool_calls[{i}]")))
    except (ValueError, json.JSONDecodeError) as exc:
        return ParsedCalls(None, str(exc))
    return ParsedCalls(calls, "")


def parse_fc_result(result: list) -> ParsedCalls:
    """BFCL FC-mode ``result``: ``[{"func_name": "<json args>" or {...}}, ...]``."""
    calls = []
    try:
        for i, item in enumerate(result):
            if not isinstance(item, dict) or len(item) != 1:
                raise ValueError(f"result[{i}]: expected one {{name: arguments}} object")
            ((name, raw),) = item.items()
            calls.append(ToolCall(name, _json_arguments(raw, f"result[{i}]")))
    except (ValueError, json.JSONDecodeError) as exc:
        return ParsedCalls(None, str(exc))
    return ParsedCalls(calls, "")


# ----------------------------------------------------------------------------------------------- rows
def _chat_messages(row: dict, where: str) -> list[dict] | None:
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


def _message_text(message: dict, where: str) -> str | None:
    """A message's ``content``: a string, or the text of its content parts; None when it has none."""
    content = message.get("content")
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    raise DatasetError(f"{where}: the message's 'content' must be a string or a list of content parts")


def _message_prediction(message: dict, bench: str, where: str) -> Prediction:
    """BFCL: the message's ``tool_calls`` where it has them (OpenAI shape), else its text as a response."""
    if bench == "bfcl" and message.get("tool_calls") is not None:
        calls = message["tool_calls"]
        return Prediction(json.dumps(calls, ensure_ascii=False), parse_openai_tool_calls(calls))
    text = _message_text(message, where)
    if text is None:
        raise DatasetError(
            f"{where}: the message has no 'content'" + (" and no 'tool_calls'" if bench == "bfcl" else "")
        )
    return _text_prediction(text, bench)


def _text_prediction(text: str, bench: str) -> Prediction:
    if bench == "bfcl":  # the project's <tool_call> layout, else BFCL's prompt-mode python call list
        return Prediction(text, None if "<tool_call>" in text else parse_python_calls(text))
    return Prediction(text)


def _bfcl_prediction(row: dict, where: str) -> list[Prediction]:
    if "tool_calls" in row:
        calls = row["tool_calls"]
        return [Prediction(json.dumps(calls, ensure_ascii=False), parse_openai_tool_calls(calls))]
    if "result" in row:
        result = row["result"]
        if isinstance(result, list) and all(isinstance(x, dict) for x in result):
            return [Prediction(json.dumps(result, ensure_ascii=False), parse_fc_result(result))]
        if isinstance(result, str):
            return [Prediction(result, parse_python_calls(result))]
        raise DatasetError(f"{where}: 'result' must be BFCL's prompt-mode string or FC-mode list")
    messages = _chat_messages(row, where)
    if messages is not None:
        return [_message_prediction(m, "bfcl", where) for m in messages]
    return [_text_prediction(text, "bfcl") for text in _texts(row, where, "bfcl")]


def _texts(row: dict, where: str, bench: str) -> list[str]:
    if "responses" in row:
        texts = row["responses"]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise DatasetError(f"{where}: 'responses' must be a non-empty list of strings")
        return texts
    if not isinstance(row.get("response"), str):
        alt = {
            "spider": "'sql', ",
            "bird": "'sql', ",
            "bfcl": "'result', 'tool_calls', ",
        }.get(bench, "")
        raise DatasetError(f"{where}: 'response' must be a string (or give {alt}'message' or 'choices')")
    return [row["response"]]


def _row_predictions(row: dict, bench: str, where: str) -> list[Prediction]:
    if bench == "bfcl":
        return _bfcl_prediction(row, where)
    if "sql" in row:
        if bench not in SQL_BENCHMARKS or not isinstance(row["sql"], str):
            raise DatasetError(f"{where}: 'sql' is allowed only for spider/bird and must be a string")
        return [Prediction(row.get("response") or "", row["sql"])]
    messages = _chat_messages(row, where)
    if messages is not None:
        return [_message_prediction(m, bench, where) for m in messages]
    return [Prediction(t) for t in _texts(row, where, bench)]


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


def _read_spider_lines(path: str, text: str, col: _Collector) -> None:
    queries = [ln.split("\t")[0] for ln in (raw.strip() for raw in text.splitlines()) if ln]
    n = len(col.examples["spider"])
    if len(queries) > n:  # ids are positions: the surplus lines have no example
        raise DatasetError(
            f"{path}: {len(queries)} queries for the {n} spider examples (one query per line, in dev.json order): "
            f"queries {n + 1}-{len(queries)} have no example"
        )
    for index, sql in enumerate(queries):
        col.add(path, "spider", str(index), [Prediction("", sql)], None, f"{path}: query {index + 1}")


def _read_bird_json(path: str, data: dict, col: _Collector) -> None:
    db_of = {ex.id: ex.meta.get("db_id") for ex in col.examples["bird"]}
    for key, value in data.items():
        sql, sep, db_id = value.partition(BIRD_SEPARATOR)
        if sep and key in db_of and db_id.strip() != db_of[key]:
            raise DatasetError(
                f"{path}: question {key}: prediction is for database {db_id.strip()!r}, "
                f"the benchmark item is on {db_of[key]!r}"
            )
        col.add(path, "bird", key, [Prediction("", sql)], None, f"{path}: question {key}")


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
        if isinstance(row.get("id"), (str, int)) and not isinstance(row.get("id"), bool):
            key = str(row["id"])
        elif bench in IF_BENCHMARKS and isinstance(row.get("prompt"), str):
            key = col.id_for_prompt(bench, row["prompt"])
        else:
            raise DatasetError(
                f"{where}: missing 'id' (string or integer)" + (" or 'prompt'" if bench in IF_BENCHMARKS else "")
            )
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
        if isinstance(whole, dict) and whole and all(k.isdigit() and isinstance(v, str) for k, v in whole.items()):
            _single(bench_of_file, requested, ("bird",), "BIRD's JSON prediction file", path)
            _read_bird_json(path, whole, col)
        elif head and head not in "{[":
            _single(
                bench_of_file,
                requested,
                ("spider",),
                "a plain-text prediction file (one SQL per line) is Spider's official format",
                path,
            )
            _read_spider_lines(path, text, col)
        else:
            _read_jsonl(path, bench_of_file, requested, col)
        col.check_file(path)
    return col.out


__all__ = [
    "BIRD_SEPARATOR",
    "Prediction",
    "parse_fc_result",
    "parse_openai_tool_calls",
    "parse_python_calls",
    "read_predictions",
]
