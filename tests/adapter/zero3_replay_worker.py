"""One rank of a 2-process DeepSpeed ZeRO-3 replay over gloo (run by test_zero3_replay_ranks.py).

Every parameter is partitioned (stage3_param_persistence_threshold 0), so each forward gathers parameters
collectively. Rank 0 replays two responses, rank 1 none: with ``--pad`` both ranks run the same number of forwards
(the max of count_forwards, as the experience maker passes); without it rank 1 runs none and rank 0's first
parameter gather waits for a partner that never comes. Prints one JSON line with the result.
"""

import json
import sys

import deepspeed
import gloo_ranks
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from mrtpo_openrlhf.core import count_forwards, replay_relevance, request_from_ids

MICRO_BATCH = 2


def requests_for(rank: int):
    if rank != 0:
        return []
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(3, 100, (n,), generator=g).tolist()  # noqa: E731
    return [request_from_ids(ids(9), [ids(3), ids(4)], ids(6), [0, 1], None) for _ in range(2)]


def main() -> None:
    pad = "--pad" in sys.argv
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )  # fmt: skip
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
    }
    engine, *_ = deepspeed.initialize(model=LlamaForCausalLM(config), config=ds_config)
    params = list(engine.module.parameters())
    partitioned = sum(1 for p in params if hasattr(p, "ds_tensor") and p.ds_tensor.numel() < p.ds_numel)
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
