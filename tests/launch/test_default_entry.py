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
