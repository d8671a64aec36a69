"""The replay's deadlock guard under real ZeRO-3 sharding, two ranks over gloo: with the padding to the same number
of forwards an uneven split (all the work on rank 0) completes; without it, it hangs (stopped after a short limit).
The same two processes, one flag apart: the control shows the first test would catch a guard that went missing."""

import time
from pathlib import Path

import gloo_ranks
import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
WORKER = Path(__file__).with_name("zero3_replay_worker.py")


def two_ranks(pad: bool, limit: float):
    """Start both ranks; returns (finished, outputs, return codes). Both are killed once ``limit`` seconds pass."""
    procs = gloo_ranks.start(WORKER, 2, args=["--pad"] if pad else [])
    deadline = time.time() + limit
    while time.time() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.5)
    finished = all(p.poll() is not None for p in procs)
    for p in procs:
        if p.poll() is None:
            p.kill()
    return finished, [p.communicate()[0] for p in procs], [p.returncode for p in procs]


def test_uneven_replay_completes_with_padding_and_hangs_without():
    finished, outputs, codes = two_ranks(pad=True, limit=180)
    assert finished and codes == [0, 0], "\n".join(o[-2000:] for o in outputs)
    rank0, rank1 = gloo_ranks.rows(outputs)
    assert rank0["partitioned"] == rank0["params"] > 0 and rank1["partitioned"] == rank1["params"]  # really sharded
    assert rank0["forwards"] == rank1["forwards"] > 0 and rank0["q_sum"] > 0 and rank1["q_sum"] == 0

    finished, outputs, codes = two_ranks(pad=False, limit=45)  # rank 0 needs ~1 s of forwards when padded
    assert not finished or codes != [0, 0], "without the padding the uneven replay should not complete:\n" + "\n".join(
        o[-1000:] for o in outputs
    )
