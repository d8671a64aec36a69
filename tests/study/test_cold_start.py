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


def test_the_record_names_the_machine_and_package_versions(tmp_path):
    """A rebuild that gives other weights (as the tool study's did) can be told apart by CPU or version: the record
    holds the CPU as /proc/cpuinfo names it, the torch capability, and the installed package versions."""
    import hashlib
    import json
    from importlib.metadata import version

    import torch

    from mrtpo_openrlhf.models import make_tiny_model
    from mrtpo_openrlhf.study.cold_start import cold_start_record

    base, out = make_tiny_model(tmp_path / "base", seed=0), make_tiny_model(tmp_path / "out", seed=1)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a"}\n')
    settings = {"steps": 1, "lr": 3e-5, "batch": 8, "seed": 0}
    rec = cold_start_record("m", base, [{"id": "a"}], data, out, settings, ["--x", "1"], {}, 1.5)
    json.dumps(rec)  # what cold_start.json gets
    model_name = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None
    )
    assert rec["provenance"]["cpu_model"] == model_name
    assert rec["provenance"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert rec["packages"]["torch"] == version("torch") and rec["packages"]["deepspeed"] == version("deepspeed")
    assert rec["data_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert rec["weights_sha256"] != rec["base_weights_sha256"]
    assert {k: rec[k] for k in settings} == settings and rec["command"] == "python -m openrlhf.cli.train_sft --x 1"
