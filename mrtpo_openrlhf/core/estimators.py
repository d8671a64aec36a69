"""From rewards to token advantages: the one path training runs, with the estimators registered by name.

    rewards (N, K) --``response_advantages``--> A (N, K), S (N,), the response level   [the whole rollout batch]
        --the replay, for the pairs with A != 0 (the adapter's job)--> relevance q (B, K, T)
        --``ADVANTAGE_ESTIMATORS[name](response, inputs, settings, placement)``--> (B, T) token advantages [any B]

Every estimator runs the same token path; they differ only in the step's placement (``StepPlacement``):
place each reward's A over the tokens (``weights.token_advantages``), GDPO's batch step
(``weights.rescale_token_advantages``), the length penalty added at its own size, then ``--reward.clip_range`` on
the response level (``weights.clip_response_advantages``). The batch statistics come from ``response_advantages``
over the whole rollout batch, so the rows of one micro-batch can be turned into token advantages on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .gdpo import batch_standardize, fixed_reward_weights, group_normalize, saw_weights, weighted_sum
from .placements import NO_REPLAY, get_placement
from .relevance import get_relevance
from .settings import MethodSettings
from .weights import (
    beta_schedule,
    clip_response_advantages,
    rescale_token_advantages,
    token_advantages,
)


@dataclass(frozen=True)
class StepPlacement:
    """Where a step puts each reward's advantage: the mode, the step's beta (after the warm-up) and the cap."""

    mode: str
    beta: float
    cap: float | None

    @property
    def needs_relevance(self) -> bool:
        """Whether the placement reads q (else the replay can be skipped)."""
        return self.beta > 0 and self.replay != NO_REPLAY

    @property
    def replay(self) -> str:
        """The replay the mode needs (``placements.REPLAYS``)."""
        return get_placement(self.mode).replay


UNIFORM = StepPlacement("uniform", 0.0, None)


@dataclass
class ResponseAdvantages:
    """The response level of the whole rollout batch (N responses, K rewards).

    group: (N, K) per-reward group advantages A (0 where a reward is constant in its group or absent).
    weights: (N, K) response-level reward weights (SAW times the fixed ``reward_weights``) or None.
    summed: (N,) S = sum_k weights * A; its batch mean and std are GDPO's batch step.
    level: (N,) GDPO's response-level advantage (S - mean_B S) / (std_B S + eps) plus the length penalty.
    penalty: (N,) the length penalty in reward units (0 without one), added after the normalizations.
    """

    group: torch.Tensor
    weights: torch.Tensor | None
    summed: torch.Tensor
    level: torch.Tensor
    penalty: torch.Tensor


def response_advantages(
    values: torch.Tensor,
    present: torch.Tensor | None,
    group_size: int,
    settings: MethodSettings,
    reward_ids: torch.Tensor | None = None,
    reward_low: float = 0.0,
    penalty: torch.Tensor | None = None,
    reward_names: Sequence[Sequence[str]] | None = None,
) -> ResponseAdvantages:
    """GDPO's response level on the whole rollout batch, in the rewards' dtype (float32 in training).

    Args:
        values: (N, K) rewards; groups are ``group_size`` consecutive rows. present: (N, K) mask or None (all).
        reward_ids: (N, K) id per reward name for SAW's per-name statistics (``gdpo.saw_weights``); -1 pads.
        reward_low: the lowest possible reward value (SAW shifts by it). penalty: (N,) length penalty or None.
        reward_names: N lists of K names ("" pads), needed for ``settings.reward_weights``.
    """
    eps = settings.eps
    adv = group_normalize(values, group_size, eps, present)
    weights = None
    if settings.reward_weighting == "saw":
        weights = saw_weights(values, present, eps, reward_ids, lows=reward_low)
    if settings.reward_weights:
        if reward_names is None:
            raise ValueError("reward_weights need the reward names of every row (reward_names)")
        fixed = fixed_reward_weights(reward_names, dict(settings.reward_weights))
        weights = fixed if weights is None else weights * fixed  # composes with SAW: the product
    summed = weighted_sum(adv, weights)
    mean, std = batch_standardize(summed, eps)
    penalty = torch.zeros(len(summed)) if penalty is None else penalty
    level = (summed - mean) / (std + eps) + penalty
    return ResponseAdvantages(adv, weights, summed, level, penalty)


@dataclass
class TokenInputs:
    """Rows of the rollout batch (e.g. one micro-batch) and what their placement reads.

    rows: (B,) long indices into ``ResponseAdvantages``. mask: (B, T) valid response tokens.
    relevance: (B, K, T) q (0 for pairs not replayed), or None when the step does not replay.
    step: completed training steps (beta's warm-up; read only where the caller passes no step placement).
    generator: RNG of the ``shuffle`` ablation.
    """

    rows: torch.Tensor
    mask: torch.Tensor
    relevance: torch.Tensor | None = None
    step: int = 0
    generator: torch.Generator | None = None


@dataclass
class TokenAdvantages:
    """advantages: (B, T) float32, 0 on masked positions. cap_binding: (B, T) bool, where the cap changed them."""

    advantages: torch.Tensor
    cap_binding: torch.Tensor


def token_path(
    response: ResponseAdvantages, inputs: TokenInputs, placement: StepPlacement, settings: MethodSettings
) -> TokenAdvantages:
    """The path every estimator shares: placement, GDPO's batch step, the length penalty, the clip range."""
    rows, mask = inputs.rows, inputs.mask.bool()
    adv = response.group[rows]
    q = inputs.relevance
    if q is None:
        if placement.needs_relevance:
            raise ValueError(f"placement {placement.mode!r} with beta {placement.beta} needs the relevance q")
        q = torch.zeros(len(rows), adv.shape[1], mask.shape[1])
    weights = None if response.weights is None else response.weights[rows]
    tok, binding = token_advantages(
        adv, q, mask, placement.beta, placement.cap, placement.mode, weights, inputs.generator, return_binding=True
    )
    a = rescale_token_advantages(tok, response.summed, mask, settings.eps) + response.penalty[rows, None] * mask
    a = clip_response_advantages(a, response.level[rows], mask, settings.clip_range)
    return TokenAdvantages(a, binding)


@dataclass(frozen=True)
class AdvantageEstimator:
    """A registered estimator: its step placement, and the ``--algo.mrtpo.*`` settings it reads (the others have no
    effect under it). Called as ``estimator(response, inputs, settings, placement) -> TokenAdvantages``, with the
    step's ``placement = estimator.placement(settings, step)`` computed once by the caller (None: from
    ``inputs.step``)."""

    name: str
    placement: Callable[[MethodSettings, int], StepPlacement]
    reads: frozenset[str]
    summary: str

    def __call__(
        self,
        response: ResponseAdvantages,
        inputs: TokenInputs,
        settings: MethodSettings,
        placement: StepPlacement | None = None,
    ) -> TokenAdvantages:
        if placement is None:
            placement = self.placement(settings, inputs.step)
        return token_path(response, inputs, placement, settings)


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_estimator(name: str, reads: set[str], summary: str):
    """Register ``placement(settings, step) -> StepPlacement`` as the estimator ``name``; a taken name is refused."""
    if name in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"advantage estimator {name!r} is already registered")

    def deco(placement: Callable[[MethodSettings, int], StepPlacement]):
        ADVANTAGE_ESTIMATORS[name] = AdvantageEstimator(name, placement, frozenset(reads), summary)
        return placement

    return deco


@register_estimator(
    "gdpo",
    reads={"eps", "reward_weighting", "reward_weights"},
    summary="per-reward group normalization, summed, one batch step; uniform over the tokens",
)
def gdpo_placement(settings: MethodSettings, step: int) -> StepPlacement:
    return UNIFORM


@register_estimator(
    "mrtpo",
    reads={
        "beta",
        "warmup_steps",
        "cap",
        "placement",
        "relevance",
        "reward_weighting",
        "reward_weights",
        "eps",
        "replay_micro_batch_size",
        "chunk_size",
        "js_kernel",
        "replay_logits",
        "block_separator",
    },
    summary="GDPO's advantages, each reward placed on its relevant tokens (replay)",
)
def mrtpo_placement(settings: MethodSettings, step: int) -> StepPlacement:
    get_placement(settings.placement)  # an unknown mode fails here, before any replay
    get_relevance(settings.relevance)  # and an unknown relevance measure
    return StepPlacement(settings.placement, beta_schedule(step, settings.beta, settings.warmup_steps), settings.cap)
