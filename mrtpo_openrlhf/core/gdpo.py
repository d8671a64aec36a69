"""GDPO's response-level pieces on a reward matrix: per-reward group normalization, the weighted sum, the batch
statistics, SAW's reward weights, fixed per-reward weights. ``estimators.response_advantages`` composes them.

Rows ``g*n .. g*n+n-1`` form one prompt's group. GDPO follows NVIDIA's reference: eps = 1e-4 in both steps,
Bessel-corrected std.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from .settings import DEFAULT_EPS


def _grouped(x: torch.Tensor, group_size: int) -> torch.Tensor:
    """(B, ...) -> (B/n, n, ...) with a clear error when B is not a multiple of n."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2 to normalize inside a group, got {group_size}")
    if x.shape[0] % group_size != 0:
        raise ValueError(f"batch size {x.shape[0]} is not a multiple of group_size {group_size}")
    return x.reshape(x.shape[0] // group_size, group_size, *x.shape[1:])


def group_normalize(
    rewards: torch.Tensor, group_size: int, eps: float = DEFAULT_EPS, present: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-reward group advantages A = (r - mean_g) / (std_g + eps).

    Args:
        rewards: (B, K) or (B,); groups are ``group_size`` consecutive rows.
        present: optional mask of rewards' shape; an absent value (a padded reward, a verifier failure) takes no
            part in its group's statistics and gets advantage 0. Its value may be anything, NaN included.
    Returns:
        A with the input's shape (float64 for float64 input, else float32). A reward constant inside a group (over
        its present values, or present in fewer than 2 rows) gives exactly 0 there (not a rounding residue), so
        such (response, reward) pairs can be skipped by the replay.
    """
    dtype = torch.float64 if rewards.dtype == torch.float64 else torch.float32
    if present is None:
        r = _grouped(rewards.to(dtype), group_size)
        mean = r.mean(dim=1, keepdim=True)
        std = r.std(dim=1, keepdim=True, unbiased=True)
        adv = (r - mean) / (std + eps)
        constant = (r.amax(dim=1, keepdim=True) == r.amin(dim=1, keepdim=True)).expand_as(r)
        return torch.where(constant, torch.zeros_like(adv), adv).reshape(rewards.shape)
    m = _grouped(present.bool(), group_size)
    r = torch.where(m, _grouped(rewards.to(dtype), group_size), torch.zeros((), dtype=dtype))
    count = m.sum(dim=1, keepdim=True)
    mean = r.sum(dim=1, keepdim=True) / count.clamp_min(1)
    centered = torch.where(m, r - mean, torch.zeros((), dtype=dtype))
    var = (centered**2).sum(dim=1, keepdim=True) / (count - 1).clamp_min(1)
    adv = (r - mean) / (var.sqrt() + eps)
    big, small = torch.tensor(float("inf"), dtype=dtype), torch.tensor(float("-inf"), dtype=dtype)
    constant = torch.where(m, r, big).amin(dim=1, keepdim=True) == torch.where(m, r, small).amax(dim=1, keepdim=True)
    keep = m & ~constant & (count >= 2)
    return torch.where(keep, adv, torch.zeros_like(adv)).reshape(rewards.shape)


def batch_standardize(values: torch.Tensor, eps: float = DEFAULT_EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch mean and Bessel std of a (B,) vector, the GDPO batch step's statistics.

    A batch of one has no spread: std is returned as 0 (then the step only centers).
    """
    v = values if values.dtype == torch.float64 else values.float()
    mean = v.mean()
    std = v.std(unbiased=True) if v.numel() > 1 else torch.zeros((), dtype=v.dtype)
    return mean, std


def weighted_sum(adv: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """S = sum_k weights_k * A[:, k]; adv (B,K), weights (K,) or (B,K) or None -> (B,)."""
    if weights is None:
        return adv.sum(dim=-1)
    return (adv * weights.to(adv)).sum(dim=-1)


def fixed_reward_weights(names: Sequence[Sequence[str]], weights: Mapping[str, float]) -> torch.Tensor:
    """(N, K) float32 fixed weights (``--algo.mrtpo.reward_weights``): ``weights[name]`` for each (row, reward) of
    that name, 1 for a name not listed (and for padding)."""
    k = max((len(row) for row in names), default=0)
    return torch.tensor(
        [[float(weights.get(name, 1.0)) for name in row] + [1.0] * (k - len(row)) for row in names],
        dtype=torch.float32,
    ).reshape(len(names), k)


def saw_weights(
    rewards: torch.Tensor,
    reward_mask: torch.Tensor | None = None,
    eps: float = DEFAULT_EPS,
    reward_ids: torch.Tensor | None = None,
    lows: float | torch.Tensor = 0.0,
) -> torch.Tensor:
    """SAW-style response-level reward weights from each reward's coefficient of variation.

    Our reading of SAW (arXiv 2606.07705, code: github.com/Zhaolutuan/SAW): a reward whose batch values vary more
    relative to their mean carries more signal. Each reward is first shifted by its lowest possible value, then
    w_r is proportional to CV_r = std_B(r - low) / (|mean_B(r - low)| + eps), normalized to mean 1 over the rewards
    with any spread (others get 0).

    Args:
        rewards: (B, K); reward_mask: optional (B, K) marking rewards that exist for a row.
        reward_ids: optional (B, K) int ids (e.g. one per reward name): statistics are taken per id over every
            (row, column) holding it, so a column that holds different rewards in different prompts (one
            constraint per column in instruction following) does not mix them. Negative ids are ignored.
        lows: the lowest possible value of the rewards: a number or (B, K).
    Returns:
        (K,) float32 weights without ``reward_ids``; (B, K) with them (0 where the mask or the id is off).
    """
    r = rewards.double() - (lows.double() if isinstance(lows, torch.Tensor) else float(lows))
    m = torch.ones_like(r) if reward_mask is None else reward_mask.double()
    ids = torch.arange(r.shape[1]).expand_as(r) if reward_ids is None else reward_ids.long()
    m = m * (ids >= 0)
    n_ids = int(ids.max()) + 1 if ids.numel() else 0
    flat_ids, flat_m = ids.clamp_min(0).reshape(-1), m.reshape(-1)
    r = torch.where(m > 0, r, torch.zeros_like(r)).reshape(-1)
    count = torch.zeros(n_ids, dtype=torch.float64).index_add_(0, flat_ids, flat_m)
    mean = torch.zeros(n_ids, dtype=torch.float64).index_add_(0, flat_ids, r * flat_m) / count.clamp_min(1)
    sq = ((r - mean[flat_ids]) * flat_m) ** 2
    var = torch.zeros(n_ids, dtype=torch.float64).index_add_(0, flat_ids, sq) / (count - 1).clamp_min(1)
    cv = var.sqrt() / (mean.abs() + eps)
    live = cv > 0
    w = torch.ones(n_ids, dtype=torch.float64) if not bool(live.any()) else cv * live.sum() / cv[live].sum()
    if reward_ids is None:
        return w.float()
    return (w[ids.clamp_min(0)] * m).float()
