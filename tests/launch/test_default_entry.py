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
