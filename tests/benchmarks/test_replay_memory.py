"""benchmarks/replay_memory.py runs end to end on a tiny model and sees the replay step's memory."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_memory.py"


@pytest.mark.slow
def test_replay_memory_on_a_tiny_model():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", "tiny", "--shape", "default"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    row = next(line for line in out.stdout.splitlines() if line.startswith("embedded default"))
    replay, floor, logits, ratio = (float(x) for x in re.findall(r"\|\s+([0-9.]+)", row))
    # the tiny Llama: 32,000 tokens of vocabulary, bf16 or fp32 -> 2 x 4 rows x 96 positions x 32,000 x 2 or 4 bytes
    assert logits in (47.0, 94.0)
    assert replay > 0 and floor >= 0 and ratio > 0  # the sampler saw the step grow the process
