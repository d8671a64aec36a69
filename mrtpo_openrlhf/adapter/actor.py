"""Actor side: the replay runs on the policy's own DeepSpeed engine (ZeRO-3 safe)."""

from __future__ import annotations

from typing import Sequence

import ray
import torch
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

from ..core import ReplayRequest, replay_relevance
from .ranks import inject_replay_failure


def zero3_partitioned(module: torch.nn.Module) -> tuple[int, int]:
    """(parameters whose local ZeRO-3 shard holds fewer elements than the full tensor, all parameters)."""
    params = list(module.parameters())
    split = sum(1 for p in params if hasattr(p, "ds_tensor") and p.ds_tensor.numel() < getattr(p, "ds_numel", 0))
    return split, len(params)


class MRTPOPolicyModelActorBase(PolicyModelActor.__ray_actor_class__):
    """Upstream's policy actor plus ``replay_relevance`` (dispatched like ``forward``)."""

    def replay_relevance(
        self,
        requests: Sequence[ReplayRequest],
        min_forwards: int,
        num_rewards: int,
        temperature: float,
        micro_batch_size: int,
        chunk_size: int,
        js_kernel: str,
        logits_fp32: bool = False,
    ) -> torch.Tensor:
        """q (len(requests), num_rewards, T) for this rank's share of the replay.

        ``min_forwards`` is the same on every rank (the max of ``count_forwards`` over ranks, prefix
        forwards included), so ZeRO-3's collective parameter gathers line up. The prefix-shared replay
        runs on the engine's HF module; a rank whose model cannot take a KV cache replays unshared (fewer
        forwards) and pads with dummies up to the same count.
        """
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if not getattr(self, "_partition_logged", False):
            self._partition_logged = True
            partitioned, total = zero3_partitioned(self.actor.model)
            print(
                f"[mrtpo] replay on rank {rank}: {partitioned} of {total} parameters partitioned by ZeRO-3",
                flush=True,
            )
        inject_replay_failure(rank)  # test-only (MRTPO_INJECT_REPLAY_FAILURE): the other ranks block in a gather
        self.actor.eval()
        try:
            q, _ = replay_relevance(
                self.actor.model,
                requests,
                num_rewards=num_rewards,
                temperature=temperature,
                micro_batch_size=micro_batch_size,
                chunk_size=chunk_size,
                js_kernel=js_kernel,
                logits_fp32=logits_fp32,
                pad_token_id=self.tokenizer.pad_token_id or 0,
                min_forwards=min_forwards,
                progress=self.strategy.is_rank_0(),
            )
        finally:
            self.actor.train()
        return q


# Ray forbids subclassing a decorated actor; decorate our subclass with upstream's resources.
MRTPOPolicyModelActor = ray.remote(num_gpus=1)(MRTPOPolicyModelActorBase)
