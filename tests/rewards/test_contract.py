"""reward_func's argument contract: one result per query, or a clear error for the whole call."""

import pytest

from mrtpo_openrlhf.tasks.instruction import reward as instruction
from mrtpo_openrlhf.tasks.sql import reward as sql
from mrtpo_openrlhf.tasks.tool import reward as tool

LABEL = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}


@pytest.mark.parametrize("module", [instruction, sql, tool])
@pytest.mark.parametrize("args", [(None, None, None), (5, [""], [None]), (["a"], "p", [None]), ("abc", "p", "l")])
def test_non_list_arguments_are_a_clear_error(module, args):
    with pytest.raises(TypeError, match="must be a list"):
        module.reward_func(*args)


@pytest.mark.parametrize("module", [instruction, sql, tool])
def test_unequal_lengths_are_an_error_not_a_truncation(module):
    with pytest.raises(ValueError, match="queries=2, prompts=1, labels=2"):
        module.reward_func(["a", "b"], [""], [None, None])


def test_valid_and_malformed_labels_in_one_batch_give_one_result_each():
    # a malformed label's fallback has no constraints_satisfied_frac; merging used to raise KeyError
    for bad in ({"instruction_id_list": ["no:such_id"]}, "{not json", None, 7):
        out = instruction.reward_func(["a b", "c, d"], ["", ""], [LABEL, bad])
        assert out["rewards"].tolist() == [1.0, 0.0]
        logs = out["extra_logs"]
        assert logs["mrtpo_reward_values"] == [[1.0], [0.0]]
        assert len(logs["constraints_satisfied_frac"]) == 2 and logs["constraints_satisfied_frac"][0] == 1.0
        assert all(len(v) == 2 for v in logs.values())
        assert logs["mrtpo_reward_reasons"][1][0]  # the malformed label says why it scored 0


def test_tuples_and_empty_batches_are_accepted():
    out = instruction.reward_func(("a b",), ("",), (LABEL,))
    assert out["rewards"].tolist() == [1.0]
    assert instruction.reward_func([], [], [])["rewards"].tolist() == []


@pytest.mark.parametrize(
    "module, label",
    [
        (instruction, LABEL),
        (sql, {"db_id": "school", "gold": "SELECT 1"}),
        (tool, {"functions": [{"name": "f"}], "ground_truth": [{"f": {}}], "category": "simple_python"}),
    ],
)
def test_responses_past_the_bound_score_zero_with_the_reason(module, label):
    import time

    from mrtpo_openrlhf.verifiers.response import MAX_RESPONSE_CHARS

    good_layout = {
        instruction: "a b",
        sql: "<think>t</think>\n```sql\nSELECT 1\n```",
        tool: '<think>t</think><tool_call>{"name": "f"}</tool_call>',
    }[module]
    assert module.reward_func([good_layout], [""], [label])["rewards"].item() > 0
    start = time.process_time()
    out = module.reward_func([good_layout + " " * MAX_RESPONSE_CHARS + "x"], [""], [label])
    assert time.process_time() - start < 0.5
    assert out["rewards"].item() == 0.0
    assert all("longer than the" in r for r in out["extra_logs"]["mrtpo_reward_reasons"])


VALID_LABELS = {
    instruction: LABEL,
    sql: {"db_id": "school", "gold": "SELECT 1"},
    tool: {"functions": [{"name": "f"}], "ground_truth": [{"f": {}}], "category": "simple_python"},
}
OBJECT_MESSAGE = {instruction: "an object", sql: "an object with 'gold' and 'db_id' or 'db_path'", tool: "an object"}


@pytest.mark.parametrize("module", [instruction, sql, tool])
def test_every_task_reads_a_label_as_an_object_or_its_json_text(module):
    import json

    as_text = module.parse_label(json.dumps(VALID_LABELS[module]))
    assert as_text == module.parse_label(VALID_LABELS[module])
    with pytest.raises(ValueError, match=r"^label is a string but not JSON: Expecting value$"):
        module.parse_label("not json")
    for bad, type_name in ((None, "NoneType"), ([1], "list"), ('"a string in JSON"', "str"), (7, "int")):
        with pytest.raises(ValueError) as err:
            module.parse_label(bad)
        assert str(err.value) == f"label must be {OBJECT_MESSAGE[module]}, got {type_name}"


def test_tasks_record_where_they_put_inline_blocks():
    """Issue 10 item 8: the task's own block position, not the first substring match anywhere in the prompt.
    The format text also quoted in a system prompt: the span points at the user turn's copy; the tool's reference
    call (appended by the replay) gets no span even when its text occurs in the prompt."""
    import json as _json

    from mrtpo_openrlhf.rewards.contract import SPANS_KEY
    from mrtpo_openrlhf.tasks.tool.reward import reference_block
    from mrtpo_openrlhf.tasks.tool.reward import reward_func as tool_reward
    from mrtpo_openrlhf.tasks.tool.verifier import TOOL_FORMAT_BLOCK

    funcs = [
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
    label = {"functions": funcs, "ground_truth": [{"add": {"a": [1], "b": [2.5]}}], "category": "simple_python"}
    ref = reference_block(label)
    prompt = (
        f"<|im_start|>system\nRules: {TOOL_FORMAT_BLOCK}\n{ref}<|im_end|>\n<|im_start|>user\nAdd 1 and 2.5\n"
        f"{TOOL_FORMAT_BLOCK}<|im_end|>\n<|im_start|>assistant\n"
    )
    response = '<think>add</think><tool_call>{"name": "add", "arguments": {"a": 1, "b": 2.5}}</tool_call>'
    logs = tool_reward([prompt + response], [prompt], [_json.dumps(label)])["extra_logs"]
    fmt, ref_span = logs[SPANS_KEY]
    assert prompt[fmt[0] : fmt[1]] == TOOL_FORMAT_BLOCK and fmt[0] > prompt.index("<|im_start|>user")
    assert ref_span is None

    from mrtpo_openrlhf.tasks.instruction.reward import reward_func as if_reward

    sentence = "In your entire response, refrain from the use of any commas."
    label = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    prompt = f"<|im_start|>user\nWrite a poem. {sentence}<|im_end|>\n<|im_start|>assistant\n"
    logs = if_reward([prompt + "roses are red"], [prompt], [label])["extra_logs"]
    (span,) = logs[SPANS_KEY]
    assert prompt[span[0] : span[1]] == sentence


def test_batched_calls_keep_one_span_list_per_response():
    from mrtpo_openrlhf.rewards.contract import SPANS_KEY
    from mrtpo_openrlhf.tasks.instruction.reward import reward_func as if_reward

    sentence = "In your entire response, refrain from the use of any commas."
    good = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    prompt = f"<|im_start|>user\nWrite. {sentence}<|im_end|>\n<|im_start|>assistant\n"
    logs = if_reward([prompt + "a", prompt + "b"], [prompt, prompt], [good, "not json"])["extra_logs"]
    first, second = logs[SPANS_KEY]
    assert prompt[first[0][0] : first[0][1]] == sentence and second is None  # a failed label: no spans, not 0.0
