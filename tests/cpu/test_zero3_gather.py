"""ZeRO-3 on 2 gloo ranks: a load under GatheredParameters(modifier_rank=0) must reach every rank.

DeepSpeed's coalesced gather waits only on its last async all-gather; gloo may finish the others later, after
rank 0 has loaded the checkpoint, and overwrite it (docs/cpu.md). The worker makes that late completion
deterministic; the patched run must keep the load on both ranks, the unpatched control must lose it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrtpo_openrlhf.launch.runner import free_port
from mrtpo_openrlhf.paths import REPO_ROOT

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
WORKER = Path(__file__).with_name("zero3_gather_worker.py")


def ranks(patched: bool, world_size: int = 2):
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))  # fmt: skip
        env.update(WORLD_SIZE=str(world_size), PATCHED=str(int(patched)))
        command = [sys.executable, str(WORKER)]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * world_size, "\n".join(o[-2000:] for o in outputs)
    rows = []
    for out in outputs:
        lines = [line for line in out.splitlines() if line.startswith('{"rank"')]
        assert lines, out[-3000:]
        rows.append(json.loads(lines[-1]))
    assert all(row["partitioned"] for row in rows), rows  # the parameters really are sharded
    return rows


def test_load_under_gathered_parameters_reaches_every_rank_with_late_gathers():
    assert [row["right"] for row in ranks(patched=True)] == [[True, True], [True, True]]


def test_control_without_the_patch_loses_the_load():
    rows = ranks(patched=False)
    # the weight's gather finished after rank 0's load and overwrote it; the bias (the waited, last one) is right
    assert [row["right"] for row in rows] == [[False, True], [False, True]], rows


def test_one_rank_keeps_aliasing_partitions():
    """On one rank the patch leaves upstream's gather alone: an in-place write without a modifier rank stays."""
    assert [row["right"] for row in ranks(patched=True, world_size=1)] == [[True, True]]
