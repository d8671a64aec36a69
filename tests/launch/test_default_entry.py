"""The embedded default's command is ``mrtpo_openrlhf.cli.default``; the older ``python -m
mrtpo_openrlhf.launch.default`` (benchmarks run it at older commits) runs the same parser."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["mrtpo_openrlhf.cli.default", "mrtpo_openrlhf.launch.default"])
def test_both_forms_run_the_cli_default_parser(module):
    res = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("usage: python -m mrtpo_openrlhf.cli.default")
    assert "--estimator {gdpo,mrtpo,group_norm}" in res.stdout
    bad = subprocess.run([sys.executable, "-m", module, "--steps", "x"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "argument --steps: invalid int value: 'x'" in bad.stderr


def test_the_cpu_default_keeps_one_checkpoint_and_says_when_resume_has_none(tmp_path):
    """Issue 49, item 9: upstream keeps 3 checkpoints (2 steps with --ckpt.save_steps 1 left 3.1 GB), and RESUME=1
    on a run folder without a checkpoint (the default saves none) started at step 0 without a word."""
    from pathlib import Path

    from mrtpo_openrlhf.launch.default import mrtpo_cpu_args, resume_note

    flags = mrtpo_cpu_args("sql", "mrtpo", Path("model"), tmp_path, 2, 2, 4, None, 0.5, 0)
    assert flags[flags.index("--ckpt.max_num") + 1] == "1"
    assert resume_note(tmp_path, flags) is None  # not asked
    note = resume_note(tmp_path, [*flags, "--ckpt.load_enable"])
    assert note and "starts at step 0" in note and "SAVE_STEPS" in note
    (tmp_path / "ckpt" / "_actor" / "global_step2").mkdir(parents=True)
    assert resume_note(tmp_path, [*flags, "--ckpt.load_enable"]) is None


def test_the_model_is_prepared_in_a_child_process_that_exits_before_the_run(tmp_path, monkeypatch):
    """Issue 49, item 12: the launcher converted SmolLM2 in its own process (1.0 GiB held for the whole run) and the
    JS kernel's first compile (cc1plus, 1.9 GiB) ran beside the run's peak. Both run in one child before the run,
    once per dtype: a later start spawns nothing."""
    import subprocess as sp
    from pathlib import Path

    from mrtpo_openrlhf.cli import default

    monkeypatch.setenv("MRTPO_CACHE", str(tmp_path))
    folder = tmp_path / "models" / "SmolLM2-135M-Instruct-bf16"
    calls, envs = [], []

    def child(command, **kwargs):
        calls.append(command)
        envs.append(kwargs.get("env") or {})
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ".complete").write_text("built\n")
        return sp.CompletedProcess(command, 0, stdout=f"progress\n{folder}\n")

    monkeypatch.setattr(default.subprocess, "run", child)
    assert default.prepare_smollm2("bf16", 0.7) == folder
    (command,) = calls
    assert command[1:] == [
        "-m",
        "mrtpo_openrlhf.cli.models",
        "smollm2",
        "--warm-js-kernel",
        "bf16",
        "--temperature",
        "0.7",
    ]
    # the kernel is compiled into the cache the run reads, inside the project's cache beside the stamp (not /tmp,
    # which can be emptied while the stamp stays and the compile lands in the run again)
    assert envs[0].get("TORCHINDUCTOR_CACHE_DIR") == str(tmp_path / "inductor")
    assert default.prepare_smollm2("bf16", 0.7) == Path(folder) and len(calls) == 1  # converted and warm: no child
    default.prepare_smollm2("fp32", 0.7)  # the kernel compiles per dtype
    assert len(calls) == 2 and calls[1][5] == "fp32"


def test_the_run_report_draws_the_credit_page_from_the_kept_rows(tmp_path):
    """Issue 49, item 14: the report's page comes from the rows the run kept (no model, no replay here)."""
    import json

    from mrtpo_openrlhf.cli.default import credit_page

    assert credit_page(tmp_path, "mrtpo") is None  # gdpo, or beta 0 all along: nothing replayed, no page
    row = {
        "step": 4, "row": 1, "measure": None, "mode": "mrtpo", "beta": 0.5, "tokens": ["<think>", "x", "</think>"],
        "names": ["format", "execution"], "values": [1.0, 0.0], "group_advantages": [0.8, -0.4],
        "q": [[0.6, 0.0, 0.4], [0.0, 0.0, 0.0]], "advantages": [1.1, 0.1, 0.3],
    }  # fmt: skip
    (tmp_path / "replayed_samples.jsonl").write_text(json.dumps(row) + "\n")
    page = credit_page(tmp_path, "mrtpo")
    text = page.read_text()
    assert page == tmp_path / "credit.html" and "&lt;think&gt;" in text and "<think>" not in text.split("<body>")[1]
    assert text.count("token advantage this reward placed") == 2 and "A = +0.800" in text
