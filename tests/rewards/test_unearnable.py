"""``unearnable_rewards`` (the task registry's ``unearnable``, read by the training pre-flight) names exactly the
rewards the task's own reward function then scores 0 even for the label's reference answer."""

import json

import pytest

from mrtpo_openrlhf.data.jsonl import read_jsonl
from mrtpo_openrlhf.rewards.contract import SETUP_ERROR_KEY
from mrtpo_openrlhf.tasks import TASKS

DOC = {"name": "f", "parameters": {"type": "dict", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}


def scored(task_name, label, response):
    out = TASKS[task_name].reward_func()([response], [""], [label])["extra_logs"]
    return dict(zip(out["mrtpo_reward_names"], out["mrtpo_reward_values"]))


def reference(task_name, label):
    return TASKS[task_name].function("example_responses")({"prompt": "", "label": label})[0]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_bundled_labels_have_no_unearnable_reward(name):
    task = TASKS[name]
    rows = read_jsonl(task.train_data_path())
    assert [task.function("unearnable")(row["label"]) for row in rows] == [[]] * len(rows)


@pytest.mark.parametrize(
    "label, expected",
    [
        ({"functions": [DOC], "ground_truth": [{"f": {"x": [1]}}], "category": "simple"}, []),
        ({"functions": [DOC], "ground_truth": [{"g": {"x": [1]}}], "category": "simple"}, ["correctness"]),
        ({"functions": [DOC], "ground_truth": [], "category": "simple"}, ["correctness"]),
        ({"functions": [DOC], "ground_truth": [], "category": "irrelevance"}, []),
    ],
)
def test_tool_reference_call_that_cannot_match(label, expected):
    found = TASKS["tool"].function("unearnable")(json.dumps(label))
    assert [name for name, _ in found] == expected
    values = scored("tool", json.dumps(label), reference("tool", json.dumps(label)))
    assert values["correctness"] == (0.0 if expected else 1.0)


def test_sql_missing_database():
    label = {"db_id": "no_such_db", "gold": "SELECT 1"}
    found = TASKS["sql"].function("unearnable")(label)
    assert [name for name, _ in found] == ["executable", "execution"]
    assert found[0][1].startswith("database not found: ") and "no_such_db/no_such_db.sqlite" in found[0][1]
    # in training the reward function stops the run for it (a missing database is a set-up error, not a 0 reward);
    # evaluation's score_sql scores it 0 with the reason
    out = TASKS["sql"].reward_func()([reference("sql", label)], [""], [label])["extra_logs"]
    assert SETUP_ERROR_KEY in out and "SQL database not found" in str(out[SETUP_ERROR_KEY])
    from mrtpo_openrlhf.tasks.sql.reward import score_sql

    vec = score_sql(reference("sql", label), "", label)
    assert dict(zip(vec.names, vec.values)) == {"format": 1.0, "executable": 0.0, "execution": 0.0}


def test_instruction_constraints_that_cannot_be_checked():
    label = {
        "instruction_id_list": ["punctuation:no_comma", "no_such:instruction", "length_constraints:number_words"],
        "kwargs": [{}, {}, {}],  # number_words without its required kwargs
    }
    found = dict(TASKS["instruction"].function("unearnable")(label))
    assert sorted(found) == ["length_constraints:number_words", "no_such:instruction"]
    assert found["no_such:instruction"].startswith("checker error: ")
    values = scored("instruction", label, "a reply without any comma at all")
    assert values == {"punctuation:no_comma": 1.0, "no_such:instruction": 0.0, "length_constraints:number_words": 0.0}


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_label_that_does_not_parse_raises_value_error(name):
    with pytest.raises(ValueError):
        TASKS[name].function("unearnable")("not json")
