"""The multi-constraint study's resume.sh picks its next run as the plan's amendments say: the drawn order, one run
at a time, a seed begun in another dtype passed over (its runs go on where that dtype trains)."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs/results/if-multi-smollm2-cpu/resume.sh"
CONFIG = ROOT / "examples/study/if_multi_smollm2_cpu.toml"
# the plan's drawn order, seeds 1-2 (config.runs(), arm_order "random" drawn from the seed)
ORDER = [("mrtpo-loggap", 1), ("gdpo", 1), ("mrtpo", 1), ("mrtpo-contrast", 1), ("mrtpo", 2), ("gdpo", 2)]


def picker() -> str:
    """The Python the script runs to choose the next run (its heredoc), as written in the script."""
    text = SCRIPT.read_text()
    start = text.index("<<'PYTHON'\n") + len("<<'PYTHON'\n")
    return text[start : text.index("PYTHON\n}", start)]


def pick(tmp_path: Path, done: dict, here: str, monkeypatch, capsys):
    """(stdout, stderr) of the picker run on a results folder holding ``done`` ({(arm, seed): dtype})."""
    for (arm, seed), dtype in done.items():
        run = tmp_path / "runs" / arm / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "result.json").write_text("{}")
        (run / "run.json").write_text(json.dumps({"cpu_dtype": dtype}))
    monkeypatch.setattr(sys, "argv", ["-", str(tmp_path), str(CONFIG), here])
    capsys.readouterr()
    exec(compile(picker(), str(SCRIPT), "exec"), {"__name__": "__main__"})
    return capsys.readouterr()


def test_the_drawn_order_is_the_one_written_here():
    from mrtpo_openrlhf.study.config import load_config

    assert load_config(CONFIG).runs()[: len(ORDER)] == ORDER


@pytest.mark.parametrize(
    "done, here, expected",
    [
        ({}, "bf16", "mrtpo-loggap 1"),
        ({ORDER[0]: "bf16"}, "bf16", "gdpo 1"),  # a seed goes on in a later sitting, same dtype
        ({ORDER[0]: "bf16", ORDER[1]: "bf16"}, "bf16", "mrtpo 1"),
        ({ORDER[0]: "bf16"}, "fp32", "mrtpo 2"),  # begun in bf16: passed over on an fp32 CPU
        ({ORDER[1]: "fp32"}, "fp32", "mrtpo-loggap 1"),  # a run left out earlier in its seed comes first
    ],
)
def test_next_run(tmp_path, monkeypatch, capsys, done, here, expected):
    out, err = pick(tmp_path, done, here, monkeypatch, capsys)
    assert out.strip() == expected
    assert ("passed over" in err) == (expected == "mrtpo 2")


def test_nothing_left_prints_nothing(tmp_path, monkeypatch, capsys):
    from mrtpo_openrlhf.study.config import load_config

    out, _ = pick(tmp_path, {run: "bf16" for run in load_config(CONFIG).runs()}, "bf16", monkeypatch, capsys)
    assert out == ""
