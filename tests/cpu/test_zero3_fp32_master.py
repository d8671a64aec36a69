"""fp32 ZeRO-3 without a second fp32 copy of the weights (``zero3_fp32_master_aliases_params``): the same AdamW
update, bit for bit, as DeepSpeed's cloned master, and a checkpoint that still restores. The "clone" side also pins
the upstream behaviour the patch exists for: DeepSpeed 0.19.6 on CPU clones an fp32 partition it could reuse."""

from pathlib import Path

import gloo_ranks
import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # two DeepSpeed processes, ~30-60 s
WORKER = Path(__file__).with_name("zero3_fp32_master_worker.py")


def run(mode: str) -> dict:
    (proc,) = gloo_ranks.start(WORKER, 1, args=[mode])
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out[-3000:]
    return gloo_ranks.rows([out])[0]


def test_fp32_master_aliases_the_weights_and_steps_the_same():
    clone, alias = run("clone"), run("alias")
    assert clone["dtype"] == alias["dtype"] == "torch.float32"
    assert len(clone["shares"]) == len(alias["shares"]) > 1  # several optimizer sub-groups
    assert not any(clone["shares"])  # upstream: a copy per sub-group
    assert all(alias["shares"])  # patched: the parameters' own partition
    assert clone["moved"] > 4_000  # the three steps changed (nearly) every weight
    assert alias["weights"] == clone["weights"]
    assert alias["master"] == clone["master"] == clone["weights"]
    for side in (clone, alias):
        assert side["moved_again"] and side["restored"]
