"""benchmarks/gpu_check.sh on CPU with tiny shapes, so the GPU check cannot rot."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_runs_on_cpu_with_tiny_shapes():
    env = dict(os.environ, PYTHON=sys.executable)
    res = subprocess.run(
        ["bash", str(ROOT / "benchmarks/gpu_check.sh"), "--tiny", "--device", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    table = res.stdout.split("== GPU check:", 1)[1]
    for frac in ("12%", "21%"):
        for shape in ("SQL-like", "IF-like"):
            row = re.search(
                rf"replay / GDPO actor work +\| qwen2-tiny +\| {shape}, {frac} of pairs +\| +([\d.]+)%", table
            )
            assert row and float(row.group(1)) > 0, table
    floors = [float(v) for v in re.findall(r"replay / floor +\| qwen2-tiny +\| [^|]+\| +([\d.]+)", table)]
    assert len(floors) == 6 and all(v > 0 for v in floors), table
    dq = re.search(r"max \|q shared - q unshared\| \(bf16\) +\| qwen2-tiny +\| 4 requests +\| +(\S+)", table)
    assert dq, table
    dq = float(dq.group(1))
    assert dq < 0.05, table  # the same numbers as the unshared replay, within bf16 noise
    js = r"JS compiled vs eager vs naive: time +\| V=512 +\| T=16 +\| +[\d.]+s vs [\d.]+s vs [\d.]+s"
    assert re.search(js, table), table
    assert "DISAGREE" not in table
