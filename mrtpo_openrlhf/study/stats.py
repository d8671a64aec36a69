"""Statistics for the study report: curves across seeds, areas, thresholds, paired comparisons (t-interval,
exact sign-flip p-value, Holm over the declared comparisons, the within-run noise floor).

Pure functions on numpy arrays. ``curves`` are (S, T): one row per seed, one column per step, NaN where a step
was not logged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

ALPHA = 0.05  # the decision level of every verdict (Holm-adjusted over the declared comparisons)
BOOTSTRAP_MIN_SEEDS = 8  # below this a bootstrap interval over seeds only restates the signs

# two-sided 97.5% quantiles of Student's t by degrees of freedom (1..30); beyond: normal
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def t975(dof: int) -> float:
    if dof < 1:
        return math.nan
    return _T975[dof - 1] if dof <= len(_T975) else 1.960


def mean_band(curves: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T,) mean across seeds and the 95% t-interval's lower and upper edges (NaN band with one seed)."""
    curves = np.asarray(curves, dtype=float)
    n = np.sum(~np.isnan(curves), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a step no seed logged: NaN, as intended
        mean = np.nanmean(curves, axis=0) if curves.size else np.array([])
        sd = np.nanstd(curves, axis=0, ddof=1) if curves.shape[0] > 1 else np.full(curves.shape[1], np.nan)
        half = np.array([t975(int(k) - 1) for k in n]) * sd / np.sqrt(np.maximum(n, 1))
    return mean, mean - half, mean + half


def area(curve: np.ndarray) -> float:
    """Area under a per-step curve as the mean over logged steps (same scale as the metric)."""
    curve = np.asarray(curve, dtype=float)
    return float(np.nanmean(curve)) if np.any(~np.isnan(curve)) else math.nan


def running_mean(curve: np.ndarray, window: int = 3) -> np.ndarray:
    """Trailing mean over the last ``window`` logged steps (a batch of a few prompts is noisy step to step)."""
    curve = np.asarray(curve, dtype=float)
    out = np.full_like(curve, np.nan)
    for t in range(len(curve)):
        seg = curve[max(0, t - window + 1) : t + 1]
        if np.any(~np.isnan(seg)):
            out[t] = np.nanmean(seg)
    return out


def steps_to(curve: np.ndarray, threshold: float, window: int = 3) -> int | None:
    """First step (1-based) at which the ``window``-step trailing mean reaches ``threshold``; None if never."""
    smooth = running_mean(curve, window)
    hits = np.nonzero(smooth >= threshold)[0]
    return int(hits[0]) + 1 if hits.size else None


@dataclass
class Paired:
    """A - B over seeds paired by seed.

    mean: mean difference; t_low/t_high: its 95% t-interval; p_signflip: exact two-sided sign-flip (permutation)
    p-value; p_holm: Holm-adjusted p over the declared comparisons (``holm``; None when not declared);
    boot_low/boot_high: bootstrap percentile interval, only from ``BOOTSTRAP_MIN_SEEDS`` seeds on (NaN below: a
    bootstrap over 3 seeds has 10 distinct resamples and only restates the signs); wins: seeds where A > B;
    noise: the within-run noise floor of the difference (``noise_floor``), NaN when not measured.
    """

    n: int
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    wins: int  # seeds where A > B
    p_signflip: float = math.nan
    p_holm: float | None = None
    noise: float = math.nan

    def verdict(self, alpha: float = ALPHA) -> str:
        """'A > B' / 'A < B' when the test rejects at ``alpha`` (the Holm-adjusted p where the comparison is
        declared, else the unadjusted sign-flip p); 'no difference resolved' otherwise."""
        if self.n < 2 or math.isnan(self.t_low):
            return "too few seeds"
        p = self.p_holm if self.p_holm is not None else self.p_signflip
        if p <= alpha and self.mean > 0:
            return "A > B"
        if p <= alpha and self.mean < 0:
            return "A < B"
        return "no difference resolved"


def signflip_p(d: np.ndarray, max_exact: int = 20, draws: int = 2**20, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p-value of mean(d) = 0: the share of the 2^n sign patterns whose mean is at
    least as far from 0 as the observed one (the observed pattern included, so p >= 2 / 2^n). Exact for
    n <= ``max_exact``; beyond, ``draws`` random patterns (seeded). NaN without data."""
    d = np.asarray(d, dtype=float)
    d = d[~np.isnan(d)]
    n = d.size
    if n == 0:
        return math.nan
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))  # ties (e.g. a zero difference) count as extreme
    if n <= max_exact:
        hits = 0
        chunk = 1 << min(n, 16)
        for start in range(0, 1 << n, chunk):
            codes = np.arange(start, min(start + chunk, 1 << n), dtype=np.int64)
            signs = 1 - 2 * ((codes[:, None] >> np.arange(n)) & 1)
            hits += int(np.sum(np.abs(signs @ d) >= observed - tol))
        return hits / (1 << n)
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, n))
    return float((np.sum(np.abs(signs @ d) >= observed - tol) + 1) / (draws + 1))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: sorted ascending, p_(i) -> max over j <= i of min(1, (m - j + 1) p_(j)).
    NaN p-values (a comparison not run) are left out of m and stay NaN."""
    idx = [i for i, p in enumerate(pvalues) if not math.isnan(p)]
    m = len(idx)
    out = [math.nan] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def step_noise(curve: np.ndarray) -> float:
    """Per-step noise sd of one run's curve: sd of its step-to-step differences / sqrt(2) (a slow trend adds
    little to a difference of neighbours; independent noise of sd s gives differences of sd s * sqrt(2)).
    NaN with fewer than three logged steps."""
    curve = np.asarray(curve, dtype=float)
    ok = curve[~np.isnan(curve)]
    if ok.size < 3:
        return math.nan
    return float(np.std(np.diff(ok), ddof=1) / math.sqrt(2))


def noise_floor(a_curves: Sequence[np.ndarray], b_curves: Sequence[np.ndarray], endpoint: str = "auc") -> float:
    """Within-run noise floor of one seed's difference A - B: what the difference would scatter by from
    step-to-step noise alone, had the arms the same mean. Per-step noise s_A, s_B (``step_noise``, the mean over
    the runs of each arm); ``auc`` (mean over T steps): sqrt(s_A^2 + s_B^2) / sqrt(T); ``final`` (one step):
    sqrt(s_A^2 + s_B^2)."""
    sa = [step_noise(c) for c in a_curves]
    sb = [step_noise(c) for c in b_curves]
    sa, sb = [x for x in sa if not math.isnan(x)], [x for x in sb if not math.isnan(x)]
    if not sa or not sb:
        return math.nan
    s = math.sqrt(float(np.mean(np.square(sa))) + float(np.mean(np.square(sb))))
    if endpoint == "final":
        return s
    steps = int(np.mean([np.sum(~np.isnan(np.asarray(c, dtype=float))) for c in (*a_curves, *b_curves)]))
    return s / math.sqrt(max(1, steps))


def heldout_noise(per_prompt_a: Sequence[float | None], per_prompt_b: Sequence[float | None]) -> float:
    """Noise floor of one seed's held-out difference: sqrt(se_A^2 + se_B^2), se = sd over prompts of the
    per-prompt mean / sqrt(prompts) (the sampling noise of scoring a checkpoint on those prompts)."""

    def se(values):
        v = np.array([x for x in values if x is not None], dtype=float)
        return float(np.std(v, ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan

    return math.sqrt(se(per_prompt_a) ** 2 + se(per_prompt_b) ** 2)


def t_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t-interval of the mean (NaN edges with one value)."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if v.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = t975(v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, mean - half, mean + half


def paired(a: np.ndarray, b: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> Paired:
    """Compare per-seed values ``a`` and ``b`` (same seed order; NaN pairs dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    n = int(d.size)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    mean, low, high = t_interval(d)
    lo = hi = math.nan
    if n >= BOOTSTRAP_MIN_SEEDS:
        rng = np.random.default_rng(seed)
        boots = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
        lo, hi = (float(x) for x in np.percentile(boots, [2.5, 97.5]))
    return Paired(n, mean, low, high, lo, hi, int(np.sum(d > 0)), signflip_p(d))
