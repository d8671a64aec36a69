"""The cold-start SFT rows: disjoint from the study's BFCL categories, and each target scores 1 on every tool reward."""

import pytest

from mrtpo_openrlhf.study.cold_start import SFT_CATEGORIES, sft_flags, sft_rows
from mrtpo_openrlhf.tasks.tool.reward import score_tool
from mrtpo_openrlhf.tasks.tool.verifier import load_bfcl

pytest.importorskip("bfcl_eval")


def test_sft_rows_are_disjoint_from_the_study_pool_and_pass_the_task_rewards():
    rows = sft_rows()
    study_ids = {item.id for c in ("simple_python", "multiple") for item in load_bfcl(c)}
    assert not study_ids & {r["id"] for r in rows}
    assert len(rows) == sum(len(load_bfcl(c)) for c in SFT_CATEGORIES)
    by_id = {item.id: item for c in SFT_CATEGORIES for item in load_bfcl(c)}
    for row in rows[:60]:
        item = by_id[row["id"]]
        label = {"category": item.category, "functions": item.functions, "ground_truth": item.ground_truth}
        vec = score_tool(row["prompt"] + row["response"], row["prompt"], label)
        assert vec.values == [1.0, 1.0], (row["id"], [r.reason for r in vec.items])
    assert sft_rows(seed=0) == rows and sft_rows(seed=1) != rows


def test_sft_flags_train_steps_times_batch_rows():
    flags = sft_flags("m", "d.jsonl", "out", steps=6, lr=3e-5, batch=8, micro=4, seed=0)
    assert flags[flags.index("--data.max_samples") + 1] == "48"
    assert flags[flags.index("--adam.lr") + 1] == "3e-05"
