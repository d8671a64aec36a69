"""Statistics for the study report: curves across seeds, areas, thresholds, paired comparisons (t-interval,
exact sign-flip p-value, Holm over the declared comparisons, the within-run noise floor).

Pure functions on numpy arrays. ``curves`` are (S, T): one row per seed, one column per step, NaN where a step
was not logged.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

ALPHA = 0.05  # the decision level of every verdict (Holm-adjusted over the declared comparisons)
POWER = 0.8  # the power the detectable effect is stated at (the plan's "detectable effect")


def t975(dof: float) -> float:
    """The 97.5% quantile of Student's t with ``dof`` degrees of freedom (2.040 at 31); NaN below 1."""
    from scipy.stats import t

    return math.nan if dof < 1 else float(t.ppf(0.975, dof))


def legacy_t975(dof: int) -> float:
    """The quantile the code used before scipy's (a 3-decimal table up to 30 df, then the normal's 1.960): what
    localization summaries written before 2026-12-05 computed their intervals with, to read their sd back."""
    return math.nan if dof < 1 else (round(t975(dof), 3) if dof <= 30 else 1.960)


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
    """Mean of a per-step curve over its logged steps (same scale as the metric): the default training-curve AUC
    (docs/study.md) and the per-run average of a rate such as the replayed share (``auc_trapezoid``: a plan's)."""
    curve = np.asarray(curve, dtype=float)
    return float(np.nanmean(curve)) if np.any(~np.isnan(curve)) else math.nan


@dataclass
class Paired:
    """A - B over seeds paired by seed.

    mean: mean difference; t_low/t_high: its 95% t-interval; p_signflip: exact two-sided sign-flip (permutation)
    p-value; p_holm: Holm-adjusted p over the declared comparisons (``holm``; None when not declared); no
    bootstrap interval (the plan rules it out: over 10 seeds it restates the t-interval less exactly); wins: seeds
    where A > B;
    noise: the within-run noise floor of the difference (``noise_floor``), NaN when not measured;
    planned: the seeds the study's config plans for this comparison (None: not known); with fewer than planned the
    comparison is incomplete and not judged (the preregistered rule: no comparison is decided on fewer seeds).
    """

    n: int
    mean: float
    t_low: float
    t_high: float
    wins: int  # seeds where A > B
    p_signflip: float = math.nan
    p_holm: float | None = None
    noise: float = math.nan
    planned: int | None = None
    seeds: list[int] = field(default_factory=list)  # the seeds paired (set by the report's ``compare``)

    @property
    def incomplete(self) -> bool:
        return self.planned is not None and self.n < self.planned

    def verdict(self, alpha: float = ALPHA) -> str:
        """'A > B' / 'A < B' when the test rejects at ``alpha`` (the Holm-adjusted p where the comparison is
        declared, else the unadjusted sign-flip p); 'no difference resolved' otherwise; 'incomplete (n of N
        seeds)' before all its planned seeds are in, whatever the p."""
        if self.incomplete:
            return f"incomplete ({self.n} of {self.planned} seeds)"
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


def noise_floor(
    a_curves: Sequence[np.ndarray], b_curves: Sequence[np.ndarray], endpoint: str = "auc", auc: str = "mean"
) -> float:
    """Within-run noise floor of one seed's difference A - B: what the difference would scatter by from
    step-to-step noise alone, had the arms the same mean. Per-step noise s_A, s_B (``step_noise``, the mean over
    the runs of each arm); ``auc`` (``AUC_RULES[auc]`` over T steps): sqrt(s_A^2 + s_B^2) / sqrt(T) for the mean,
    sqrt(s_A^2 + s_B^2) sqrt(T - 1.5) / T for the trapezoid / T (weights 1/T inside and 1/(2T) at both ends);
    ``final`` (one step): sqrt(s_A^2 + s_B^2)."""
    sa = [step_noise(c) for c in a_curves]
    sb = [step_noise(c) for c in b_curves]
    sa, sb = [x for x in sa if not math.isnan(x)], [x for x in sb if not math.isnan(x)]
    if not sa or not sb:
        return math.nan
    s = math.sqrt(float(np.mean(np.square(sa))) + float(np.mean(np.square(sb))))
    if endpoint == "final":
        return s
    steps = int(np.mean([np.sum(~np.isnan(np.asarray(c, dtype=float))) for c in (*a_curves, *b_curves)]))
    if auc == "trapezoid":
        return s * math.sqrt(steps - 1.5) / steps if steps >= 2 else math.nan
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


def paired(a: np.ndarray, b: np.ndarray) -> Paired:
    """Compare per-seed values ``a`` and ``b`` (same seed order; NaN pairs dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    keep = ~(np.isnan(a) | np.isnan(b))
    d = a[keep] - b[keep]
    n = int(d.size)
    if n == 0:
        return Paired(0, math.nan, math.nan, math.nan, 0)
    mean, low, high = t_interval(d)
    return Paired(n, mean, low, high, int(np.sum(d > 0)), signflip_p(d))


def detectable_effect(sd: float, n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true mean difference a two-sided paired t-test at ``alpha`` detects with ``power``, given the
    seed-to-seed sd of the difference and ``n`` seeds: the delta whose noncentral t (noncentrality
    delta sqrt(n) / sd, n - 1 df) exceeds the critical value with probability ``power`` (the far tail counted
    too). The plan's exact sign-flip test is close to this t-test on the same differences. NaN below 2 seeds."""
    from scipy.optimize import brentq
    from scipy.stats import nct, t

    if n < 2 or not sd > 0 or math.isnan(sd):
        return math.nan
    dof, crit = n - 1, float(t.ppf(1 - alpha / 2, n - 1))

    def short(delta: float) -> float:
        nc = delta * math.sqrt(n) / sd
        far = float(nct.cdf(-crit, dof, nc))  # below 1e-20 where scipy's series gives NaN
        return float(nct.sf(crit, dof, nc)) + (0.0 if math.isnan(far) else far) - power

    high = sd
    while short(high) < 0:  # power rises with delta: widen the bracket until it holds the root
        high *= 2
    return float(brentq(short, 0.0, high))


def auc_trapezoid(curve: np.ndarray) -> float:
    """The plan's training-curve AUC: the trapezoid over the logged steps (step t at x = t), divided by the number
    of steps the curve spans (its length T). NaN steps are left out (the trapezoid bridges them); NaN with fewer
    than two logged steps."""
    curve = np.asarray(curve, dtype=float)
    x = np.arange(1, curve.size + 1, dtype=float)
    ok = ~np.isnan(curve)
    if ok.sum() < 2:
        return math.nan
    y, xs = curve[ok], x[ok]
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(xs)) / curve.size)


def running_mean(curve: np.ndarray, window: int = 3) -> np.ndarray:
    """Trailing mean over the last ``window`` logged steps (a batch of a few prompts is noisy step to step)."""
    curve = np.asarray(curve, dtype=float)
    out = np.full_like(curve, np.nan)
    for t in range(len(curve)):
        seg = curve[max(0, t - window + 1) : t + 1]
        if np.any(~np.isnan(seg)):
            out[t] = np.nanmean(seg)
    return out


def first_reaching(curve: np.ndarray, threshold: float) -> int | None:
    """Steps to threshold as the tool study's plan defines it: the first step (1-based) whose logged value reaches
    ``threshold``; None if none does (the report censors it at T + 1)."""
    hits = np.nonzero(np.asarray(curve, dtype=float) >= threshold)[0]
    return int(hits[0]) + 1 if hits.size else None


def steps_to(curve: np.ndarray, threshold: float, rule: str = "trailing3") -> int | None:
    """First step (1-based) at which the curve reaches ``threshold`` by ``rule`` (``STEPS_TO_RULES``): ``first``,
    the logged value itself; ``trailing3``, its 3-step trailing mean. None if never."""
    if rule == "first":
        return first_reaching(curve, threshold)
    return first_reaching(running_mean(curve, 3), threshold)


# How a study's report computes its training-curve endpoints (a study config's ``auc`` and ``steps_to``): the
# defaults are what docs/study.md describes; a preregistered plan may define them otherwise (the tool study's plan:
# trapezoid, first step reaching the threshold, runs that never do censored at T + 1)
AUC_RULES = {"mean": area, "trapezoid": auc_trapezoid}
STEPS_TO_RULES = ("trailing3", "first")


def cluster_interval(values: Sequence[float], clusters: Sequence[Any]) -> dict[str, Any]:
    """The 95% interval of the mean of ``values`` robust to correlation within ``clusters`` (responses of one
    prompt): the CR1 sandwich variance V = G / (G - 1) * sum_g (sum_{i in g} (y_i - mean))^2 / n^2 with a t
    quantile of G - 1 df. Equal cluster sizes give the t-interval of the per-cluster means; singleton clusters
    give the ordinary t-interval over values. Returns {"n", "clusters", "mean", "low", "high"} (None edges with
    fewer than 2 clusters)."""
    pairs = [(float(v), c) for v, c in zip(values, clusters, strict=True) if v is not None and math.isfinite(v)]
    n = len(pairs)
    groups = len({c for _, c in pairs})
    if not n:
        return {"n": 0, "clusters": 0, "mean": None, "low": None, "high": None}
    mean = sum(v for v, _ in pairs) / n
    if groups < 2:
        return {"n": n, "clusters": groups, "mean": mean, "low": None, "high": None}
    sums: dict[Any, float] = {}
    for v, c in pairs:
        sums[c] = sums.get(c, 0.0) + (v - mean)
    var = groups / (groups - 1) * sum(s * s for s in sums.values()) / n**2
    half = t975(groups - 1) * math.sqrt(var)
    return {"n": n, "clusters": groups, "mean": mean, "low": mean - half, "high": mean + half}


def cluster_widening_bound(n: int, per_cluster: int, quantile_used: float) -> float:
    """How much wider, at most, the CR1 interval over clusters (``cluster_interval``) can be than a t-interval over
    the same ``n`` values computed with ``quantile_used``, for any within-cluster correlation, when no cluster holds
    more than ``per_cluster`` values. By Cauchy-Schwarz, (sum_{i in g} e_i)^2 <= m sum_{i in g} e_i^2, so
    V_CR1 / V_naive <= G m (n - 1) / ((G - 1) n); the fewest clusters, G = ceil(n / m), is the worst case (largest
    ratio and t quantile). Returns the ratio of half-widths; NaN when fewer than 2 clusters are possible."""
    groups = math.ceil(n / per_cluster)
    if n < 2 or groups < 2:
        return math.nan
    ratio = groups * per_cluster * (n - 1) / ((groups - 1) * n)
    return math.sqrt(ratio) * t975(groups - 1) / quantile_used
