"""ZeRO-3 on 2 gloo ranks: a load under GatheredParameters(modifier_rank=0) must reach every rank.

DeepSpeed's coalesced gather waits only on its last async all-gather; gloo may finish the others later, after
rank 0 has loaded the checkpoint, and overwrite it (docs/cpu.md). The worker makes that late completion
deterministic; the patched run must keep the load on both ranks, the unpatched control must lose it."""

from pathlib import Path

import gloo_ranks
import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
WORKER = Path(__file__).with_name("zero3_gather_worker.py")


def ranks(patched: bool, world_size: int = 2):
    procs = gloo_ranks.start(WORKER, world_size, env={"PATCHED": str(int(patched))})
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * world_size, "\n".join(o[-2000:] for o in outputs)
    rows = gloo_ranks.rows(outputs)
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
