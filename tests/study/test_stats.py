"""Study statistics against independent references (scipy's t-distribution, explicit loops)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from mrtpo_openrlhf.study.stats import area, mean_band, paired, running_mean, steps_to, t975


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
    assert min(d) - 1e-12 <= p.boot_low <= p.boot_high <= max(d) + 1e-12
    assert p.verdict() == "A > B"
    assert paired(b, a).verdict() == "A < B"
    assert paired(np.array([1.0, 0.0, 0.5]), np.array([0.0, 1.0, 0.5])).verdict() == "no difference resolved"
    assert paired(np.array([1.0]), np.array([0.0])).verdict() == "too few seeds"
    # NaN pairs are dropped, not counted
    assert paired(np.array([1.0, np.nan, 2.0]), np.array([0.0, 1.0, 1.0])).n == 2
