"""DeepSpeed's sleep on CPU (``deepspeed_sleep_frees_grads``): the ZeRO-3 gradient buffer is 0 bytes while asleep and
back at its size awake, and training through sleep and wake-up gives the same weights, bit for bit, as training
awake; a forward and a checkpoint save while asleep work. One gloo rank (the CPU recipe sleeps DeepSpeed with one
actor rank only), two micro-batches a step."""

from pathlib import Path

import gloo_ranks
import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # two DeepSpeed processes, ~30-60 s
WORKER = Path(__file__).with_name("zero3_sleep_worker.py")


def run(mode: str) -> list:
    (proc,) = gloo_ranks.start(WORKER, 1, args=[mode])
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out[-3000:]
    return gloo_ranks.rows([out])


def test_sleep_releases_gradient_buffers_and_trains_the_same():
    awake, asleep = run("awake"), run("sleep")
    for a, s in zip(awake, asleep):
        size = a["awake_bytes"][0]
        assert size > 0 and a["asleep_bytes"] == a["awake_bytes"] == [size] * 3  # upstream keeps it
        assert s["asleep_bytes"] == [0, 0, 0] and s["awake_bytes"] == [size] * 3
        assert s["logits_asleep"] == a["logits_asleep"]  # the same weights before each step
        assert s["weights"] == a["weights"]
        assert s["moved_again"] and s["restored"] and a["restored"]
