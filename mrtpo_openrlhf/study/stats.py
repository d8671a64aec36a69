"""Statistics for the study report: curves across seeds, areas, thresholds, paired comparisons.

Pure functions on numpy arrays. ``curves`` are (S, T): one row per seed, one column per step, NaN where a step
was not logged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

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
    """A - B over seeds paired by seed: mean difference, 95% t-interval, bootstrap percentile interval, wins."""

    n: int
    mean: float
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    wins: int  # seeds where A > B

    def verdict(self) -> str:
        """'A > B' / 'A < B' only when the t-interval excludes 0; else 'no difference resolved'."""
        if self.n < 2 or math.isnan(self.t_low):
            return "too few seeds"
        if self.t_low > 0:
            return "A > B"
        if self.t_high < 0:
            return "A < B"
        return "no difference resolved"


def paired(a: np.ndarray, b: np.ndarray, n_boot: int = 10_000, seed: int = 0) -> Paired:
    """Compare per-seed values ``a`` and ``b`` (same seed order; NaN pairs dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    n = int(d.size)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(d.mean())
    if n > 1:
        half = t975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
        rng = np.random.default_rng(seed)
        boots = d[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
        lo, hi = (float(x) for x in np.percentile(boots, [2.5, 97.5]))
    else:
        half, lo, hi = math.nan, math.nan, math.nan
    return Paired(n, mean, mean - half, mean + half, lo, hi, int(np.sum(d > 0)))
