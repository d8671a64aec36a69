"""The BFCL benchmark (AST categories): loader, official scorer, leaderboard summary, prediction formats, BFCL's
score files.

Data: the installed ``bfcl_eval`` package data (``--data-dir`` may point at another BFCL v4 data folder).
Scoring: BFCL's AST checker per category (``verifier/ast_match``); aggregates as BFCL's leaderboard (``summarize``).

Prediction formats: besides the project's ``<tool_call>`` layout in ``response``, BFCL's own prompt-mode output (a
python call list such as ``[get_weather(city='Paris'), f(x=1)]``, in ``response`` or BFCL's ``result`` field, parsed
with ``ast``, never evaluated), BFCL's FC-mode ``result`` list ``[{"name": "<json args>"}]``, OpenAI-style
``"tool_calls": [{"type": "function", "function": {"name": ..., "arguments": "<json>"}}]``, and a chat message's
``tool_calls`` where it has them.
"""

from __future__ import annotations

import ast
import json
import operator
from pathlib import Path
from typing import Any, Iterable

from mrtpo_openrlhf.data.jsonl import DatasetError
from mrtpo_openrlhf.evaluation.data import EvalDataError, EvalExample
from mrtpo_openrlhf.evaluation.predictions import Prediction, chat_messages, message_text, texts
from mrtpo_openrlhf.evaluation.scoring import _accuracy_by, _flat, _n_examples, combine
from mrtpo_openrlhf.tasks.tool.reward import build_prompt, extract_response
from mrtpo_openrlhf.tasks.tool.verifier import (
    AST_CATEGORIES,
    BFCL_VERSION_PREFIX,
    ParsedCalls,
    ToolCall,
    check_bfcl,
    load_bfcl,
    parse_tool_calls,
)

BFCL_NON_LIVE_SIMPLE = ("simple_python", "simple_java", "simple_javascript")
BFCL_NON_LIVE_GROUPS = ("multiple", "parallel", "parallel_multiple")
BFCL_LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


# ----------------------------------------------------------------------------------------------- loader
def _bfcl_examples(data_dir: Path | None, categories: tuple[str, ...]) -> list[EvalExample]:
    out = []
    for category in categories:
        try:
            items = load_bfcl(category, data_dir)
        except FileNotFoundError as exc:
            raise EvalDataError(
                f"{exc}. Expected layout: BFCL v4 data folder with BFCL_v4_<category>.json and "
                "possible_answer/BFCL_v4_<category>.json (the bfcl-eval package data)"
            ) from None
        for item in items:
            target = {
                "category": category,
                "functions": item.functions,
                "ground_truth": item.ground_truth,
                "question": [item.messages],  # BFCL's turns, for its score files' "prompt"
            }
            out.append(
                EvalExample(
                    item.id, "bfcl", build_prompt(item.messages, item.functions), target, {"category": category}
                )
            )
    return out


def load(data_dir: Path | None, categories: tuple[str, ...] = AST_CATEGORIES, **_: Any) -> list[EvalExample]:
    """The BFCL items of ``categories`` (``--bfcl-category``), from the installed bfcl-eval data or ``data_dir``."""
    bad = [c for c in categories if c not in AST_CATEGORIES]
    if bad:
        raise ValueError(f"unknown BFCL categories {bad}; choose from {', '.join(AST_CATEGORIES)}")
    return _bfcl_examples(data_dir, tuple(categories))


# ----------------------------------------------------------------------------------------------- scorer
def score(example: EvalExample, response: str, answer: ParsedCalls | None = None) -> dict[str, Any]:
    """BFCL AST decision for one item: ``answer`` = calls a predictions file already gave (BFCL's python-call list,
    OpenAI tool_calls), else the training layout's ``<tool_call>`` block, parsed strictly."""
    parsed = answer if answer is not None else parse_tool_calls(extract_response(response or "", ""))
    target = example.target
    ok, why = check_bfcl(target["category"], target["functions"], parsed.calls, target["ground_truth"])
    if not ok and not parsed.ok and "irrelevance" not in target["category"]:
        why = parsed.reason
    calls = None if parsed.calls is None else [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]
    record = {"answer": calls, "category": target["category"], "verdict": ok, "reason": why}
    if not ok:  # what BFCL's score file shows of a wrong answer (``bfcl_score_files``)
        record["error_type"] = bfcl_error_type(target["category"], why, parsed.ok)
        record["possible_answer"] = target["ground_truth"]
        record["functions"] = target["functions"]
        record["question"] = target.get("question")
    return record


# Our checker's reasons -> BFCL's ``error_type`` (bfcl_eval/eval_checker/ast_eval/ast_checker.py), by the first
# phrase that matches; the reason text itself is ours, not BFCL's message.
_ERROR_TYPES = (
    ("wrong number of calls", "{checker}:wrong_count"),
    ("no call matches expected call", "parallel_function_checker_no_order:cannot_find_match"),
    ("called ", "multiple_function_checker:wrong_count"),
    ("function name ", "simple_function_checker:wrong_func_name"),
    ("missing required parameter", "simple_function_checker:missing_required"),
    ("unexpected parameter", "simple_function_checker:unexpected_param"),
    ("(not optional)", "simple_function_checker:missing_optional"),
    (" should be ", "type_error:simple"),
    (" is not one of ", "value_error:others"),
)


def bfcl_error_type(category: str, reason: str, parsed: bool) -> str:
    """BFCL's ``error_type`` for a wrong answer in ``category`` with our checker's ``reason``."""
    if "irrelevance" in category:
        return "irrelevance_error:decoder_success"
    if "relevance" in category:
        return "relevance_error:decoder_failed"
    if not parsed:
        return "ast_decoder:decoder_failed"
    checker = (
        "parallel_function_checker_no_order"
        if "parallel" in category
        else "multiple_function_checker"
        if "multiple" in category
        else "simple_function_checker"
    )
    for phrase, error_type in _ERROR_TYPES:
        if phrase in reason:
            return error_type.format(checker=checker)
    return f"{checker}:unclear"


# ----------------------------------------------------------------------------------------------- summary
def summarize(records: list[dict]) -> dict[str, Any]:
    """Per-category AST accuracy (with BFCL's ``correct_count``/``total_count`` as ``correct``/``count``) and
    BFCL's leaderboard aggregates, each with its standard error (``combine``).

    - ``non_live_ast`` = unweighted mean of [mean(simple_python, simple_java, simple_javascript), multiple,
      parallel, parallel_multiple] (BFCL ``calculate_unweighted_accuracy``);
    - ``live_ast`` = count-weighted mean of live_simple, live_multiple, live_parallel, live_parallel_multiple
      (``calculate_weighted_accuracy``);
    - irrelevance / live_irrelevance / live_relevance are reported on their own, as BFCL does.
    An aggregate is None ("N/A") unless every member category was evaluated (BFCL would count a missing one as 0).
    ``ast_mean`` = unweighted mean over the evaluated call-checking categories (for partial runs).
    """
    per_category = _accuracy_by(records, "category")

    def complete(names: Iterable[str]) -> bool:
        return all(name in per_category for name in names)

    out: dict[str, Any] = {"n": _n_examples(records), "by_category": per_category}
    non_live = live = mean = (None, None)
    if complete(BFCL_NON_LIVE_SIMPLE + BFCL_NON_LIVE_GROUPS):
        n_parts = 1 + len(BFCL_NON_LIVE_GROUPS)
        non_live = combine(
            [(1 / (n_parts * len(BFCL_NON_LIVE_SIMPLE)), per_category[c]) for c in BFCL_NON_LIVE_SIMPLE]
            + [(1 / n_parts, per_category[c]) for c in BFCL_NON_LIVE_GROUPS]
        )
    if complete(BFCL_LIVE):
        count = sum(per_category[c]["count"] for c in BFCL_LIVE)
        live = combine([(per_category[c]["count"] / count, per_category[c]) for c in BFCL_LIVE])
    call_categories = [c for c in per_category if "relevance" not in c]
    if call_categories:
        mean = combine([(1 / len(call_categories), per_category[c]) for c in call_categories])
    for key, (value, stderr) in (("non_live_ast", non_live), ("live_ast", live)):
        out[key], out[f"{key}_stderr"] = value, stderr
    for key in ("irrelevance", "live_irrelevance", "live_relevance"):
        stats = per_category.get(key, {"accuracy": None, "stderr": None})
        out.update(_flat(key, stats))
    out["ast_mean"], out["ast_mean_stderr"] = mean
    return out


def columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    cols = [
        (name, key)
        for name, key in (("BFCL non-live", "non_live_ast"), ("BFCL live", "live_ast"))
        if summary[key] is not None
    ]
    return cols or [("BFCL AST", "ast_mean")]


# ----------------------------------------------------------------------------------------------- score files
def bfcl_wrong_entry(record: dict, model_dir: str) -> dict:
    """One wrong answer as BFCL's ``eval_runner`` writes it: ``prompt`` (the test entry: id, question, function),
    and for a call category ``model_result_raw``, ``model_result_decoded`` (``[{func: args}]``, or null when the
    response did not parse) and ``possible_answer``; for (ir)relevance ``model_result`` and ``decoded_result``."""
    category = record["category"]
    decoded = None if record["answer"] is None else [{c["name"]: c["arguments"]} for c in record["answer"]]
    raw = record.get("response") or ("" if decoded is None else json.dumps(decoded, ensure_ascii=False))
    entry = {
        "id": record["id"],
        "model_name": model_dir,
        "test_category": category,
        "valid": False,
        "error": [record["reason"]],
        "error_type": record.get("error_type") or bfcl_error_type(category, record["reason"], decoded is not None),
        "prompt": {"id": record["id"], "question": record.get("question"), "function": record.get("functions")},
    }
    if "relevance" in category:
        return {**entry, "model_result": raw, "decoded_result": decoded}
    return {
        **entry,
        "model_result_raw": raw,
        "model_result_decoded": decoded,
        "possible_answer": record.get("possible_answer"),
    }


def bfcl_score_files(benchmark: str, records: list[dict], summary: dict[str, Any], label: str) -> dict[str, tuple]:
    """BFCL's score files, ``<label>/<non_live|live>/BFCL_v4_<category>_score.json`` (JSON lines): a header
    ``{"accuracy", "correct_count", "total_count"}`` then one entry per wrong example (``bfcl_wrong_entry``), as
    ``save_eval_results`` writes them (``correct_count`` is fractional when samples make it an expected count).
    {key: (path, rows)}."""
    model_dir = label.replace("/", "_")
    files: dict[str, tuple] = {}
    for category, stats in summary["by_category"].items():
        group = "live" if category.startswith("live_") else "non_live"
        rows: list[dict] = [
            {"accuracy": stats["accuracy"], "correct_count": stats["correct"], "total_count": stats["count"]}
        ]
        for r in records:
            if r["category"] == category and not r["verdict"]:
                wrong = bfcl_wrong_entry(r, model_dir)
                rows.append({**wrong, "sample": r["sample"]} if "sample" in r else wrong)
        rel = f"{model_dir}/{group}/{BFCL_VERSION_PREFIX}_{category}_score.json"
        files[f"{benchmark}:{rel}"] = (f"{benchmark}/{rel}", rows)
    return files


# ----------------------------------------------------------------------------------------------- calls
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
def _message_prediction(message: dict, where: str) -> Prediction:
    """The message's ``tool_calls`` where it has them (OpenAI shape), else its text as a response."""
    if message.get("tool_calls") is not None:
        calls = message["tool_calls"]
        return Prediction(json.dumps(calls, ensure_ascii=False), parse_openai_tool_calls(calls))
    text = message_text(message, where)
    if text is None:
        raise DatasetError(f"{where}: the message has no 'content' and no 'tool_calls'")
    return _text_prediction(text)


def _text_prediction(text: str) -> Prediction:
    """The project's <tool_call> layout, else BFCL's prompt-mode python call list."""
    return Prediction(text, None if "<tool_call>" in text else parse_python_calls(text))


def row_predictions(row: dict, where: str) -> list[Prediction]:
    """The samples of one predictions row (the formats of the module docstring)."""
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
    messages = chat_messages(row, where)
    if messages is not None:
        return [_message_prediction(m, where) for m in messages]
    return [_text_prediction(text) for text in texts(row, where, "'result', 'tool_calls', ")]
