"""The small fp32 ZeRO-3 model the one-rank DeepSpeed workers of tests/cpu train (``zero3_*_worker.py``)."""

import deepspeed
import torch

VOCAB = 50


def tiny_engine(gradient_accumulation_steps: int = 1):
    """(engine, optimizer, model): an embedding and two linears under ZeRO-3 with AdamW, every parameter
    partitioned, optimizer sub-groups of 1,000 elements (so several), seed 0."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 24), torch.nn.Linear(24, 40), torch.nn.Linear(40, VOCAB))
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "sub_group_size": 1_000},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": [0.9, 0.95], "torch_adam": True}},
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config, model_parameters=model.parameters())
    return engine, optimizer, model


def micro_batch(engine, data: torch.Generator) -> None:
    """One forward/backward of next-token cross-entropy on random ids, then ``engine.step()``."""
    ids = torch.randint(0, VOCAB, (2, 7), generator=data)
    logits = engine(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    engine.backward(loss)
    engine.step()


def gathered(model) -> torch.Tensor:
    """Every weight, gathered from its partitions, flattened into one tensor."""
    params = list(model.parameters())
    with deepspeed.zero.GatheredParameters(params):
        return torch.cat([p.detach().flatten().clone() for p in params])
