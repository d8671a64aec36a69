"""One rank of tests/cpu/test_zero3_fp32_master.py: three AdamW steps of a small fp32 model under ZeRO-3, with
DeepSpeed as installed ("clone") or with the CPU layer's ``zero3_fp32_master_aliases_params`` ("alias"), then a
checkpoint save, one more step and a load. Prints whether each fp32 master partition shares the parameters' storage,
the weights after the steps (gathered), and whether the load restored the saved weights."""

import json
import sys
import tempfile

import deepspeed
import deepspeed.runtime.zero.stage3 as stage3
import gloo_ranks
import torch
from zero3_tiny import gathered, micro_batch, tiny_engine

from mrtpo_openrlhf.cpu import patches


def main(mode: str) -> None:
    if mode == "alias":
        patches.zero3_fp32_master_aliases_params(stage3)
    deepspeed.init_distributed(dist_backend="gloo")
    engine, optimizer, model = tiny_engine()
    masters, partitions = optimizer.fp32_partitioned_groups_flat, optimizer.fp16_partitioned_groups_flat
    shares = [m.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() for m, p in zip(masters, partitions)]
    before = gathered(model)
    data = torch.Generator().manual_seed(1)

    def step() -> None:
        micro_batch(engine, data)

    for _ in range(3):
        step()
    after = gathered(model)
    master = torch.cat([m.detach().flatten() for m in masters])
    with tempfile.TemporaryDirectory() as ckpt:
        engine.save_checkpoint(ckpt, tag="t")
        step()
        moved_again = bool((gathered(model) != after).any())
        engine.load_checkpoint(ckpt, tag="t")
        restored = gathered(model)
    row = {
        "rank": 0,
        "dtype": str(masters[0].dtype),
        "shares": shares,
        "moved": int((after != before).sum()),
        "weights": after.tolist(),
        "master": master.tolist(),
        "moved_again": moved_again,
        "restored": bool(torch.equal(restored, after)),
    }
    print(json.dumps(row), flush=True)
    gloo_ranks.end_rank()


if __name__ == "__main__":
    main(sys.argv[1])
