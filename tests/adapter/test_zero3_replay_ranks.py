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


def wait_for(procs, deadline: float) -> tuple[bool, list, list]:
    """Wait until every rank has exited or ``deadline`` (a time.time()) passes, then kill what is left; returns
    (finished, outputs, return codes)."""
    while time.time() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.5)
    finished = all(p.poll() is not None for p in procs)
    for p in procs:
        if p.poll() is None:
            p.kill()
    return finished, [p.communicate()[0] for p in procs], [p.returncode for p in procs]


def two_ranks(pad: bool, limit: float, extra: tuple = ()):
    """Start both ranks; returns (finished, outputs, return codes). Both are killed once ``limit`` seconds pass."""
    procs = gloo_ranks.start(WORKER, 2, args=(["--pad"] if pad else []) + list(extra))
    return wait_for(procs, time.time() + limit)


def test_uneven_replay_completes_with_padding_and_hangs_without():
    # both pairs of ranks at once: the control spends its time waiting in a collective that never completes
    started = time.time()
    control = gloo_ranks.start(WORKER, 2)
    finished, outputs, codes = two_ranks(pad=True, limit=180)
    padded_wall = time.time() - started
    assert finished and codes == [0, 0], "\n".join(o[-2000:] for o in outputs)
    rank0, rank1 = gloo_ranks.rows(outputs)
    assert rank0["partitioned"] == rank0["params"] > 0 and rank1["partitioned"] == rank1["params"]  # really sharded
    assert rank0["forwards"] == rank1["forwards"] > 0 and rank0["q_sum"] > 0 and rank1["q_sum"] == 0

    # the padded pair needs ~1 s of forwards after the same start-up: the control has that pair's whole time and
    # 20 s more (60 s at least) to finish, which it must not
    finished, outputs, codes = wait_for(control, started + max(60.0, padded_wall + 20.0))
    assert not finished or codes != [0, 0], "without the padding the uneven replay should not complete:\n" + "\n".join(
        o[-1000:] for o in outputs
    )


def test_each_relevance_measure_on_two_uneven_ranks_matches_the_fp64_loop():
    """Every measure's q from the sharded two-rank replay (all the work on rank 0, null contexts included) equals
    the fp64 loop over tokens on the same weights, unsharded."""
    import naive_relevance as naive
    import torch
    import zero3_replay_worker as worker
    from transformers import LlamaForCausalLM

    from mrtpo_openrlhf.core import RELEVANCE

    finished, outputs, codes = two_ranks(pad=True, limit=240, extra=("--measures",))
    assert finished and codes == [0, 0], "\n".join(o[-2000:] for o in outputs)
    rank0, rank1 = gloo_ranks.rows(outputs)
    torch.manual_seed(0)
    model64 = naive.fp64_model(LlamaForCausalLM(worker.model_config()))
    reqs = worker.requests_for(0, null=True)
    for name in RELEVANCE:
        assert rank0["forwards"][name] == rank1["forwards"][name] > 0
        assert not any(x for row in rank1["q"][name] for ks in row for x in ks)
        q = torch.tensor(rank0["q"][name], dtype=torch.float64)
        for i, req in enumerate(reqs):
            n = len(req.response_ids)
            for k in (0, 1):
                ref = torch.tensor(naive.q(model64, req, k, name), dtype=torch.float64)
                assert torch.allclose(q[i, k, :n], ref, atol=2e-6, rtol=1e-4), (name, i, k)
