"""BFCL AST matching of parsed tool calls against BFCL possible answers.

Follows the decision rules of BFCL's official AST checker (``bfcl_eval/eval_checker/ast_eval``),
re-implemented for calls that arrive as JSON (so values are already typed):

- Function name: exact match with the expected name. BFCL rewrites ``.`` to ``_`` in the expected
  name for models whose API forbids dots; here that is opt-in (``dot_to_underscore=True``) because
  our layout lets the model write the documented name verbatim.
- Every ``required`` parameter of the function doc must be present; a parameter that is not in the
  doc or not in the possible answer is rejected.
- Types come from the doc's type names (BFCL's ``string/integer/float/boolean/array/tuple/dict/any``
  plus the Java/JavaScript names used in BFCL v4). Types are exact (``True`` is not an integer);
  an int is accepted where a float is expected, a float is never accepted for an int. Array
  elements are checked against ``items`` recursively (int accepted for float there too).
- A possible answer whose values have another type than the doc says is a "variable" answer
  (BFCL writes variable names as strings): then any value of the answer's type is compared raw.
- Each parameter has a list of acceptable values; ``""`` in the list means it may be omitted.
  Strings are compared after ``normalize_string``; lists compare their string elements normalized;
  dicts are matched key by key (missing keys need ``""``); lists of dicts element by element.
- Parallel categories: order-free, matched greedily per expected call like the official checker.
  "multiple": exactly one call, matched against the one expected function among several offered.
  Irrelevance: passes iff there is no call (an unparseable block counts as no call, as in BFCL).
  Relevance (``live_relevance``): passes iff there is at least one call.

Every check returns ``(ok, reason)``; ``reason`` is ``""`` on success and never raises on bad input.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from mrtpo_openrlhf.tasks.tool.verifier.layout import ToolCall

_STRIP_RE = re.compile(r"[ ,./\-_*^]")

# Doc type name -> Python type of a JSON-decoded value. "any" is a string, as in BFCL's Python map.
TYPE_MAP: dict[str, type] = {
    "string": str,
    "String": str,
    "char": str,
    "any": str,
    "integer": int,
    "int": int,
    "long": int,
    "short": int,
    "byte": int,
    "float": float,
    "double": float,
    "number": float,
    "boolean": bool,
    "Boolean": bool,
    "array": list,
    "tuple": list,
    "Array": list,
    "ArrayList": list,
    "list": list,
    "dict": dict,
    "object": dict,
    "HashMap": dict,
}

Verdict = tuple[bool, str]
OK: Verdict = (True, "")


def normalize_string(text: str) -> str:
    """BFCL string normalization: drop spaces and ``,./-_*^``, lowercase, ``'`` -> ``"``."""
    return _STRIP_RE.sub("", text).lower().replace("'", '"')


def _norm(value: Any) -> Any:
    return normalize_string(value) if isinstance(value, str) else value


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from numbers (Python's ``True == 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _same_typed_list(value: list, answer: Any) -> bool:
    return (
        isinstance(answer, list)
        and len(answer) == len(value)
        and all(type(v) is type(a) and _norm(v) == _norm(a) for v, a in zip(value, answer))
    )


def _first_answer_type(acceptable: Sequence[Any]) -> type | None:
    for answer in acceptable:
        if answer != "":
            return type(answer)
    return None


def _type_ok(value: Any, expected: type) -> bool:
    return type(value) is expected or (expected is float and type(value) is int)


def _elements_ok(value: list, item_schema: Any) -> Verdict:
    """Check the element types of an array value against the doc's ``items`` (recursively)."""
    if not isinstance(item_schema, dict):
        return OK
    item_type = item_schema.get("type", "")
    expected = TYPE_MAP.get(item_type)
    if expected is None or item_type == "any":  # "any" elements may be of any JSON type
        return OK
    for i, element in enumerate(value):
        if not _type_ok(element, expected):
            return False, f"element {i} is {type(element).__name__}, expected {item_schema.get('type')}"
        if expected is list:
            ok, why = _elements_ok(element, item_schema.get("items"))
            if not ok:
                return False, f"element {i}: {why}"
    return OK


def _dict_matches(value: dict, acceptable: Sequence[Any]) -> Verdict:
    reason = "no acceptable dict"
    for candidate in acceptable:
        if not isinstance(candidate, dict):
            continue
        reason = ""
        for key, item in value.items():
            if key not in candidate:
                reason = f"unexpected dict key {key!r}"
                break
            if _norm(item) not in [_norm(a) for a in candidate[key]]:
                reason = f"dict key {key!r}: {item!r} not in {candidate[key]!r}"
                break
        if not reason:
            missing = [k for k, opts in candidate.items() if k not in value and "" not in opts]
            if missing:
                reason = f"missing dict key {missing[0]!r}"
        if not reason:
            return OK
    return False, reason


def _list_of_dicts_matches(value: list, acceptable: Sequence[Any]) -> Verdict:
    reason = "no acceptable list of dicts"
    for candidate in acceptable:
        if not isinstance(candidate, list):
            continue
        if len(candidate) != len(value):
            reason = f"expected {len(candidate)} dicts, got {len(value)}"
            continue
        for i, (item, want) in enumerate(zip(value, candidate)):
            ok, why = _dict_matches(item, [want]) if isinstance(item, dict) else (False, "not a dict")
            if not ok:
                reason = f"dict {i}: {why}"
                break
        else:
            return OK
    return False, reason


def _value_matches(param: str, value: Any, schema: dict, acceptable: Sequence[Any]) -> Verdict:
    """Type and value check of one provided argument against its doc schema and acceptable values."""
    type_name = schema.get("type", "") if isinstance(schema, dict) else ""
    expected = TYPE_MAP.get(type_name)
    if expected is float and type(value) is int:
        value = float(value)
    answer_type = _first_answer_type(acceptable)
    is_variable = expected is not None and answer_type is not None and answer_type is not expected
    if is_variable and expected is float and answer_type is int:
        is_variable = False  # an int answer for a float param is just a number, compared numerically
    if expected is not None:
        if type(value) is expected:
            if expected is list and not is_variable:
                ok, why = _elements_ok(value, schema.get("items"))
                # A ground truth that itself breaks the doc's item type (a few BFCL items do) still
                # accepts exactly its own values, compared with exact element types.
                if not ok and not any(_same_typed_list(value, a) for a in acceptable):
                    return False, f"parameter {param!r}: {why}"
        elif not (is_variable and type(value) is answer_type):
            return False, f"parameter {param!r} should be {type_name}, got {type(value).__name__}"
    if is_variable or expected is None:
        matched = any(_same(value, a) for a in acceptable)
    elif expected is dict:
        ok, why = _dict_matches(value, acceptable)
        return (True, "") if ok else (False, f"parameter {param!r}: {why}")
    elif (
        expected is list
        and isinstance(schema.get("items"), dict)
        and schema["items"].get("type") in ("dict", "object", "HashMap")
    ):
        ok, why = _list_of_dicts_matches(value, acceptable)
        return (True, "") if ok else (False, f"parameter {param!r}: {why}")
    elif expected is str:
        matched = normalize_string(value) in [normalize_string(a) for a in acceptable if isinstance(a, str)]
    elif expected is list:
        normalized = [_norm(v) for v in value]
        matched = any(isinstance(a, list) and normalized == [_norm(v) for v in a] for a in acceptable)
    else:
        matched = any(_same(value, a) for a in acceptable if a != "")
    if not matched:
        return False, f"parameter {param!r}: {value!r} is not one of {list(acceptable)!r}"
    return OK


def _find_doc(functions: Iterable[dict], name: str) -> dict | None:
    for doc in functions:
        if isinstance(doc, dict) and doc.get("name") == name:
            return doc
    return None


def check_call(call: ToolCall, doc: dict, expected: dict, dot_to_underscore: bool = False) -> Verdict:
    """Match one call against one expected call ``{function_name: {param: [acceptable values]}}``."""
    if not isinstance(expected, dict) or len(expected) != 1:
        return False, f"bad ground truth entry {expected!r}: expected one function name"
    ((want_name, want_params),) = expected.items()
    if not isinstance(want_params, dict):
        return False, f"bad ground truth for {want_name!r}: parameters must be a dict"
    if dot_to_underscore:
        want_name = want_name.replace(".", "_")
    if call.name != want_name:
        return False, f"function name {call.name!r} != expected {want_name!r}"
    params = doc.get("parameters") or {}
    properties = params.get("properties") or {}
    for req in params.get("required") or []:
        if req not in call.arguments:
            return False, f"missing required parameter {req!r}"
    for param, value in call.arguments.items():
        if param not in properties or param not in want_params:
            return False, f"unexpected parameter {param!r}"
        ok, why = _value_matches(param, value, properties[param], want_params[param])
        if not ok:
            return False, why
    for param, acceptable in want_params.items():
        if param not in call.arguments and "" not in acceptable:
            return False, f"missing parameter {param!r} (not optional)"
    return OK


def _check_against(functions: Sequence[dict], call: ToolCall, expected: dict, dot_to_underscore: bool) -> Verdict:
    if not isinstance(expected, dict) or len(expected) != 1:
        return False, f"bad ground truth entry {expected!r}"
    name = next(iter(expected))
    doc = _find_doc(functions, name)
    if doc is None:
        return False, f"expected function {name!r} is not among the offered functions"
    return check_call(call, doc, expected, dot_to_underscore)


def _count_ok(calls: Sequence[ToolCall] | None, ground_truth: Sequence[dict]) -> Verdict:
    if calls is None:
        return False, "no parseable call"
    if len(calls) != len(ground_truth):
        return False, f"wrong number of calls: {len(calls)}, expected {len(ground_truth)}"
    return OK


def simple(
    functions: Sequence[dict],
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict],
    dot_to_underscore: bool = False,
) -> Verdict:
    """BFCL simple_*: exactly one call to the (only) expected function."""
    ok, why = _count_ok(calls, ground_truth)
    if not ok:
        return ok, why
    return _check_against(functions, calls[0], ground_truth[0], dot_to_underscore)


def multiple(
    functions: Sequence[dict],
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict],
    dot_to_underscore: bool = False,
) -> Verdict:
    """BFCL multiple / live_multiple: several functions offered, exactly one call to the right one."""
    return simple(functions, calls, ground_truth, dot_to_underscore)


def parallel(
    functions: Sequence[dict],
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict],
    dot_to_underscore: bool = False,
) -> Verdict:
    """BFCL parallel*: as many calls as expected, matched in any order.

    Like the official checker, each expected call takes the first unmatched call that passes.
    """
    ok, why = _count_ok(calls, ground_truth)
    if not ok:
        return ok, why
    unmatched = list(range(len(calls)))
    for i, expected in enumerate(ground_truth):
        reasons = []
        for j in unmatched:
            ok, why = _check_against(functions, calls[j], expected, dot_to_underscore)
            if ok:
                unmatched.remove(j)
                break
            reasons.append(f"call {j}: {why}")
        else:
            return False, f"no call matches expected call {i}: " + "; ".join(reasons)
    return OK


def parallel_multiple(
    functions: Sequence[dict],
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict],
    dot_to_underscore: bool = False,
) -> Verdict:
    """BFCL parallel_multiple: several functions offered, several calls in any order."""
    return parallel(functions, calls, ground_truth, dot_to_underscore)


def irrelevance(calls: Sequence[ToolCall] | None) -> Verdict:
    """BFCL irrelevance: passes iff the model made no call (``[]`` or no parseable block)."""
    if calls:
        return False, f"made {len(calls)} call(s) although no function fits"
    return OK


def relevance(calls: Sequence[ToolCall] | None) -> Verdict:
    """BFCL live_relevance: passes iff the model made at least one call (arguments are not checked)."""
    if not calls:
        return False, "made no call although a function fits"
    return OK


def check_bfcl(
    category: str,
    functions: Sequence[dict],
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict] | None,
    dot_to_underscore: bool = False,
) -> Verdict:
    """Dispatch on a BFCL category name, the way BFCL does (substring tests, in this order)."""
    if not isinstance(category, str):
        return False, f"category must be a string, got {type(category).__name__}"
    if "irrelevance" in category:
        return irrelevance(calls)
    if "relevance" in category:
        return relevance(calls)
    if not isinstance(ground_truth, (list, tuple)) or not ground_truth:
        return False, "no ground truth for a call-checking category"
    if not isinstance(functions, (list, tuple)):
        return False, "functions must be a list of function docs"
    if "parallel" in category:
        return parallel(functions, calls, ground_truth, dot_to_underscore)
    if "multiple" in category:
        return multiple(functions, calls, ground_truth, dot_to_underscore)
    return simple(functions, calls, ground_truth, dot_to_underscore)


def check_function_choice(
    category: str,
    calls: Sequence[ToolCall] | None,
    ground_truth: Sequence[dict] | None,
    dot_to_underscore: bool = False,
) -> Verdict:
    """Whether the response calls the right function(s), arguments unchecked: the multiset of called names equals
    the ground truth's (the first thing BFCL's checker compares). Implied by ``check_bfcl`` passing."""
    if not isinstance(category, str):
        return False, f"category must be a string, got {type(category).__name__}"
    if "irrelevance" in category:
        return irrelevance(calls)
    if "relevance" in category:
        return relevance(calls)
    if not isinstance(ground_truth, (list, tuple)) or not ground_truth:
        return False, "no ground truth for a call-checking category"
    ok, why = _count_ok(calls, ground_truth)
    if not ok:
        return ok, why
    want = []
    for expected in ground_truth:
        if not isinstance(expected, dict) or len(expected) != 1:
            return False, f"bad ground truth entry {expected!r}"
        name = next(iter(expected))
        want.append(name.replace(".", "_") if dot_to_underscore else name)
    got = [call.name for call in calls]
    if sorted(got) != sorted(want):
        return False, f"called {sorted(got)}, expected {sorted(want)}"
    return OK


def _reference_dict(candidate: dict) -> dict:
    return {k: opts[0] for k, opts in candidate.items() if isinstance(opts, list) and opts and opts[0] != ""}


def _reference_value(answer: Any) -> Any:
    """A concrete value from one acceptable answer: dict answers map each key to its acceptable values."""
    if isinstance(answer, dict):
        return _reference_dict(answer)
    if isinstance(answer, list) and answer and all(isinstance(a, dict) for a in answer):
        return [_reference_dict(a) for a in answer]
    return answer


def reference_calls(ground_truth: Sequence[dict], functions: Sequence[dict] | None = None) -> list[ToolCall]:
    """The canonical correct calls: the first acceptable value of each parameter, omitted when it is ``""``.

    With ``functions`` (the docs), a parameter the doc requires takes its first non-empty value even
    when ``""`` comes first, and an optional parameter the doc does not declare is left out (a few
    BFCL answers disagree with their docs that way).
    """
    calls = []
    for entry in ground_truth or []:
        for name, params in entry.items():
            doc = _find_doc(functions, name) if functions else None
            doc_params = (doc or {}).get("parameters") or {}
            required = set(doc_params.get("required") or [])
            declared = doc_params.get("properties")
            args = {}
            for param, opts in (params or {}).items():
                values = [o for o in opts if o != ""] if param in required else opts[:1]
                if not values or values[0] == "":
                    continue
                if declared is not None and param not in declared and "" in opts:
                    continue
                args[param] = _reference_value(values[0])
            calls.append(ToolCall(name, args))
    return calls
