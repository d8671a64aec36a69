"""Tool reward vector: names/order, blocks, never raising, the converter and the mini fixture."""

import importlib.util
import json
from pathlib import Path

from mrtpo_openrlhf.data.jsonl import read_jsonl
from mrtpo_openrlhf.rewards.contract import BLOCKS_KEY, NAMES_KEY, REASONS_KEY, VALUES_KEY, parse_extra_logs
from mrtpo_openrlhf.tasks.tool.reward import (
    TOOL_REWARD_NAMES,
    convert,
    extract_response,
    main,
    reward_func,
    score_tool,
)
from mrtpo_openrlhf.tasks.tool.verifier import TOOL_FORMAT_BLOCK, reference_calls, render_calls

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "mrtpo_openrlhf" / "data" / "tool" / "train_mini.jsonl"
FUNCS = [
    {
        "name": "add",
        "description": "Add.",
        "parameters": {
            "type": "dict",
            "properties": {"a": {"type": "integer"}, "b": {"type": "float"}},
            "required": ["a", "b"],
        },
    }
]
LABEL = {"functions": FUNCS, "ground_truth": [{"add": {"a": [1], "b": [2.5]}}], "category": "simple_python"}
PROMPT = "<|im_start|>user\nAdd 1 and 2.5\n" + TOOL_FORMAT_BLOCK + "<|im_end|>\n<|im_start|>assistant\n"
GOOD = '<think>easy</think>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2.5}}\n</tool_call><|im_end|>'


def test_good_response_earns_both_rewards():
    vec = score_tool(PROMPT + GOOD, PROMPT, LABEL)
    assert vec.names == list(TOOL_REWARD_NAMES) == ["format", "correctness"]
    assert vec.values == [1.0, 1.0] and vec.primary_value() == 1.0
    assert vec.items[0].block == TOOL_FORMAT_BLOCK
    assert '"name": "add"' in vec.items[1].block and '"b": 2.5' in vec.items[1].block


def test_rewards_are_independent():
    wrong_value = GOOD.replace('"b": 2.5', '"b": 3')
    assert score_tool(PROMPT + wrong_value, PROMPT, LABEL).values == [1.0, 0.0]
    no_think = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2.5}}</tool_call>'
    vec = score_tool(PROMPT + no_think, PROMPT, LABEL)
    assert vec.values == [0.0, 1.0] and vec.items[0].reason
    garbage = GOOD.replace("}\n</tool_call>", "} oops\n</tool_call>")
    vec = score_tool(PROMPT + garbage, PROMPT, json.dumps(LABEL))  # label as a JSON string works too
    assert vec.values == [1.0, 0.0] and "invalid JSON" in vec.items[1].reason


def test_prompt_tags_are_never_parsed():
    # The prompt holds the format instructions with the tags; an empty response earns nothing.
    vec = score_tool(PROMPT, PROMPT, LABEL)
    assert vec.values == [0.0, 0.0]
    assert extract_response(PROMPT + GOOD, PROMPT).endswith("</tool_call>")
    assert extract_response("junk" + GOOD, "unrelated prompt").endswith("</tool_call>")


def test_bad_labels_and_inputs_never_raise():
    for label in (None, "not json", 3, {"functions": "x"}, {"functions": FUNCS, "category": ""}):
        out = reward_func([PROMPT + GOOD], [PROMPT], [label])
        vec = parse_extra_logs(out["extra_logs"])
        assert vec.names == ["format", "correctness"]
        assert vec.values == [1.0, 0.0]  # the format reward needs no label
        assert out["extra_logs"][REASONS_KEY][1].startswith("bad label")
    out = reward_func([None], [None], [None])
    assert out["extra_logs"][VALUES_KEY] == [0.0, 0.0] and float(out["rewards"][0]) == 0.0


def test_reward_func_contract_shapes():
    out = reward_func([PROMPT + GOOD], [PROMPT], [LABEL])
    assert out["rewards"].shape == (1,) and float(out["rewards"][0]) == 2.0 and float(out["scores"][0]) == 1.0
    assert out["extra_logs"][NAMES_KEY] == ["format", "correctness"]
    assert len(out["extra_logs"][BLOCKS_KEY]) == 2 and out["extra_logs"]["tool_parseable"] == 1.0


def test_unicode_arguments():
    label = {
        "functions": [
            {
                "name": "météo",
                "parameters": {"type": "dict", "properties": {"ville": {"type": "string"}}, "required": ["ville"]},
            }
        ],
        "ground_truth": [{"météo": {"ville": ["Zürich"]}}],
        "category": "simple_python",
    }
    resp = '<think>…</think><tool_call>{"name": "météo", "arguments": {"ville": "zürich"}}</tool_call>'
    assert score_tool(resp, "", label).values == [1.0, 1.0]


def test_mini_fixture_rows_score_their_own_reference():
    rows = read_jsonl(FIXTURE)
    assert 15 <= len(rows) <= 30
    for row in rows:
        assert TOOL_FORMAT_BLOCK in row["prompt"]
        label = json.loads(row["label"])
        assert label["category"] in ("simple_python", "parallel")
        ref = render_calls(reference_calls(label["ground_truth"], label["functions"]))
        vec = score_tool(row["prompt"] + "<think>ok</think>" + ref, row["prompt"], row["label"])
        assert vec.values == [1.0, 1.0], (label["id"], vec.items[1].reason)


def test_convert_from_category_and_file(tmp_path):
    out = tmp_path / "rows.jsonl"
    assert convert("parallel", out, limit=3) == 3
    rows = read_jsonl(out)
    assert json.loads(rows[0]["label"])["category"] == "parallel"
    src = tmp_path / "bfcl.jsonl"
    src.write_text(
        json.dumps(
            {
                "id": "simple_python_7",
                "question": [[{"role": "user", "content": "add 1 2.5"}]],
                "function": FUNCS,
                "ground_truth": LABEL["ground_truth"],
            }
        )
        + "\n"
    )
    assert main(["convert", "--input", str(src), "--out", str(tmp_path / "b.jsonl")]) == 0
    row = read_jsonl(tmp_path / "b.jsonl")[0]
    assert json.loads(row["label"])["category"] == "simple_python" and "add 1 2.5" in row["prompt"]
    assert main(["convert", "--input", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2


def test_reward_funcs_file_loads_like_openrlhf():
    spec = importlib.util.spec_from_file_location("reward_tool", REPO / "reward_funcs" / "tool.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert float(module.reward_func([PROMPT + GOOD], [PROMPT], [LABEL])["scores"][0]) == 1.0


def test_rewards_benchmark_scores_the_tool_fixture():
    spec = importlib.util.spec_from_file_location("bench_rewards", REPO / "benchmarks" / "rewards.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.bench_family("tool", seconds=0.05)
    assert result["rows"] == 20 and result["per_s"] > 0
    assert result["mean_total_reward"] == 1.5  # reference responses earn 2, the wrong call earns format only


SPLIT = {**LABEL, "rewards": "split"}
TWO_FUNCS = FUNCS + [{"name": "sub", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}}}]
MULTI = {**SPLIT, "functions": TWO_FUNCS, "category": "multiple"}


def test_split_label_adds_the_function_choice_reward_between_format_and_correctness():
    vec = score_tool(PROMPT + GOOD, PROMPT, SPLIT)
    assert vec.names == ["format", "function", "correctness"] and vec.values == [1.0, 1.0, 1.0]
    assert vec.items[1].block == "The function(s) to call: add" and '"b": 2.5' not in vec.items[1].block
    # right function, wrong argument: the choice is earned, the call is not
    assert score_tool(PROMPT + GOOD.replace('"b": 2.5', '"b": 3'), PROMPT, SPLIT).values == [1.0, 1.0, 0.0]
    # the other offered function: neither
    other = GOOD.replace('"name": "add", "arguments": {"a": 1, "b": 2.5}', '"name": "sub", "arguments": {"a": 1}')
    vec = score_tool(PROMPT + other, PROMPT, MULTI)
    assert vec.values == [1.0, 0.0, 0.0] and "expected ['add']" in vec.items[1].reason
    # two calls where one is expected: the count is wrong, so the choice is too
    twice = GOOD.replace('{"name": "add", "arguments": {"a": 1, "b": 2.5}}', '[{"name": "add"}, {"name": "add"}]')
    assert score_tool(PROMPT + twice, PROMPT, MULTI).values[1:] == [0.0, 0.0]
    # no parseable call: the parser's reason
    vec = score_tool(PROMPT + "<think>x</think>\n<tool_call>nope</tool_call>", PROMPT, SPLIT)
    assert vec.values == [1.0, 0.0, 0.0] and vec.items[1].reason == vec.items[2].reason


def test_split_parallel_is_order_free_and_irrelevance_wants_no_call():
    par = {**SPLIT, "functions": TWO_FUNCS, "category": "parallel", "ground_truth": [{"add": {}}, {"sub": {}}]}
    calls = (
        '<think>t</think><tool_call>[{"name": "sub", "arguments": {}}, {"name": "add", "arguments": {}}]</tool_call>'
    )
    assert score_tool(PROMPT + calls, PROMPT, par).values[1] == 1.0
    irr = {**SPLIT, "category": "irrelevance", "ground_truth": []}
    assert score_tool(PROMPT + "<think>t</think><tool_call>[]</tool_call>", PROMPT, irr).values == [1.0, 1.0, 1.0]
    assert score_tool(PROMPT + GOOD, PROMPT, irr).values == [1.0, 0.0, 0.0]


def test_unknown_reward_set_is_a_bad_label_with_the_paper_names():
    vec = score_tool(PROMPT + GOOD, PROMPT, {**LABEL, "rewards": "all"})
    assert vec.names == ["format", "correctness"] and vec.values == [1.0, 0.0]
    assert "label.rewards must be one of" in vec.items[1].reason
