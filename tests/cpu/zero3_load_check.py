"""Check a 2-rank ZeRO-3 load on CPU without Ray or OpenRLHF (not a test; run by hand):

    M=/tmp/tiny; python -c "from mrtpo_openrlhf.models import make_tiny_model; make_tiny_model('$M', seed=0)"
    for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \\
        python tests/cpu/zero3_load_check.py $M & done; wait

Each rank loads the model LOADS times (default 3) the way OpenRLHF's actor does (HF ``from_pretrained`` under
``HfDeepSpeedConfig``, so under ``zero.Init``), wraps the last one with ``deepspeed.initialize`` (ZeRO-3, gloo,
persistence threshold ``THR``, default 0), then compares every gathered parameter after each load, and the
logits, with a plain load. It applies the CPU layer's patches; ``UNPATCHED=1`` leaves DeepSpeed as released.

What it found (2-core AMD EPYC, 2026-12-01): unpatched, one matrix came out wrong in about half the loads
(9 of 12, 2 of 7, 4 of 10 runs), already right after ``from_pretrained``, holding stale memory (~1e-43, ~1e22,
NaN). Cause: ``Init._allgather_params_coalesced`` waits only on its last async all-gather; gloo finishes them
in any order, so rank 0 loaded the checkpoint into a parameter that a late gather then overwrote, and the
``GatheredParameters`` exit broadcast that to every rank. The CPU patch ``zero3_gather_waits_all`` fixes it.
"""

import json
import os
import sys

import deepspeed
import torch
import transformers.integrations.deepspeed as hf_deepspeed
from transformers import AutoModelForCausalLM
from transformers.integrations import HfDeepSpeedConfig

from mrtpo_openrlhf.cpu import patches


def main(path: str) -> None:
    threshold = int(os.environ.get("THR", "0"))
    loads = int(os.environ.get("LOADS", "3"))
    if os.environ.get("UNPATCHED") != "1":
        patches.apply()
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "train_batch_size": 2,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": threshold},
    }
    plain = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    reference = dict(plain.named_parameters())
    keep = HfDeepSpeedConfig(config)  # noqa: F841 - must stay alive while from_pretrained runs
    after_load = []  # per load: the parameters that differ from the plain load
    for _ in range(loads):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        after_load.append([n for n, param in model.named_parameters() if not _equal_gathered(param, reference[n])])
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.module.eval()
    hf_deepspeed.unset_hf_deepspeed_config()
    ids = torch.randint(3, 1000, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        worst = float((engine.module(ids).logits - plain(ids).logits).abs().max())
    wrong = {}
    for name, param in engine.module.named_parameters():
        with deepspeed.zero.GatheredParameters([param]):
            data = param.data.clone()
        if not torch.equal(data, reference[name].data):
            wrong[name] = {"abs_max": float(data.abs().max()), "reference_abs_max": float(reference[name].abs().max())}
    report = {
        "rank": rank,
        "patched": os.environ.get("UNPATCHED") != "1",
        "threshold": threshold,
        "max_logit_diff": worst,
        "wrong_after_load": after_load,
    }
    print(json.dumps(dict(report, wrong=wrong)), flush=True)


def _equal_gathered(param, reference) -> bool:
    with deepspeed.zero.GatheredParameters([param]):
        return torch.equal(param.data, reference.data)


if __name__ == "__main__":
    main(sys.argv[1])
