"""One rank of tests/cpu/test_zero3_sleep.py: three AdamW steps (two micro-batches each) of a small fp32 model under
ZeRO-3, either awake throughout ("awake") or through upstream's ``offload_deepspeed_states`` /
``reload_deepspeed_states`` as the CPU layer's ``deepspeed_sleep_frees_grads`` rewrites them ("sleep": asleep after
start-up and after each step, as upstream's trainer does, with a no-grad forward and a checkpoint save while asleep).
Prints the weights after the steps (gathered), the gradient buffers' bytes asleep and awake, the forward's logits
asleep, and whether a load of the checkpoint saved asleep restored the weights."""

import json
import sys
import tempfile

import deepspeed
import gloo_ranks
import torch
from zero3_tiny import gathered, micro_batch, tiny_engine

from mrtpo_openrlhf.cpu import patches

patches.apply()  # the CPU layer as every run has it (openrlhf imports flash_attn, stubbed on CPU)
import openrlhf.utils.deepspeed.deepspeed_utils as ds_utils  # noqa: E402


def main(mode: str) -> None:
    sleep = mode == "sleep"  # "awake" never calls the sleep helpers
    deepspeed.init_distributed(dist_backend="gloo")
    rank = torch.distributed.get_rank()
    engine, optimizer, model = tiny_engine(gradient_accumulation_steps=2)
    buffer = optimizer.grad_partitions_flat_buffer.untyped_storage()
    data = torch.Generator().manual_seed(1 + rank)
    probe = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(99))
    asleep_bytes, awake_bytes, logits_asleep = [], [], []

    if sleep:
        ds_utils.offload_deepspeed_states(engine)
    for _ in range(3):
        asleep_bytes.append(buffer.nbytes())
        with torch.no_grad():  # experience making: a forward while asleep
            logits_asleep.append(engine(probe).flatten().tolist())
        if sleep:
            ds_utils.reload_deepspeed_states(engine)
        awake_bytes.append(buffer.nbytes())
        micro_batch(engine, data)
        micro_batch(engine, data)
        if sleep:
            ds_utils.offload_deepspeed_states(engine)
    after = gathered(model)
    with tempfile.TemporaryDirectory() as ckpt:
        engine.save_checkpoint(ckpt, tag="t")  # asleep on the "sleep" side
        if sleep:
            ds_utils.reload_deepspeed_states(engine)
        micro_batch(engine, data)
        micro_batch(engine, data)
        moved_again = bool((gathered(model) != after).any())
        engine.load_checkpoint(ckpt, tag="t")
        restored = gathered(model)
    row = {
        "rank": rank,
        "asleep_bytes": asleep_bytes,
        "awake_bytes": awake_bytes,
        "logits_asleep": logits_asleep,
        "weights": after.tolist(),
        "moved_again": moved_again,
        "restored": bool(torch.equal(restored, after)),
    }
    print(json.dumps(row), flush=True)
    gloo_ranks.end_rank()


if __name__ == "__main__":
    main(sys.argv[1])
