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

from mrtpo_openrlhf.cpu import patches


def gathered(model) -> torch.Tensor:
    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params):
        return torch.cat([p.detach().flatten().clone() for p in params])


def main(mode: str) -> None:
    if mode == "alias":
        patches.zero3_fp32_master_aliases_params(stage3)
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 24), torch.nn.Linear(24, 40), torch.nn.Linear(40, 50))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "sub_group_size": 1_000},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "torch_adam": True}},
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    masters, partitions = optimizer.fp32_partitioned_groups_flat, optimizer.fp16_partitioned_groups_flat
    shares = [m.untyped_storage().data_ptr() == p.untyped_storage().data_ptr() for m, p in zip(masters, partitions)]
    before = gathered(model)
    data = torch.Generator().manual_seed(1)

    def step() -> None:
        ids = torch.randint(0, 50, (2, 7), generator=data)
        logits = engine(ids)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()

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
