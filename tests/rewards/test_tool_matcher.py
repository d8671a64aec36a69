"""BFCL AST matching and response parsing: hand-checked cases plus a self-consistency pass on real BFCL data."""

import pytest

from mrtpo_openrlhf.tasks.tool.verifier import (
    AST_CATEGORIES,
    ToolCall,
    check_bfcl,
    check_format,
    irrelevance,
    load_bfcl,
    multiple,
    normalize_string,
    parallel,
    parse_tool_calls,
    reference_calls,
    render_calls,
    simple,
)

AREA = {
    "name": "area",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "float"},
            "count": {"type": "integer"},
            "unit": {"type": "string"},
            "sizes": {"type": "array", "items": {"type": "integer"}},
            "grid": {"type": "array", "items": {"type": "array", "items": {"type": "float"}}},
            "opts": {"type": "dict", "properties": {"mode": {"type": "string"}, "n": {"type": "integer"}}},
            "flag": {"type": "boolean"},
        },
        "required": ["base"],
    },
}
GT = [
    {
        "area": {
            "base": [2.5, 2.0],
            "count": [3, ""],
            "unit": ["Square Meters", ""],
            "sizes": [[1, 2], ""],
            "grid": [[[1.0, 2.5]], ""],
            "opts": [{"mode": ["Fast"], "n": [1, ""]}, ""],
            "flag": [True, ""],
        }
    }
]


def check(args, gt=GT, name="area"):
    return simple([AREA], [ToolCall(name, args)], gt)


def test_int_accepted_for_float_but_not_float_for_int():
    int_gt = [{"area": {"base": [2.0], "count": [3, ""]}}]
    assert check({"base": 2}, int_gt) == (True, "")
    ok, why = check({"base": 2.5, "count": 3.0})
    assert not ok and "count" in why and "integer" in why


def test_bool_is_not_an_integer():
    ok, why = check({"base": 2.5, "count": True})
    assert not ok and "count" in why


def test_optional_params_may_be_omitted_required_may_not():
    assert check({"base": 2.5})[0]
    ok, why = check({"unit": "m"})
    assert not ok and "missing required" in why and "base" in why
    gt = [{"area": {"base": [2.5], "count": [3]}}]  # count not optional in this answer
    ok, why = check({"base": 2.5}, gt)
    assert not ok and "count" in why


def test_acceptable_value_lists():
    assert check({"base": 2.0})[0]
    ok, why = check({"base": 3.0})
    assert not ok and "base" in why


def test_string_normalization():
    assert normalize_string("Square-Meters, 2.5*x^2_it's") == 'squaremeters25x2it"s'
    assert check({"base": 2.5, "unit": "square meters"})[0]
    assert check({"base": 2.5, "unit": "SQUARE_METERS."})[0]
    assert not check({"base": 2.5, "unit": "square feet"})[0]


def test_unknown_param_rejected():
    ok, why = check({"base": 2.5, "colour": "red"})
    assert not ok and "unexpected parameter 'colour'" in why


def test_wrong_function_name_and_dot_rule():
    ok, why = check({"base": 2.5}, name="area2")
    assert not ok and "function name" in why
    dotted = dict(AREA, name="geo.area")
    gt = [{"geo.area": {"base": [2.5]}}]
    assert simple([dotted], [ToolCall("geo.area", {"base": 2.5})], gt)[0]
    assert not simple([dotted], [ToolCall("geo_area", {"base": 2.5})], gt)[0]
    assert simple([dotted], [ToolCall("geo_area", {"base": 2.5})], gt, dot_to_underscore=True)[0]


def test_nested_types():
    assert check({"base": 2.5, "sizes": [1, 2]})[0]
    ok, why = check({"base": 2.5, "sizes": [1.0, 2.0]})  # float elements for integer items
    assert not ok and "element 0" in why
    assert check({"base": 2.5, "grid": [[1, 2.5]]})[0]  # int accepted for float inside nested lists
    ok, why = check({"base": 2.5, "grid": [["1", 2.5]]})
    assert not ok and "element 0" in why
    assert not check({"base": 2.5, "sizes": [2, 1]})[0]  # list order matters for list values


def test_dict_values():
    assert check({"base": 2.5, "opts": {"mode": "fast"}})[0]  # n optional, string normalized
    assert check({"base": 2.5, "opts": {"mode": "fast", "n": 1}})[0]
    ok, why = check({"base": 2.5, "opts": {"mode": "fast", "x": 1}})
    assert not ok and "unexpected dict key" in why
    ok, why = check({"base": 2.5, "opts": {"n": 1}})
    assert not ok and "missing dict key 'mode'" in why
    assert not check({"base": 2.5, "opts": "fast"})[0]


def test_simple_needs_exactly_one_call():
    assert not simple([AREA], [], GT)[0]
    two = [ToolCall("area", {"base": 2.5})] * 2
    ok, why = simple([AREA], two, GT)
    assert not ok and "wrong number of calls" in why
    assert not simple([AREA], None, GT)[0]


def test_parallel_is_order_free():
    gt = [{"area": {"base": [1.0]}}, {"area": {"base": [2.0]}}]
    calls = [ToolCall("area", {"base": 2.0}), ToolCall("area", {"base": 1})]
    assert parallel([AREA], calls, gt) == (True, "")
    assert check_bfcl("parallel", [AREA], calls, gt)[0]
    assert not parallel([AREA], calls[:1], gt)[0]
    ok, why = parallel([AREA], [ToolCall("area", {"base": 2.0})] * 2, gt)
    assert not ok and "expected call" in why


def test_multiple_picks_the_expected_function():
    other = {
        "name": "volume",
        "parameters": {"type": "dict", "properties": {"base": {"type": "float"}}, "required": ["base"]},
    }
    gt = [{"area": {"base": [2.5]}}]
    assert multiple([other, AREA], [ToolCall("area", {"base": 2.5})], gt)[0]
    ok, why = multiple([other, AREA], [ToolCall("volume", {"base": 2.5})], gt)
    assert not ok and "volume" in why


def test_irrelevance_and_relevance():
    assert irrelevance([]) == (True, "")
    assert irrelevance(None)[0]
    assert not irrelevance([ToolCall("area", {})])[0]
    assert check_bfcl("live_relevance", [AREA], [ToolCall("area", {})], [])[0]
    assert not check_bfcl("live_relevance", [AREA], [], [])[0]
    assert not check_bfcl("simple_python", [AREA], [ToolCall("area", {"base": 2.5})], [])[0]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('{"name": "f", "arguments": {}} trailing', "invalid JSON"),
        ('{"name": "f", "arguments": {}}{"name": "g"}', "invalid JSON"),
        ('{"name": "f", "arguments": {"x": NaN}}', "invalid JSON"),
        ('{"name": "f", "args": {}}', "unexpected key"),
        ('{"name": "", "arguments": {}}', "non-empty"),
        ('{"name": "f", "arguments": [1]}', "'arguments' must be"),
        ('[{"name": "f"}, 3]', "call 1"),
        ("", "empty <tool_call>"),
    ],
)
def test_parse_rejects(body, fragment):
    parsed = parse_tool_calls(f"<think>r</think><tool_call>{body}</tool_call>")
    assert parsed.calls is None and fragment in parsed.reason


def test_parse_accepts_object_list_and_unicode():
    one = parse_tool_calls(
        '<think>é</think>\n<tool_call>\n{"name": "météo", "arguments": {"ville": "Zürich"}}\n</tool_call>'
    )
    assert one.calls == [ToolCall("météo", {"ville": "Zürich"})]
    many = parse_tool_calls('<think></think><tool_call>[{"name": "a", "arguments": {}}, {"name": "b"}]</tool_call>')
    assert [c.name for c in many.calls] == ["a", "b"] and many.calls[1].arguments == {}
    assert parse_tool_calls("<think></think><tool_call>[]</tool_call>").calls == []
    # tags mentioned inside the reasoning do not count as the call block
    inner = parse_tool_calls('<think>use <tool_call>x</tool_call></think><tool_call>{"name": "a"}</tool_call>')
    assert inner.ok and inner.calls[0].name == "a"
    assert parse_tool_calls("").reason == "no <tool_call>...</tool_call> block"
    assert parse_tool_calls(None).calls is None


def test_format_is_tags_only():
    assert check_format("<think>x</think>\n<tool_call>not json</tool_call>\n") == (True, "")
    assert not check_format("")[0]
    assert not check_format("<tool_call>{}</tool_call>")[0]
    assert not check_format("<think>x</think><tool_call>{}</tool_call> extra")[0]
    assert not check_format("hi <think>x</think><tool_call>{}</tool_call>")[0]
    assert not check_format("<think>x</think><tool_call>{}</tool_call><tool_call>{}</tool_call>")[0]
    assert not check_format("<think>x</think>between<tool_call>{}</tool_call>")[0]
    assert not check_format(None)[0]


def test_render_then_parse_round_trip():
    calls = [ToolCall("a", {"x": [1, 2], "s": "ü"}), ToolCall("b", {})]
    assert parse_tool_calls(render_calls(calls)).calls == calls
    assert parse_tool_calls(render_calls(calls[:1])).calls == calls[:1]


def _unsatisfiable(item) -> bool:
    """BFCL items whose answer contradicts its own doc (no call can pass under the official rules)."""
    docs = {f["name"]: f.get("parameters", {}) for f in item.functions}
    for entry in item.ground_truth:
        for name, params in entry.items():
            doc = docs.get(name, {})
            props, required = doc.get("properties", {}), doc.get("required", [])
            if any(r not in params or not [v for v in params[r] if v != ""] for r in required):
                return True
            if any(p not in props and "" not in opts for p, opts in params.items()):
                return True
    return False


def test_reference_calls_pass_on_real_bfcl_data():
    """Self-consistency: the first acceptable values of every BFCL AST item pass the matcher."""
    checked, skipped = 0, []
    for category in AST_CATEGORIES:
        if "relevance" in category:
            continue
        for item in load_bfcl(category):
            if _unsatisfiable(item):
                skipped.append(item.id)
                continue
            calls = parse_tool_calls(render_calls(reference_calls(item.ground_truth, item.functions))).calls
            ok, why = check_bfcl(category, item.functions, calls, item.ground_truth)
            assert ok, f"{item.id}: {why}"
            checked += 1
    assert checked > 2400 and len(skipped) <= 10, (checked, skipped)


def test_irrelevance_data_loads_without_answers():
    items = load_bfcl("irrelevance")
    assert len(items) == 240 and all(it.ground_truth == [] and it.functions for it in items)
    assert items[0].messages[0]["role"] == "user"
    with pytest.raises(ValueError, match="non-AST"):
        load_bfcl("multi_turn_base")
