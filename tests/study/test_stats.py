"""Study statistics against independent references (scipy's t-distribution and permutation test, a brute-force
sign-flip enumeration, hand computations)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from mrtpo_openrlhf.study.stats import (
    area,
    heldout_noise,
    holm,
    mean_band,
    noise_floor,
    paired,
    running_mean,
    signflip_p,
    step_noise,
    steps_to,
    t975,
)


@pytest.mark.parametrize("dof", [1, 2, 3, 5, 10, 29])
def test_t_quantiles_match_scipy(dof):
    assert t975(dof) == pytest.approx(sps.t.ppf(0.975, dof), abs=1e-3)


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


def test_area_and_threshold():
    curve = np.array([0.0, 0.5, np.nan, 1.0, 1.0, 1.0])
    assert area(curve) == pytest.approx((0 + 0.5 + 1 + 1 + 1) / 5)
    # trailing 3-step means: 0, .25, .25, .75, .833, 1.0
    assert running_mean(curve)[3] == pytest.approx(0.75)
    assert steps_to(curve, 0.8) == 5
    assert steps_to(curve, 1.01) is None
    assert math.isnan(area(np.array([np.nan, np.nan])))


def test_paired_difference_and_verdicts():
    a = np.array([0.5, 0.6, 0.7])
    b = np.array([0.1, 0.25, 0.3])
    p = paired(a, b)
    d = a - b
    lo, hi = sps.t.interval(0.95, 2, loc=d.mean(), scale=sps.sem(d))
    assert p.mean == pytest.approx(d.mean()) and p.t_low == pytest.approx(lo, rel=1e-3)
    assert p.t_high == pytest.approx(hi, rel=1e-3) and p.wins == 3
    assert math.isnan(p.boot_low)  # 3 seeds: no bootstrap
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


def test_no_bootstrap_below_eight_seeds():
    a, b = np.arange(7.0), np.zeros(7)
    p = paired(a, b)
    assert math.isnan(p.boot_low) and math.isnan(p.boot_high)
    p8 = paired(np.arange(1.0, 9.0), np.zeros(8))
    assert 1.0 <= p8.boot_low <= p8.boot_high <= 8.0
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
    assert noise_floor([a], [b], "final") == pytest.approx(s_a)
    # two runs per arm: the mean of the squared per-run noise
    assert noise_floor([a, 2 * a], [b, b], "final") == pytest.approx(math.sqrt((s_a**2 + 4 * s_a**2) / 2))
    assert math.isnan(step_noise(np.array([1.0, np.nan, 2.0])))  # two logged steps: no estimate
    # held-out: se of per-prompt means, sqrt(se_A^2 + se_B^2)
    pa, pb = [1.0, 2.0, 3.0, 2.0], [0.0, 1.0, None, 1.0]
    se_a = statistics.stdev([1, 2, 3, 2]) / 2
    se_b = statistics.stdev([0, 1, 1]) / math.sqrt(3)
    assert heldout_noise(pa, pb) == pytest.approx(math.sqrt(se_a**2 + se_b**2))
