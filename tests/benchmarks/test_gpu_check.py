"""benchmarks/gpu_check.sh on CPU with tiny shapes, so the GPU check cannot rot: every section runs (the CUDA-only
measurements say so), the compiled JS kernel compiles once for T = 1..300, and no check fails."""

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
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    table = res.stdout.split("== GPU check:", 1)[1]
    assert "FAIL" not in table
    for gap in ("1e-05", "0.0001", "0.001", "0.01", "0.1"):
        row = re.search(
            rf"compiled JS vs fp64 \(error / tolerance\) +\| V=512, tail masked +\| gap {gap}, T=1\.\.300 +\| ([\d.]+)",
            table,
        )
        assert row and float(row.group(1)) <= 1.0, table
    assert re.search(r"compiled JS: compiles +\| V=512 +\| 25 calls +\| 1 graph\(s\), 0 recompiles", table), table
    stress = r"replay peak - weights: prompt 48 \+ 3x4, response 16 +\| qwen2-tiny +\| 16 responses \(groups of 8\)"
    for setting in ("micro-batch 4", "micro-batch 8", "micro-batch 8, fp32 logits"):
        assert re.search(rf"{stress} x 3 pairs, {setting} +\| not measured on cpu", table), table
    cost = r"qwen2-tiny +\| SQL-like, 21% of pairs, gradient checkpointing +\|"  # as the paper's runs train
    row = re.search(rf"replay / GDPO actor work +\| {cost} +([\d.]+)%", table)
    assert row and float(row.group(1)) > 0, table
    row = re.search(rf"replay / floor +\| {cost} +([\d.]+)", table)
    assert row and float(row.group(1)) > 0, table
    fp32 = re.search(
        r"max \|q shared - q unshared\| \(fp32\) +\| qwen2-tiny +\| 4 requests, logit std [\d.]+ +\| (\S+)", table
    )
    assert fp32 and float(fp32.group(1)) <= 1e-5, table
    bf16 = re.search(r"max \|q shared - q unshared\| \(bf16\) +\| qwen2-tiny +\| [^|]+\| (\S+)", table)
    assert bf16 and float(bf16.group(1)) < 0.05, table  # the same numbers as the unshared replay, within bf16 noise
    assert re.search(r"\|q bf16 - q fp32\| \(shared\) median / p99 +\| qwen2-tiny", table), table
    for null in (r"null pair q / mean real q \(bf16\)", r"null pair q / mean real q \(bf16, fp32 logits\)"):
        assert re.search(rf"{null} +\| qwen2-tiny +\| [^|]+\| [\d.]+% \(p99", table), table
    assert re.search(r"\(bf16, flash_attention_2\) +\| qwen2-tiny +\| [^|]+\| skipped \(flash-attn needs CUDA", table)
    # every row that measured nothing is listed under the table with its reason
    listed = res.stdout.split("row(s) measured nothing:", 1)[1]
    assert "(bf16, flash_attention_2)" in listed and "not measured on cpu" in listed, listed


def test_replay_cost_inputs_are_built_for_any_device():
    """The JS-alone timing built its second row from a device tensor plus a CPU one, which failed the first H200 run
    (cuda:0 and cpu); the meta device shows the same mismatch on a machine without a GPU."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import replay_overhead

    replay_overhead.js_alone(1, 4, 8, torch.bfloat16, "meta", "eager")  # builds its inputs only; no call
