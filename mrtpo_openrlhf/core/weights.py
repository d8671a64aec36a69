"""From relevance to token advantages: credit weights, the cap, the placement modes, the beta schedule.

The four shipped placement modes register here (``placements.register_placement``): their weights functions.

Each reward k of response i keeps its GDPO advantage A[i,k]; only its placement over tokens moves:
    w[i,k,t] = (1 - beta) + beta * q[i,k,t] / mean_t q[i,k,:]     (mean over valid tokens)
    a[i,t]   = sum_k w[i,k,t] * A[i,k]
Because mean_t w = 1, sum_t w * A_k = T * A_k: each reward's total credit equals GDPO's.
"""

from __future__ import annotations

import torch

from .gdpo import batch_standardize
from .placements import JOINT_REPLAY, NO_REPLAY, PER_REWARD, get_placement, register_placement
from .settings import DEFAULT_BETA, DEFAULT_EPS, DEFAULT_WARMUP_STEPS, check_beta, check_cap


def beta_schedule(step: int, beta_max: float = DEFAULT_BETA, warmup_steps: int = DEFAULT_WARMUP_STEPS) -> float:
    """Linear warm-up of beta: 0 at step 0, beta_max from step ``warmup_steps`` on.

    ``step`` counts completed training steps (0 for the first update).
    """
    if warmup_steps <= 0:
        return float(beta_max)
    return float(beta_max) * min(1.0, max(0, step) / warmup_steps)


def credit_weights(q: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """w = (1-beta) + beta * q / mean(q) over each row's valid tokens.

    Args:
        q: (..., T) relevance >= 0. mask: (..., T) valid-token mask (bool or 0/1), broadcastable to q.
        beta: in [0, 1].
    Returns:
        (..., T) float32: mean 1 and min 1-beta over valid tokens; 1 everywhere valid when q is all
        zero there (nothing to localize); 0 on masked positions.
    """
    check_beta(beta)
    valid = torch.broadcast_to(mask.bool(), q.shape)
    qv = torch.where(valid, q.float().clamp_min(0.0), torch.zeros((), dtype=torch.float32, device=q.device))
    count = valid.sum(dim=-1, keepdim=True)
    mean_q = qv.sum(dim=-1, keepdim=True) / count.clamp_min(1)
    has_signal = mean_q > 0
    ratio = torch.where(has_signal, qv / torch.where(has_signal, mean_q, torch.ones_like(mean_q)), torch.ones_like(qv))
    w = (1.0 - beta) + beta * ratio
    return torch.where(valid, w, torch.zeros_like(w))


def _shuffle_within_rows(w: torch.Tensor, mask: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Permute each response's valid positions with one permutation shared by its K rewards.

    w: (B, K, T), mask: (B, T). Masked positions stay in place (they are 0).
    """
    out = w.clone()
    for i in range(w.shape[0]):
        idx = mask[i].nonzero(as_tuple=True)[0]
        if idx.numel() > 1:
            perm = idx[torch.randperm(idx.numel(), generator=generator, device="cpu").to(idx.device)]
            out[i, :, idx] = w[i, :, perm]
    return out


def apply_cap(excess: torch.Tensor, adv: torch.Tensor, cap: float | None) -> torch.Tensor:
    """Total reallocated advantage per token, with the cap on what a token *receives*.

    Args:
        excess: (B, K, T) w - 1 per reward (0 on masked tokens). adv: (B, K).
    Returns:
        (B, T) sum_k (w_k - 1) * A_k, where the received part (tokens with w_k > 1) is clipped per token to
            |sum_k (w_k - 1)^+ A_k| <= cap * max_k |(w_k - 1)^+ A_k|.
    Rule: a token may receive at most ``cap`` times the largest single reward's reallocation to it.
    The credit tokens give up (w_k < 1) is never touched. With cap >= 1 a single reward never binds,
    nor do rewards that favour different tokens or cancel; it binds only where several rewards pile
    same-sign extra advantage onto the same token. cap=None disables it.
    """
    return _capped(excess, adv, cap)[0]


def _capped(excess: torch.Tensor, adv: torch.Tensor, cap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_cap``'s (B, T) result and the (B, T) bool mask of tokens where the cap changed it."""
    a = adv.unsqueeze(-1)
    received = excess.clamp_min(0.0) * a
    given = excess.clamp_max(0.0) * a
    total = received.sum(dim=1)
    binding = torch.zeros_like(total, dtype=torch.bool)
    if cap is not None:
        check_cap(cap)
        bound = cap * received.abs().amax(dim=1)
        binding = total.abs() > bound
        total = torch.maximum(torch.minimum(total, bound), -bound)
    return total + given.sum(dim=1), binding


@register_placement("mrtpo", PER_REWARD, "each reward's advantage placed by its own relevance profile", arm="mrtpo")
def per_reward_weights(a, q, valid, beta, generator):
    if q.shape[:2] != a.shape:
        raise ValueError(f"q has shape {tuple(q.shape)}, expected (B, K, T) with (B, K) = {tuple(a.shape)}")
    return credit_weights(q, valid.unsqueeze(1), beta)


@register_placement("uniform", NO_REPLAY, "GDPO's placement (relevance ignored)", arm=None)
def uniform_weights(a, q, valid, beta, generator):
    return None


@register_placement(
    "shuffle",
    PER_REWARD,
    "each response's weights permuted over its tokens (same values, wrong places)",
    arm="mrtpo-shuffle",  # same weights, shuffled within the response
    claim="Shuffling the weights within the response removes the gain (MRTPO > shuffle)",
)
def shuffled_weights(a, q, valid, beta, generator):
    return _shuffle_within_rows(per_reward_weights(a, q, valid, beta, generator), valid, generator)


@register_placement(
    "joint",
    JOINT_REPLAY,
    "one replay without any block, one profile shared by every replayed reward",
    arm="mrtpo-joint",  # one shared profile for every reward
    claim="One shared profile (joint) is weaker than per-reward placement (MRTPO > joint)",
)
def joint_weights(a, q, valid, beta, generator):
    """q: (B, T), applied to every reward, or (B, K, T) whose non-zero rows all hold the one shared profile."""
    if q.dim() == 2:
        profile, placed = q, torch.ones_like(a, dtype=torch.bool)
    else:
        # the replay writes the one joint profile on the replayed rewards and 0 elsewhere; a reward
        # without a profile (no verifier block) stays uniform, as in "mrtpo"
        profile, placed = q.amax(dim=1), (q * valid.unsqueeze(1)).amax(dim=-1) > 0
    w = credit_weights(profile, valid, beta).unsqueeze(1).expand(-1, a.shape[1], -1)
    return torch.where(placed.unsqueeze(-1), w, valid.unsqueeze(1).to(w.dtype))


def token_advantages(
    adv: torch.Tensor,
    q: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
    cap: float | None = None,
    mode: str = "mrtpo",
    reward_weights: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    return_binding: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Place each reward's advantage on its relevant tokens: a[i,t] = sum_k w[i,k,t] * A[i,k].

    Args:
        adv: (B, K) per-reward group advantages A (``group_normalize``); 0 for padded rewards.
        q: (B, K, T) relevance per reward (``mode="joint"``: (B, T), applied to every reward, or (B, K, T)
            whose non-zero rows all hold the one shared profile; all-zero rows stay uniform).
        mask: (B, T) valid response tokens.
        beta: placement strength in [0, 1]; 0 gives GDPO's uniform placement exactly.
        cap: limit on what one token receives from several rewards (``apply_cap``); None disables it.
        mode: a registered placement (``placements.PLACEMENTS``): "mrtpo" (per-reward weights), "uniform" (GDPO
            placement, q ignored), "shuffle" (each response's weights permuted over its tokens: same values, wrong
            places), "joint" (one profile for all rewards).
        reward_weights: optional (K,) or (B, K) response-level reward weights (e.g. SAW) applied to A.
        generator: RNG for "shuffle".
        return_binding: also return the (B, T) bool mask of tokens where the cap changed the advantage.
    Returns:
        (B, T) float32, 0 on masked positions. Each row's token mean equals sum_k A[i,k] (times
        reward weights) unless the cap binds.
    """
    weights_fn = get_placement(mode).weights
    a = adv.float() if reward_weights is None else adv.float() * reward_weights.to(adv.device).float()
    valid = mask.bool()
    uniform = a.sum(dim=-1, keepdim=True) * valid  # (B, T)
    w = None if beta == 0.0 else weights_fn(a, q, valid, beta, generator)
    if w is None:  # GDPO's placement: nothing moves
        return (uniform.float(), torch.zeros_like(valid)) if return_binding else uniform.float()
    excess = (w - 1.0) * valid.unsqueeze(1)  # (B, K, T)
    moved, binding = _capped(excess, a, cap)
    out = (uniform + moved) * valid
    return (out, binding & valid) if return_binding else out


def rescale_token_advantages(
    token_adv: torch.Tensor,
    response_adv_sum: torch.Tensor,
    mask: torch.Tensor,
    eps: float = DEFAULT_EPS,
) -> torch.Tensor:
    """GDPO's batch step applied to token advantages: (a - mean_B S) / (std_B S + eps).

    Args:
        token_adv: (B, T) from ``token_advantages``. response_adv_sum: (B,) S = sum_k A[i,k] (weighted).
        mask: (B, T).
    Returns:
        (B, T); each row's token mean equals GDPO's standardized response advantage, so beta = 0
        reproduces GDPO exactly.
    """
    mean, std = batch_standardize(response_adv_sum, eps)
    return (token_adv - mean) / (std + eps) * mask.to(token_adv.dtype)


def clip_response_advantages(
    token_adv: torch.Tensor,
    response_adv: torch.Tensor,
    mask: torch.Tensor,
    clip_range: tuple[float, float] | None,
) -> torch.Tensor:
    """Upstream's ``--reward.clip_range`` on the response-level advantage: as upstream's group estimators clamp the
    normalized reward before it becomes per-token, each row is shifted by ``clamp(r) - r``, so its token mean is the
    clamped value and the placement's reallocation is kept.

    Args:
        token_adv: (B, T) from ``rescale_token_advantages``. response_adv: (B,) the standardized response-level
            advantage r (GDPO's). mask: (B, T). clip_range: (low, high) or None (no clipping).
    Returns:
        (B, T).
    """
    if not clip_range:
        return token_adv
    low, high = float(clip_range[0]), float(clip_range[1])
    r = response_adv.to(token_adv.dtype)
    shift = r.clamp(min=low, max=high) - r
    return token_adv + shift.unsqueeze(-1) * mask.to(token_adv.dtype)
