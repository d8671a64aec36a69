"""Tool-calling rewards: ``format`` (tags only) and ``correctness`` (BFCL AST match), in that order; with
``"rewards": "split"`` in the label also ``function`` (the right function(s) called, arguments unchecked) between
them, so that choosing the function and filling in its arguments are two rewards.

Dataset row (JSONL, one per line), as written by ``python -m mrtpo_openrlhf.cli.task tool convert``::

    {"prompt": "<plain-text prompt: function docs, the request, TOOL_FORMAT_BLOCK>",
     "label": "<JSON string of {\"functions\": [...], \"ground_truth\": [...], \"category\": \"simple\", \"id\": ...}>"}

- ``functions``: BFCL function docs (``name``, ``description``, ``parameters`` with ``properties``/``required``).
- ``ground_truth``: BFCL possible-answer form, ``[{function_name: {param: [acceptable values]}}]``;
  ``""`` in a list marks an optional parameter; ``[]`` for irrelevance.
- ``rewards`` (optional): ``"paper"`` (default: format, correctness) or ``"split"`` (format, function, correctness).
- ``category``: a BFCL category name (``simple_python``, ``multiple``, ``parallel``, ``parallel_multiple``,
  ``irrelevance``, ``live_*``...); it selects the matching rule.

The label is stored as a JSON string because HF ``datasets`` unifies nested dict schemas across rows
(it would add ``None`` keys to function docs); ``score_tool`` accepts a dict or a JSON string.

Verifier blocks (the text MRTPO's replay removes): ``format`` -> ``TOOL_FORMAT_BLOCK`` (also inside
every prompt); ``function`` -> the name(s) of the function(s) to call; ``correctness`` -> the reference call as the
``<tool_call>`` block the model should write.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl, refuse_existing, refuse_same_file, write_jsonl
from mrtpo_openrlhf.rewards.contract import BAD_LABEL, RewardItem, RewardVector, label_object, make_reward_func
from mrtpo_openrlhf.tasks.tool.verifier import (
    AST_CATEGORIES,
    TOOL_FORMAT_BLOCK,
    check_bfcl,
    check_format,
    check_function_choice,
    load_bfcl,
    parse_tool_calls,
    reference_calls,
    render_calls,
)
from mrtpo_openrlhf.verifiers.response import oversize_reason, response_from_query

TOOL_REWARD_SETS = {"paper": ("format", "correctness"), "split": ("format", "function", "correctness")}
TOOL_REWARD_NAMES = TOOL_REWARD_SETS["paper"]
FUNCTION_HEADER = "The function(s) to call:"
PRIMARY_REWARD = "correctness"
REFERENCE_HEADER = "The correct answer calls:"
# End-of-turn markers a decoded rollout may still carry (OpenRLHF decodes with special tokens).


def extract_response(query: str, prompt: str) -> str:
    """The model's response inside OpenRLHF's ``query``, end markers removed (the prompt, which quotes the
    format's tags, is never parsed)."""
    return response_from_query(query, prompt)


def parse_label(label: Any) -> dict:
    """Validate a tool label (dict or JSON string); raise ValueError naming the problem."""
    label = label_object(label)
    functions = label.get("functions")
    ground_truth = label.get("ground_truth", [])
    category = label.get("category")
    if not isinstance(functions, list) or not all(isinstance(f, dict) and "name" in f for f in functions):
        raise ValueError("label.functions must be a list of function docs with a 'name'")
    if not isinstance(category, str) or not category:
        raise ValueError("label.category must be a BFCL category name")
    if not isinstance(ground_truth, list) or not all(isinstance(g, dict) for g in ground_truth):
        raise ValueError("label.ground_truth must be a list of {function_name: {param: [values]}}")
    rewards = label.get("rewards", "paper")
    if rewards not in TOOL_REWARD_SETS:
        raise ValueError(f"label.rewards must be one of {sorted(TOOL_REWARD_SETS)}, got {rewards!r}")
    return {
        "functions": functions,
        "ground_truth": ground_truth,
        "category": category,
        "id": label.get("id"),
        "rewards": rewards,
    }


def reward_names(label: Any) -> tuple[str, ...]:
    """The label's reward set (the paper's two rewards when the label cannot say)."""
    try:
        return TOOL_REWARD_SETS[parse_label(label)["rewards"]]
    except (ValueError, TypeError):
        return TOOL_REWARD_NAMES


def function_block(label: dict) -> str:
    """The function reward's verifier block: which function(s) the request needs, and nothing of the arguments."""
    names = [next(iter(g)) for g in label["ground_truth"] if isinstance(g, dict) and len(g) == 1]
    return f"{FUNCTION_HEADER} {', '.join(names)}" if names else f"{FUNCTION_HEADER} none (no function fits)"


def reference_block(label: dict) -> str:
    """The correctness reward's verifier block: the call the model should have written."""
    calls = reference_calls(label["ground_truth"], label["functions"])
    return f"{REFERENCE_HEADER}\n{render_calls(calls)}"


def score_tool(query: str, prompt: str, label: Any) -> RewardVector:
    """Score one rollout: [format, correctness] (or [format, function, correctness] for a ``split`` label), all 0/1.
    Never raises on a bad response or label."""
    response = extract_response(query, prompt)
    names = reward_names(label)
    too_long = oversize_reason(response, "tool")
    if too_long:
        return RewardVector(
            [RewardItem("format", 0.0, TOOL_FORMAT_BLOCK, too_long, inline=True)]
            + [RewardItem(name, 0.0, "", too_long) for name in names[1:]],
            primary=PRIMARY_REWARD,
            logs={"tool_parseable": 0.0},
        )
    fmt_ok, fmt_why = check_format(response)
    parsed = parse_tool_calls(response)
    try:
        parsed_label = parse_label(label)
    except ValueError as exc:
        correct, why, block = False, f"{BAD_LABEL}: {exc}", ""
        chose, chose_why, chose_block = False, why, ""
    else:
        block = reference_block(parsed_label)
        category, truth = parsed_label["category"], parsed_label["ground_truth"]
        correct, why = check_bfcl(category, parsed_label["functions"], parsed.calls, truth)
        chose, chose_why = check_function_choice(category, parsed.calls, truth)
        chose_block = function_block(parsed_label)
        if not parsed.ok and "irrelevance" not in category:
            why = why if correct else parsed.reason
            chose_why = chose_why if chose else parsed.reason
    items = {
        "format": RewardItem("format", float(fmt_ok), TOOL_FORMAT_BLOCK, fmt_why, inline=True),
        "function": RewardItem("function", float(chose), chose_block, chose_why),
        "correctness": RewardItem("correctness", float(correct), block, why),
    }
    return RewardVector(
        [items[name] for name in names], primary=PRIMARY_REWARD, logs={"tool_parseable": float(parsed.ok)}
    )


reward_func = make_reward_func(score_tool, reward_names)


def unearnable_rewards(label: Any) -> list[tuple[str, str]]:
    """(reward name, reason) for each reward no response can earn under ``label`` (the task registry's
    ``unearnable``, read by the training pre-flight): ``correctness`` when the label's own reference call, written
    and parsed as a response's would be, does not match it. ValueError when the label does not parse."""
    parsed = parse_label(label)
    if "relevance" in parsed["category"]:  # (ir)relevance checks whether a call was made, not which one
        return []
    try:
        calls = parse_tool_calls(f"<think></think>{reference_block(parsed)}").calls
        ok, why = check_bfcl(parsed["category"], parsed["functions"], calls, parsed["ground_truth"])
    except Exception as exc:  # noqa: BLE001 - a ground truth the matcher cannot even read is the same finding
        ok, why = False, f"{type(exc).__name__}: {exc}"
    return [] if ok else [("correctness", f"the label's own reference call does not match it ({why})")]


def example_responses(row: dict) -> list[str]:
    """Two responses to a training row: the reference call in the required layout, and a call to no function."""
    label = label_object(row["label"])
    ref = render_calls(reference_calls(label.get("ground_truth", []), label.get("functions")))
    return [
        f"<think>The request maps to the listed function.</think>\n{ref}",
        '<think>guess</think>\n<tool_call>{"name": "nope", "arguments": {"x": 1}}</tool_call>',
    ]


# ----------------------------------------------------------------------------- converter
def build_prompt(messages: list[dict], functions: list[dict]) -> str:
    """Tokenizer-agnostic plain-text prompt: function docs, the request, then ``TOOL_FORMAT_BLOCK``."""
    docs = "\n".join(json.dumps(f, ensure_ascii=False) for f in functions)  # one doc per line
    turns = []
    for msg in messages:
        role, content = msg.get("role", "user"), msg.get("content", "")
        turns.append(content if role == "user" and len(messages) == 1 else f"{role}: {content}")
    request = "\n".join(turns)
    return (
        "You can call these functions (one JSON description per line):\n"
        f"{docs}\n\n"
        f"Request:\n{request}\n\n"
        f"{TOOL_FORMAT_BLOCK}"
    )


def to_row(item_id: Any, category: str, messages: list[dict], functions: list[dict], ground_truth: list) -> dict:
    label = {"id": item_id, "category": category, "functions": functions, "ground_truth": ground_truth}
    return {"prompt": build_prompt(messages, functions), "label": json.dumps(label, ensure_ascii=False)}


def _rows_from_bfcl(category: str) -> Iterable[dict]:
    for item in load_bfcl(category):
        yield to_row(item.id, category, item.messages, item.functions, item.ground_truth)


def _rows_from_file(path: Path, default_category: str | None) -> Iterable[dict]:
    """BFCL-style rows: ``id``, ``question`` ([[messages]] or [messages]), ``function``, ``ground_truth``,
    and ``category`` (or ``--category``; else the id's prefix before the last ``_<n>``)."""
    for row in iter_jsonl(path):
        question = row.get("question")
        if isinstance(question, list) and question and isinstance(question[0], list):
            question = question[0]
        if not isinstance(question, list) or not all(isinstance(m, dict) for m in question):
            raise DatasetError(f"{path}: row {row.get('id')!r}: 'question' must be a list of chat messages")
        category = row.get("category") or default_category or str(row.get("id", "")).rsplit("_", 1)[0]
        if not category:
            raise DatasetError(f"{path}: row {row.get('id')!r}: no category (add one or pass --category)")
        functions = row.get("function") or row.get("functions") or []
        yield to_row(row.get("id"), category, question, functions, row.get("ground_truth") or [])


def convert(source: str, out: str | Path, limit: int | None = None, category: str | None = None) -> int:
    """Write training rows from a BFCL category name or a BFCL-style JSONL file; returns the row count.

    ``out`` is replaced only once every row is written (a failed run leaves an earlier output intact); ``out``
    equal to the input file is refused.
    """
    if source in AST_CATEGORIES:
        rows = _rows_from_bfcl(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise DatasetError(f"{source}: neither a file nor a BFCL category ({', '.join(AST_CATEGORIES)})")
        refuse_same_file(path, out)
        rows = _rows_from_file(path, category)

    def limited() -> Iterable[dict]:
        for i, row in enumerate(rows):
            if limit is not None and i >= limit:
                return
            yield row

    return write_jsonl(out, limited())


def main(argv: list[str] | None = None, prog: str = "python -m mrtpo_openrlhf.cli.task tool") -> int:
    """The task's command line (``Task.command``): ``convert``."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="cmd", required=True)
    conv = sub.add_parser("convert", help="BFCL data -> prompt/label JSONL rows")
    conv.add_argument("--input", required=True, help="BFCL category name (e.g. simple_python) or a JSONL file")
    conv.add_argument("--out", required=True)
    conv.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it exists (without it, an existing file stops the converter)",
    )
    conv.add_argument("--limit", type=int, default=None)
    conv.add_argument("--category", default=None, help="category for file rows that have none")
    args = parser.parse_args(argv)
    try:
        refuse_same_file(args.input, args.out)
        refuse_existing(args.out, args.overwrite)
        n = convert(args.input, args.out, args.limit, args.category)
    except (DatasetError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} rows to {args.out}")
    return 0
