"""One rank of tests/adapter/test_zero3_subgroups.py: two AdamW steps of a small bf16 model under ZeRO-3 with a given
``sub_group_size``; prints the number of optimizer sub-groups and the fp32 master weights after the steps."""

import json
import sys

import deepspeed
import gloo_ranks
import torch


def main(sub_group_size: int) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 24), torch.nn.Linear(24, 40), torch.nn.Linear(40, 50))
    model.to(torch.bfloat16)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 3, "sub_group_size": sub_group_size, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "torch_adam": True}},
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    before = torch.cat([g.detach().float().flatten() for g in optimizer.fp32_partitioned_groups_flat]).clone()
    data = torch.Generator().manual_seed(1)
    for _ in range(2):
        ids = torch.randint(0, 50, (2, 7), generator=data)
        logits = engine(ids).float()
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
    groups = optimizer.fp32_partitioned_groups_flat
    master = torch.cat([g.detach().float().flatten() for g in groups])
    moved = int((master != before).sum())
    print(json.dumps({"rank": 0, "sub_groups": len(groups), "moved": moved, "master": master.tolist()}), flush=True)
    gloo_ranks.end_rank()


if __name__ == "__main__":
    main(int(sys.argv[1]))
