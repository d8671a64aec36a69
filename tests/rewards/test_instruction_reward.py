"""The instruction reward function: dict shape, names, blocks, failures, converter, fixtures."""

import json

import pytest

from mrtpo_openrlhf.data.jsonl import DatasetError, read_jsonl
from mrtpo_openrlhf.paths import DATA_DIR, REPO_ROOT
from mrtpo_openrlhf.rewards.contract import BLOCKS_KEY, NAMES_KEY, REASONS_KEY, VALUES_KEY
from mrtpo_openrlhf.tasks.instruction import reward as ins
from mrtpo_openrlhf.tasks.instruction.verifier import build_checker, check_loose, check_strict

DATA = DATA_DIR / "instructions"
PROMPT = "Describe rain. In your entire response, refrain from the use of any commas. Answer with less than 5 words."
LABEL = {
    "instruction_id_list": [
        "punctuation:no_comma",
        "length_constraints:number_words",
        "punctuation:no_comma",
        "words:start_verb",
    ],
    "kwargs": [{}, {"num_words": 5, "relation": "less than"}, None, {}],
    "constraints": [["Content", "Keywords", 'The response must include the word "wet".']],
}


def test_reward_func_dict_shape_and_values():
    out = ins.reward_func([PROMPT + " Rain is wet.<|im_end|>"], [PROMPT], [json.dumps(LABEL)])
    assert set(out) == {"rewards", "scores", "extra_logs"} and out["rewards"].shape == (1,)
    logs = out["extra_logs"]
    assert logs[NAMES_KEY] == [
        "punctuation:no_comma",
        "length_constraints:number_words",
        "punctuation:no_comma#2",
        "words:start_verb",
        "muldimif:content/keywords",
    ]
    assert logs[VALUES_KEY] == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert float(out["rewards"][0]) == 4.0 and float(out["scores"][0]) == 4.0
    assert logs[BLOCKS_KEY][0] == "In your entire response, refrain from the use of any commas."
    assert all(b in PROMPT or b.startswith(("The response must", "The response must start")) for b in logs[BLOCKS_KEY])
    assert logs[REASONS_KEY][3].startswith("unsupported offline:") and logs[REASONS_KEY][0] == ""
    assert logs[ins.FRAC_LOG] == pytest.approx(0.8)


def test_violations_give_reasons_and_bad_labels_never_raise():
    vec = ins.score_instruction(PROMPT + " Rain, rain, rain falls down all day.", PROMPT, LABEL)
    assert vec.values[:2] == [0.0, 0.0] and vec.items[0].reason == "not satisfied"
    out = ins.reward_func(["x"], ["p"], ["not json"])
    assert out["extra_logs"][VALUES_KEY] == [0.0] and "verifier error" in out["extra_logs"][REASONS_KEY][0]
    vec = ins.score_instruction("x", "p", {"instruction_id_list": ["no:such_id"], "kwargs": [{}]})
    assert vec.values == [0.0] and "unknown instruction id" in vec.items[0].reason
    with pytest.raises(ValueError, match="no constraints"):
        ins.parse_label({})
    with pytest.raises(ValueError, match="one entry per"):
        ins.parse_label({"instruction_id_list": ["punctuation:no_comma"], "kwargs": []})


def test_block_found_in_reworded_prompt():
    prompt = "Tell a story. Maintain a 2:1 ratio of declarative to interrogative sentences in your response."
    desc = build_checker("ratio:sentence_type", {}).description()
    block = ins.locate_block(prompt, desc)
    assert block == "Maintain a 2:1 ratio of declarative to interrogative sentences in your response."
    assert block in prompt
    assert ins.locate_block("Unrelated text only.", desc) == desc


def test_extract_response_strips_prompt_markers_and_thinking():
    assert ins.extract_response("P<think>hmm</think> Answer<|im_end|>", "P") == "Answer"
    assert ins.extract_response("<|im_start|>assistant\nHi<|im_end|>\n<|endoftext|>", "other") == "Hi"


def test_eval_fixture_strict_and_loose_match_hand_checks():
    rows = read_jsonl(DATA / "eval_mini.jsonl")
    assert len(rows) >= 5
    for row in rows:
        checkers = [build_checker(i, k) for i, k in zip(row["instruction_id_list"], row["kwargs"])]
        assert [check_strict(c, row["response"]) for c in checkers] == row["strict"], row["key"]
        assert [check_loose(c, row["response"]) for c in checkers] == row["loose"], row["key"]
        vec = ins.score_instruction(
            row["prompt"] + row["response"],
            row["prompt"],
            {"instruction_id_list": row["instruction_id_list"], "kwargs": row["kwargs"]},
        )
        assert vec.values == [float(v) for v in row["strict"]]


def test_train_fixture_is_valid_and_blocks_are_in_prompts():
    rows = read_jsonl(DATA / "train_mini.jsonl")
    assert len(rows) == 20
    for row in rows:
        names = ins.reward_names(row["label"])
        assert 3 <= len(names) <= 7
        vec = ins.score_instruction(row["prompt"] + " ok", row["prompt"], row["label"])
        assert vec.names == names and all(it.block in row["prompt"] for it in vec.items)


def test_converter_formats_and_errors(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps(
            {
                "key": 1,
                "prompt": "Hi. No commas.",
                "instruction_id_list": ["punctuation:no_comma"],
                "kwargs": [{"num_words": None}],
            }
        )
        + "\n\n"
        + json.dumps(
            {
                "messages": [{"role": "user", "content": "Q?"}],
                "label": {"constraints": [["Length", "Words", "At most 9 words."]]},
            }
        )
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    assert ins.convert_file(str(src), "hir16k", str(out)) == 2
    rows = read_jsonl(out)
    assert rows[0]["label"] == {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    assert rows[1]["prompt"] == "Q?" and rows[1]["label"]["constraints"][0][0] == "Length"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"prompt": "ok", "constraints": [["Length", "Words", "At most 9 words."]]})
        + "\n\n"
        + json.dumps({"prompt": "x", "instruction_id_list": ["nope:x"], "kwargs": [{}]})
        + "\n"
    )
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: .*nope:x"):
        ins.convert_file(str(bad), "hir16k", str(out))
    assert ins.main(["convert", "--format", "muldimif", "--input", str(bad), "--out", str(out)]) == 2


def test_reward_funcs_entry_point_imports():
    import importlib.util

    path = REPO_ROOT / "reward_funcs" / "instruction.py"
    spec = importlib.util.spec_from_file_location("rf_instruction", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.reward_func is ins.reward_func
