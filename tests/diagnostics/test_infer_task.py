"""``diagnose`` without ``--task``: the task comes from the label's keys (a dict or its JSON text)."""

import json

import pytest

from mrtpo_openrlhf.diagnostics.runner import DiagnoseError, infer_task

SQL = {"db_id": "school", "gold": "SELECT 1"}
TOOL = {"functions": [{"name": "f"}], "ground_truth": [], "category": "simple_python"}
IF = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
MULDIMIF = {"constraints": [["Length", "Words", "At most 80 words."]]}


@pytest.mark.parametrize(
    "label, task",
    [(SQL, "sql"), (TOOL, "tool"), (IF, "instruction"), (MULDIMIF, "instruction"), (json.dumps(TOOL), "tool")],
)
def test_task_from_label_keys(label, task):
    assert infer_task(label) == task


@pytest.mark.parametrize("label", [{"answer": 4}, "not json", ["gold"], None, 7])
def test_unknown_label_shape_asks_for_task(label):
    with pytest.raises(DiagnoseError, match=r"cannot tell the task from the label; pass --task sql\|instruction\|tool"):
        infer_task(label)


def test_label_with_two_tasks_keys_is_not_guessed():
    with pytest.raises(DiagnoseError, match="the label fits instruction and tool; pass --task"):
        infer_task({**TOOL, **IF})
