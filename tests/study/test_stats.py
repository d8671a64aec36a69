"""Study statistics against independent references (scipy's t-distribution and permutation test, a brute-force
sign-flip enumeration, hand computations)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from mrtpo_openrlhf.study.stats import (
    area,
    auc_trapezoid,
    cluster_interval,
    cluster_widening_bound,
    detectable_effect,
    first_reaching,
    heldout_noise,
    holm,
    legacy_t975,
    mean_band,
    noise_floor,
    paired,
    signflip_p,
    step_noise,
    steps_to,
    t975,
)


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 10, 29, 30, 31, 63, 200])
def test_t_quantiles_match_scipy(dof):
    assert t975(dof) == pytest.approx(sps.t.ppf(0.975, dof), abs=1e-9)


def test_t_quantile_beyond_thirty_dof_is_not_the_normal():
    """The old table stopped at 30 df and gave the normal's 1.96 beyond: 32 responses (31 df) need 2.040."""
    assert round(t975(31), 3) == 2.040 and t975(31) > 1.97
    # the old quantiles, kept to read the sd back out of summaries written with them (hand-copied old table)
    assert [legacy_t975(d) for d in (1, 12, 30, 31, 63)] == [12.706, 2.179, 2.042, 1.960, 1.960]


def test_mean_band_is_the_t_interval_per_step():
    rng = np.random.default_rng(0)
    c = rng.normal(size=(3, 7))
    c[1, 4] = np.nan  # a missing step: that column has 2 seeds
    mean, lo, hi = mean_band(c)
    for t in range(7):
        col = c[:, t][~np.isnan(c[:, t])]
        ref_lo, ref_hi = sps.t.interval(0.95, len(col) - 1, loc=col.mean(), scale=sps.sem(col))
        assert mean[t] == pytest.approx(col.mean())
        assert lo[t] == pytest.approx(ref_lo, rel=1e-3) and hi[t] == pytest.approx(ref_hi, rel=1e-3)


def test_single_seed_has_no_band():
    mean, lo, hi = mean_band(np.array([[0.1, 0.2]]))
    assert mean.tolist() == [0.1, 0.2] and np.isnan(lo).all() and np.isnan(hi).all()


def test_area_is_the_mean_over_logged_steps():
    curve = np.array([0.0, 0.5, np.nan, 1.0, 1.0, 1.0])
    assert area(curve) == pytest.approx((0 + 0.5 + 1 + 1 + 1) / 5)
    assert math.isnan(area(np.array([np.nan, np.nan])))


def test_auc_is_the_plans_trapezoid_over_steps_divided_by_their_number():
    """The plan: 'trapezoid over steps, divided by the number of steps' (not the mean over steps)."""
    rng = np.random.default_rng(3)
    curve = rng.uniform(size=24)
    assert auc_trapezoid(curve) == pytest.approx(np.trapezoid(curve, np.arange(1, 25)) / 24)
    assert auc_trapezoid(curve) != pytest.approx(area(curve))
    # a missing step: the trapezoid bridges it (steps 1, 2, 4 at x = 1, 2, 4), still divided by 4
    gap = np.array([0.0, 1.0, np.nan, 1.0])
    assert auc_trapezoid(gap) == pytest.approx((0.5 + 2 * 1.0) / 4)
    assert math.isnan(auc_trapezoid(np.array([1.0, np.nan])))


def test_steps_to_threshold_is_the_first_step_reaching_it():
    """The tool plan: steps until the rate *first* reaches 0.8; the default rule: its 3-step trailing mean's."""
    curve = np.array([0.0, 0.85, 0.5, 0.8, 0.9, 1.0])
    assert first_reaching(curve, 0.8) == 2 and steps_to(curve, 0.8, "first") == 2
    # trailing means: 0, .425, .45, .717, .733, .9
    assert steps_to(curve, 0.8) == 6 and steps_to(curve, 0.8, "trailing3") == 6
    assert first_reaching(curve, 1.01) is None
    assert first_reaching(np.array([np.nan, 0.8]), 0.8) == 2


def test_detectable_effect_has_the_stated_power_by_simulation():
    """At the returned effect, a two-sided paired t-test on n seeds rejects in 80% of simulated studies (an
    independent Monte Carlo of the test itself); the tool study's sd 0.098 over 10 seeds gives about 0.097, and
    0.125 at Holm's first threshold 0.05/4."""
    sd, n = 0.098, 10
    delta = detectable_effect(sd, n)
    assert delta == pytest.approx(0.0976, abs=5e-4)
    assert detectable_effect(sd, n, 0.05 / 4) == pytest.approx(0.1259, abs=5e-4)
    rng = np.random.default_rng(0)
    d = rng.normal(delta, sd, size=(200_000, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(t) > sps.t.ppf(0.975, n - 1)) == pytest.approx(0.80, abs=0.005)
    assert math.isnan(detectable_effect(sd, 1)) and math.isnan(detectable_effect(math.nan, 10))


def _sandwich(values, clusters):
    """CR1 variance of the mean as a regression on a constant: (X'X)^-1 (sum_g X_g' u_g u_g' X_g) (X'X)^-1 with
    the G / (G - 1) correction, in matrix form."""
    y = np.asarray(values, dtype=float)
    X = np.ones((y.size, 1))
    u = y - y.mean()
    bread = np.linalg.inv(X.T @ X)
    meat = sum(
        X[idx].T @ np.outer(u[idx], u[idx]) @ X[idx]
        for idx in (np.flatnonzero(np.asarray(clusters) == c) for c in set(clusters))
    )
    g = len(set(clusters))
    return float((bread @ meat @ bread)[0, 0] * g / (g - 1))


def test_cluster_interval_against_naive_references():
    rng = np.random.default_rng(1)
    prompts = np.repeat(np.arange(8), 4)  # 8 prompts x 4 responses, correlated within a prompt
    y = np.repeat(rng.normal(size=8), 4) + 0.3 * rng.normal(size=32)
    ci = cluster_interval(y, prompts)
    # equal cluster sizes: the t-interval of the 8 per-prompt means
    means = y.reshape(8, 4).mean(axis=1)
    lo, hi = sps.t.interval(0.95, 7, loc=means.mean(), scale=sps.sem(means))
    assert (ci["n"], ci["clusters"]) == (32, 8)
    assert ci["mean"] == pytest.approx(y.mean()) and ci["low"] == pytest.approx(lo) and ci["high"] == pytest.approx(hi)
    # and wider than the naive t-interval over the 32 responses, which ignores the clustering
    naive = sps.t.interval(0.95, 31, loc=y.mean(), scale=sps.sem(y))
    assert ci["high"] - ci["low"] > 1.5 * (naive[1] - naive[0])
    # one response per cluster: the ordinary t-interval
    single = cluster_interval(y, np.arange(32))
    assert single["low"] == pytest.approx(naive[0]) and single["high"] == pytest.approx(naive[1])
    # unequal clusters (a span present in some responses only) and missing values: the sandwich in matrix form
    keep = rng.uniform(size=32) < 0.6
    vals = [float(v) if k else None for v, k in zip(y, keep)]
    ci = cluster_interval(vals, prompts)
    kept_p = prompts[keep]
    half = sps.t.ppf(0.975, len(set(kept_p)) - 1) * math.sqrt(_sandwich(y[keep], list(kept_p)))
    assert ci["high"] - ci["mean"] == pytest.approx(half) and ci["clusters"] == len(set(kept_p))
    assert cluster_interval([1.0, 2.0], ["a", "a"])["low"] is None  # one cluster: no interval


def test_cluster_widening_bound_is_reached_by_perfect_correlation_and_never_exceeded():
    """Identical responses within each prompt attain the Cauchy-Schwarz bound exactly; random data stays under."""
    rng = np.random.default_rng(2)
    prompts = np.repeat(np.arange(8), 4)
    for y, exact in ((np.repeat(rng.normal(size=8), 4), True), (rng.normal(size=32), False)):
        naive_half = 1.96 * sps.sem(y)  # as the old code computed it, with the normal's 1.96 at 31 df
        ci = cluster_interval(y, prompts)
        ratio = (ci["high"] - ci["mean"]) / naive_half
        bound = cluster_widening_bound(32, 4, 1.96)
        assert ratio == pytest.approx(bound) if exact else ratio < bound
    assert math.isnan(cluster_widening_bound(4, 4, 2.0))  # one cluster possible


def test_paired_difference_and_verdicts():
    a = np.array([0.5, 0.6, 0.7])
    b = np.array([0.1, 0.25, 0.3])
    p = paired(a, b)
    d = a - b
    lo, hi = sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d))
    assert p.mean == pytest.approx(d.mean()) and p.t_low == pytest.approx(lo, rel=1e-3)
    assert p.t_high == pytest.approx(hi, rel=1e-3) and p.wins == 3
    assert not hasattr(p, "boot_low")  # no bootstrap: the plan rules it out
    assert p.p_signflip == pytest.approx(0.25)
    assert p.verdict() == "no difference resolved"  # 3 seeds: the smallest sign-flip p is 2/8
    assert p.verdict(alpha=0.25) == "A > B"
    assert paired(b, a).verdict(alpha=0.25) == "A < B"
    assert paired(np.array([1.0, 0.0, 0.5]), np.array([0.0, 1.0, 0.5])).verdict() == "no difference resolved"
    assert paired(np.array([1.0]), np.array([0.0])).verdict() == "too few seeds"
    # NaN pairs are dropped, not counted
    assert paired(np.array([1.0, np.nan, 2.0]), np.array([0.0, 1.0, 1.0])).n == 2


def _brute_signflip(d):
    """All 2^n sign patterns by itertools, the two-sided share with |sum| >= the observed |sum|."""
    import itertools

    obs = abs(sum(d))
    pats = list(itertools.product((1, -1), repeat=len(d)))
    return sum(abs(sum(s * x for s, x in zip(pat, d))) >= obs - 1e-12 for pat in pats) / len(pats)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 10])
def test_signflip_matches_brute_force_enumeration(n):
    rng = np.random.default_rng(n)
    d = rng.normal(0.3, 1.0, size=n)
    assert signflip_p(d) == pytest.approx(_brute_signflip(list(d)), abs=1e-12)
    assert signflip_p(d) >= 2 / 2**n - 1e-12  # the observed pattern and its mirror always count


def test_signflip_small_cases_by_hand_and_scipy():
    # 3 positive differences: only +++ and --- are as extreme -> 2/8
    assert signflip_p(np.array([0.1, 0.2, 0.3])) == pytest.approx(0.25)
    # [1, 1, -3]: |sum| 1; patterns with |sum| >= 1: all 8 (sums 3-1=... every sum is odd) -> 1.0
    assert signflip_p(np.array([1.0, 1.0, -3.0])) == pytest.approx(1.0)
    assert signflip_p(np.array([0.0, 0.0])) == pytest.approx(1.0)  # no difference: every pattern ties
    d = np.array([0.5, 1.2, -0.3, 0.8, 0.9, 1.1])
    ref = sps.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=np.inf
    ).pvalue
    assert signflip_p(d) == pytest.approx(ref, abs=1e-12)
    assert math.isnan(signflip_p(np.array([np.nan])))


def test_holm_by_hand():
    # sorted 0.005 (x4 = 0.02), 0.01 (x3 = 0.03), 0.03 (x2 = 0.06), 0.04 (x1 = 0.04 -> kept at 0.06, monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # 0.5 x 2 = 1.0; the next is kept >= it
    out = holm([0.02, math.nan, 0.04])  # NaN: not run, not counted in m = 2
    assert out[0] == pytest.approx(0.04) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)


def test_eight_seeds_unadjusted_and_holm_verdicts():
    p8 = paired(np.arange(1.0, 9.0), np.zeros(8))
    assert p8.p_signflip == pytest.approx(2 / 2**8)
    assert p8.verdict() == "A > B"  # unadjusted: 0.0078 <= 0.05
    p8.p_holm = 0.06
    assert p8.verdict() == "no difference resolved"  # declared: the Holm p decides


def test_noise_floor_by_hand():
    import statistics

    a = np.array([0.0, 1.0, 0.0, 1.0, 0.0])  # step differences 1, -1, 1, -1
    b = np.array([0.5, 0.5, 0.5, 0.5, 0.5])  # no noise
    s_a = statistics.stdev([1, -1, 1, -1]) / math.sqrt(2)
    assert step_noise(a) == pytest.approx(s_a)
    assert step_noise(b) == 0.0
    assert noise_floor([a], [b], "auc") == pytest.approx(s_a / math.sqrt(5))
    # the trapezoid / T weighs the 3 inner steps 1/5 and the 2 ends 1/10: sd s_a sqrt(3/25 + 2/100)
    assert noise_floor([a], [b], "auc", "trapezoid") == pytest.approx(s_a * math.sqrt(3 / 25 + 2 / 100))
    assert noise_floor([a], [b], "final") == pytest.approx(s_a)
    # two runs per arm: the mean of the squared per-run noise
    assert noise_floor([a, 2 * a], [b, b], "final") == pytest.approx(math.sqrt((s_a**2 + 4 * s_a**2) / 2))
    assert math.isnan(step_noise(np.array([1.0, np.nan, 2.0])))  # two logged steps: no estimate
    # held-out: se of per-prompt means, sqrt(se_A^2 + se_B^2)
    pa, pb = [1.0, 2.0, 3.0, 2.0], [0.0, 1.0, None, 1.0]
    se_a = statistics.stdev([1, 2, 3, 2]) / 2
    se_b = statistics.stdev([0, 1, 1]) / math.sqrt(3)
    assert heldout_noise(pa, pb) == pytest.approx(math.sqrt(se_a**2 + se_b**2))
