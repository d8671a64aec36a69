"""One rank of a 2-process DeepSpeed ZeRO-3 replay over gloo (run by test_zero3_replay_ranks.py).

Every parameter is partitioned (stage3_param_persistence_threshold 0), so each forward gathers parameters
collectively. Rank 0 replays two responses, rank 1 none: with ``--pad`` both ranks run the same number of forwards
(the max of count_forwards, as the experience maker passes); without it rank 1 runs none and rank 0's first
parameter gather waits for a partner that never comes. Prints one JSON line with the result. With ``--measures``
(padded) rank 0's requests carry null contexts and the replay runs once per relevance measure; the line then holds
each measure's q (the test compares them with the fp64 loops of ``tests/naive_relevance.py``).
"""

import json
import sys

import deepspeed
import gloo_ranks
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mrtpo_openrlhf.core import RELEVANCE, count_forwards, replay_relevance, request_from_ids

MICRO_BATCH = 2


def requests_for(rank: int, null: bool = False):
    if rank != 0:
        return []
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(3, 100, (n,), generator=g).tolist()  # noqa: E731
    if null:  # uneven lengths too: responses of 6 and 3 tokens
        return [request_from_ids(ids(9), [ids(3), ids(4)], ids(n), [0, 1], None, null_ids=ids(2)) for n in (6, 3)]
    return [request_from_ids(ids(9), [ids(3), ids(4)], ids(6), [0, 1], None) for _ in range(2)]


def model_config() -> LlamaConfig:
    return LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip


def main() -> None:
    pad = "--pad" in sys.argv
    measures = "--measures" in sys.argv
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(0)
    config = model_config()
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    }
    engine, *_ = deepspeed.initialize(model=LlamaForCausalLM(config), config=ds_config)
    params = list(engine.module.parameters())
    partitioned = sum(1 for p in params if hasattr(p, "ds_tensor") and p.ds_tensor.numel() < p.ds_numel)
    if measures:
        out = {"rank": rank, "q": {}}
        for name, measure in RELEVANCE.items():
            mine = requests_for(rank, null=True)
            counts = [count_forwards(requests_for(r, measure.null_context), MICRO_BATCH) for r in range(world)]
            q, forwards = replay_relevance(
                engine.module, mine, num_rewards=2, micro_batch_size=MICRO_BATCH, min_forwards=max(counts),
                relevance=name,
            )  # fmt: skip
            out["q"][name] = q.tolist()
            out.setdefault("forwards", {})[name] = forwards
        print(json.dumps(out), flush=True)
        return
    mine = requests_for(rank)
    counts = [count_forwards(requests_for(r), MICRO_BATCH) for r in range(world)]
    q, forwards = replay_relevance(
        engine.module, mine, num_rewards=2, micro_batch_size=MICRO_BATCH, min_forwards=max(counts) if pad else 0
    )
    print(json.dumps({"rank": rank, "partitioned": partitioned, "params": len(params), "forwards": forwards,
                      "q_sum": float(q.sum())}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
    gloo_ranks.end_rank()
