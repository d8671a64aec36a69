"""The optimizer sub-groups that ``zero3_sizes`` sets (``sub_group_size``) change how many elements AdamW steps at a
time, not the update: a ZeRO-3 run stepped in several sub-groups ends with the same fp32 master weights, bit for bit,
as one stepped in DeepSpeed's single group."""

from pathlib import Path

import gloo_ranks
import pytest

pytest.importorskip("deepspeed")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # two DeepSpeed processes, ~30-60 s
WORKER = Path(__file__).with_name("zero3_subgroup_worker.py")


def run(sub_group_size: int) -> dict:
    (proc,) = gloo_ranks.start(WORKER, 1, args=[str(sub_group_size)])
    out = proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, out[-3000:]
    return gloo_ranks.rows([out])[0]


def test_sub_groups_give_the_same_adamw_update_as_one_group():
    whole, split = run(1_000_000_000), run(1_000)
    assert whole["sub_groups"] == 1
    # DeepSpeed closes a sub-group once it holds sub_group_size elements: [1,200], [960 + 40], [2,000], [50]
    assert split["sub_groups"] == 4
    assert len(split["master"]) == len(whole["master"]) == 1_200 + 1_000 + 2_050
    assert whole["moved"] > 4_000  # the steps changed (nearly) every weight
    assert split["master"] == whole["master"]
