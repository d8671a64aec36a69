"""Actor side: the replay runs on the policy's own DeepSpeed engine (ZeRO-3 safe), and the policy's log-prob
forwards (experience making and training) run the output layer only at the response positions."""

from __future__ import annotations

import os
from typing import Sequence

import ray
import torch
from openrlhf.models import Actor
from openrlhf.trainer.ray.launcher import ReferenceModelActor
from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

from ..core import DEFAULT_RELEVANCE, ReplayRequest, replay_relevance
from ..paths import share_like_umask
from ..ports import held_port
from .log_probs import label_log_probs
from .ranks import inject_replay_failure
from .zero3_sizes import size_strategy_buffers


def zero3_partitioned(module: torch.nn.Module) -> tuple[int, int]:
    """(parameters whose local ZeRO-3 shard holds fewer elements than the full tensor, all parameters)."""
    params = list(module.parameters())
    split = sum(1 for p in params if hasattr(p, "ds_tensor") and p.ds_tensor.numel() < getattr(p, "ds_numel", 0))
    return split, len(params)


class ResponseLogitsActor(Actor):
    """Upstream's ``Actor`` whose action log-probs come from the output layer at the response positions only.

    Upstream computes fp32 logits (B, T, V) for every position, prompt included, and then keeps the last
    ``action_mask.shape[1]`` log-probs. OpenRLHF 0.11.2 builds each sample's ``action_mask`` over the whole
    sequence after its first token (width T - 1, zero on the prompt: ``SamplesGenerator.
    _process_response_into_experience``), so the width alone says nothing about where responses start. Here the
    output layer runs from the first column where any row's ``action_mask`` is set (``logits_to_keep``, which
    Hugging Face causal LMs take) to the end: with the embedded default's ~230-token prompts and 96 new tokens,
    a third of the positions, and of the fp32 logits and their gradient (250 MB each per micro-batch of 4 rows of
    SmolLM2). The log-probs come from those logits in fp32 position chunks (``log_probs.label_log_probs``), so no
    fp32 copy of them is kept for the backward pass. The values are the same numbers, since the output layer is
    applied per position; the columns before it are masked and get log-prob 0, as upstream's do after the mask.
    Any other call (packed samples, entropy, full log-probs, multimodal inputs) goes to upstream unchanged. With
    ``return_output`` the output's ``logits`` are those of the kept positions as the model gave them, (B, K, V) in
    the model's dtype and not divided by the temperature, K = A - (first action column) + 1 for an action mask of
    width A (upstream's training step reads only the output's ``aux_loss``).
    """

    def forward(
        self,
        sequences: torch.LongTensor,
        action_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        return_output: bool = False,
        allgather_logits: bool = False,
        return_logprobs: bool = False,
        ring_attn_group=None,
        packed_seq_lens=None,
        return_entropy: bool = False,
        **mm_inputs,
    ):
        upstream_only = (
            action_mask is None
            or attention_mask is None
            or getattr(self, "packing_samples", False)
            or getattr(self, "is_vlm", False)
            or return_logprobs
            or return_entropy
            or allgather_logits
            or mm_inputs
        )
        if upstream_only:
            return super().forward(
                sequences, action_mask, attention_mask, return_output, allgather_logits, return_logprobs,
                ring_attn_group, packed_seq_lens, return_entropy, **mm_inputs,
            )  # fmt: skip
        n_actions = action_mask.shape[1]  # its last column is the sequence's last token
        acting = torch.nonzero(action_mask.any(0)).flatten()
        first = int(acting[0]) if len(acting) else n_actions  # the first column any row acts in
        keep = n_actions - first + 1  # logits for the tokens of columns first..A-1, and one more position
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        output = self.model(sequences, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=keep)
        # position j predicts token j + 1: the first K - 1 of the K kept positions predict the last K - 1 tokens
        targets = sequences[:, sequences.shape[1] - (keep - 1) :]
        log_probs = label_log_probs(output["logits"][:, :-1], targets, self.temperature)
        action_log_probs = torch.nn.functional.pad(log_probs, (first, 0)) * action_mask.float()
        return (action_log_probs, output) if return_output else action_log_probs


class HeldRendezvousPort:
    """Rank 0's store port, held bound from the actor's start until its store binds it.

    Upstream chooses the port in ``__init__`` (``self._get_free_port()``) and binds it in ``_setup_distributed``,
    after the model loads: in between another socket could take it and the store failed with EADDRINUSE (CI).
    Here the port is drawn outside the kernel's ephemeral range and stays bound until that moment
    (``mrtpo_openrlhf/ports.py``).
    """

    _port_holder = None

    def _get_free_port(self) -> int:
        self._port_holder = held_port()
        return self._port_holder.getsockname()[1]

    def _setup_distributed(self, strategy):
        if self._port_holder is not None:
            self._port_holder.close()
            self._port_holder = None
        super()._setup_distributed(strategy)


class MRTPOPolicyModelActorBase(HeldRendezvousPort, PolicyModelActor.__ray_actor_class__):
    """Upstream's policy actor plus ``replay_relevance`` (dispatched like ``forward``), with the policy's log-prob
    forwards at the response positions only (``ResponseLogitsActor``) and ZeRO-3 buffers sized from the model
    (``zero3_sizes.py``), and its group's rendezvous port held until its store binds it (``HeldRendezvousPort``)."""

    def init_model_from_pretrained(self, strategy, pretrain, *args, **kwargs):
        size_strategy_buffers(strategy, pretrain)
        super().init_model_from_pretrained(strategy, pretrain, *args, **kwargs)
        if type(self.actor) is Actor:  # same object, same weights and engine: only forward changes
            self.actor.__class__ = ResponseLogitsActor

    def save_model(self):
        super().save_model()  # upstream: the HF folder in --ckpt.output_dir (pinned in test_upstream_contracts)
        if self.strategy.is_rank_0():
            share_like_umask(self.strategy.args.ckpt.output_dir)

    def save_checkpoint(self, tag, *args, **kwargs):
        super().save_checkpoint(tag, *args, **kwargs)  # with --ckpt.save_hf: an HF folder ``{ckpt.path}/{tag}_hf``
        hf = os.path.join(self.strategy.args.ckpt.path, f"{tag}_hf")
        if self.strategy.is_rank_0() and os.path.isdir(hf):
            share_like_umask(hf)

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
        relevance: str = DEFAULT_RELEVANCE,
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
                f"[mrtpo] replay on rank {rank}: {partitioned} of {total} parameters partitioned by ZeRO-3, "
                f"relevance {relevance}",
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
                relevance=relevance,
                pad_token_id=self.tokenizer.pad_token_id or 0,
                min_forwards=min_forwards,
                progress=self.strategy.is_rank_0(),
            )
        finally:
            self.actor.train()
        return q


class MRTPOReferenceModelActorBase(HeldRendezvousPort, ReferenceModelActor.__ray_actor_class__):
    """Upstream's reference actor with its group's rendezvous port held until its store binds it."""


# Ray forbids subclassing a decorated actor; decorate our subclasses with upstream's resources.
MRTPOPolicyModelActor = ray.remote(num_gpus=1)(MRTPOPolicyModelActorBase)
MRTPOReferenceModelActor = ray.remote(num_gpus=1)(MRTPOReferenceModelActorBase)
