"""Reproduce the 2-rank ZeRO-3 load problem on CPU without Ray or OpenRLHF (not a test; run by hand):

    M=/tmp/tiny; python -c "from mrtpo_openrlhf.models import make_tiny_model; make_tiny_model('$M', seed=0)"
    for r in 0 1; do RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \\
        python tests/cpu/zero3_load_check.py $M & done; wait

Each rank loads the model the way OpenRLHF's actor does (HF ``from_pretrained`` under ``HfDeepSpeedConfig``, so
under ``zero.Init``), wraps it with ``deepspeed.initialize`` (ZeRO-3, gloo, persistence threshold ``THR``,
default 0), then compares the logits and every gathered parameter with a plain load. Seen on a 2-core AMD EPYC
(2026-12-01): one layer matrix (e.g. ``model.layers.0.self_attn.v_proj.weight``) wrong in 9 of 12 runs at
threshold 0 or 1e4; a model built first and partitioned by ``deepspeed.initialize`` (no ``zero.Init``) was right
in 3 of 3. Not root-caused (not the broadcast being asynchronous: a synchronous one fails the same way).
Narrowed on 2026-12-01 (2 of 7 runs failed): the matrix is already wrong right after ``from_pretrained``, before
``deepspeed.initialize`` (``wrong_after_load``), identically on both ranks, and it holds uninitialized memory
(values ~1e-43 or ~1e22 over the whole matrix or a tail of rank 1's shard), not a random init and not another
weight: layer 0 or 1's ``q_proj`` in those runs. So a load into a gathered parameter does not land (or lands in
memory that is later replaced) inside transformers' ``_load_state_dict_into_zero3_model``.
"""

import json
import os
import sys

import deepspeed
import torch
import transformers.integrations.deepspeed as hf_deepspeed
from transformers import AutoModelForCausalLM
from transformers.integrations import HfDeepSpeedConfig


def main(path: str) -> None:
    threshold = int(os.environ.get("THR", "0"))
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
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
    after_load = [name for name, param in model.named_parameters() if not _equal_gathered(param, reference[name])]
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
    report = {"rank": rank, "threshold": threshold, "max_logit_diff": worst, "wrong_after_load": after_load}
    print(json.dumps(dict(report, wrong=wrong)), flush=True)


def _equal_gathered(param, reference) -> bool:
    with deepspeed.zero.GatheredParameters([param]):
        return torch.equal(param.data, reference.data)


if __name__ == "__main__":
    main(sys.argv[1])
