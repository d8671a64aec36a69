"""GDPO's response level against an independent reference written from the formula (eps 1e-4, Bessel), on the
float32 path training runs (``response_advantages``)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo_openrlhf.core import MethodSettings, group_normalize, response_advantages, weighted_sum

EPS = 1e-4


def ref_group_norm(rows, n):
    """Pure-python per-column group normalization."""
    out = [[0.0] * len(rows[0]) for _ in rows]
    for g in range(0, len(rows), n):
        for k in range(len(rows[0])):
            col = [rows[g + j][k] for j in range(n)]
            mean = sum(col) / n
            std = math.sqrt(sum((x - mean) ** 2 for x in col) / (n - 1))
            for j in range(n):
                out[g + j][k] = 0.0 if max(col) == min(col) else (col[j] - mean) / (std + EPS)
    return out


def ref_gdpo(rows, n):
    """(response-level advantages, batch std of S)."""
    a = ref_group_norm(rows, n)
    s = [sum(r) for r in a]
    mean = sum(s) / len(s)
    std = math.sqrt(sum((x - mean) ** 2 for x in s) / (len(s) - 1))
    return [(x - mean) / (std + EPS) for x in s], std


def gdpo_level(r, n):
    return response_advantages(r, None, n, MethodSettings()).level


rewards_strategy = st.integers(2, 5).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.integers(1, 4).flatmap(
            lambda groups: st.integers(1, 4).flatmap(
                lambda k: st.lists(
                    st.lists(st.sampled_from([0.0, 0.5, 1.0, -1.0, 3.0]), min_size=k, max_size=k),
                    min_size=n * groups,
                    max_size=n * groups,
                )
            )
        ),
    )
)


@settings(max_examples=60, deadline=None)
@given(rewards_strategy)
def test_gdpo_matches_reference(case):
    n, rows = case
    r = torch.tensor(rows, dtype=torch.float32)  # training's dtype
    expected = torch.tensor(ref_group_norm(rows, n), dtype=torch.float64)
    assert torch.allclose(group_normalize(r, n).double(), expected, atol=1e-5)
    if len(rows) > 1:
        got = gdpo_level(r, n)
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        want, std = ref_gdpo(rows, n)
        # float32 rounding of S (~1e-7 per reward) is divided by std_B(S) + eps: where S barely varies over the
        # batch it shows (up to ~1e-3 at std ~ 0); in S's own units the result is exact to float32
        err = (got.double() - torch.tensor(want, dtype=torch.float64)).abs() * (std + EPS)
        assert float(err.max()) < 1e-6 * (1 + std)


def test_constant_reward_in_group_gives_exact_zero():
    r = torch.tensor([[0.1, 1.0], [0.1, 0.0], [0.1, 1.0], [0.7, 1.0], [0.7, 1.0], [0.7, 1.0]])
    a = group_normalize(r, 3)
    assert (a[:, 0] == 0).all()  # exactly, not a rounding residue
    assert (a[3:, 1] == 0).all()
    assert (a[:3, 1] != 0).all()


def test_gdpo_keeps_reward_combinations_distinct_where_grpo_collapses():
    # Two rewards; (1,0) and (0,1) have the same sum, GRPO cannot tell them apart, GDPO can when the
    # rewards vary differently inside the group.
    rows = [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]]
    grpo = ref_group_norm([[sum(row)] for row in rows], 4)  # GRPO: sum first, normalize once (naive)
    gdpo = gdpo_level(torch.tensor(rows), 4)
    assert grpo[0][0] == pytest.approx(grpo[1][0])
    assert gdpo[0] > gdpo[1]


def test_weighted_sum_scales_each_reward():
    adv = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    w = torch.tensor([2.0, 0.0])
    assert weighted_sum(adv, w).tolist() == [2.0, 1.0]
    assert weighted_sum(adv, torch.tensor([[1.0, 1.0], [0.0, 2.0]])).tolist() == [-1.0, 6.0]


def test_bad_inputs():
    with pytest.raises(ValueError, match="multiple of group_size"):
        group_normalize(torch.zeros(5, 2), 2)
    with pytest.raises(ValueError, match=">= 2"):
        group_normalize(torch.zeros(4, 2), 1)


def ref_masked_group_norm(rows, present, n):
    """Pure-python group normalization over the present values only (absent: advantage 0)."""
    out = [[0.0] * len(rows[0]) for _ in rows]
    for g in range(0, len(rows), n):
        for k in range(len(rows[0])):
            idx = [g + j for j in range(n) if present[g + j][k]]
            col = [rows[i][k] for i in idx]
            if len(col) < 2 or max(col) == min(col):
                continue
            mean = sum(col) / len(col)
            std = math.sqrt(sum((x - mean) ** 2 for x in col) / (len(col) - 1))
            for i in idx:
                out[i][k] = (rows[i][k] - mean) / (std + EPS)
    return out


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(2, 5), st.integers(1, 3), st.data())
def test_absent_values_take_no_part_in_group_statistics(groups, n, k, data):
    """Issue 10 item 2: an absent value (NaN included) neither shows up in nor shifts its group's statistics."""
    rows = data.draw(
        st.lists(
            st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=k, max_size=k),
            min_size=groups * n,
            max_size=groups * n,
        )
    )
    present = data.draw(
        st.lists(st.lists(st.booleans(), min_size=k, max_size=k), min_size=groups * n, max_size=groups * n)
    )
    values = torch.tensor(rows)
    values[~torch.tensor(present)] = float("nan")
    got = group_normalize(values, n, EPS, torch.tensor(present))
    assert torch.isfinite(got).all()
    assert torch.allclose(got, torch.tensor(ref_masked_group_norm(rows, present, n)), atol=1e-5)
    # all present: the same as without a mask
    full = torch.tensor(rows)
    unmasked = group_normalize(full, n, EPS)
    assert torch.allclose(group_normalize(full, n, EPS, torch.ones_like(full)), unmasked, atol=1e-6)


def test_saw_weights_per_id_and_shifted_by_the_lowest_value():
    """Issue 10 item 3: statistics per reward id over every (row, column) holding it; values shifted by the lowest
    possible value before the coefficient of variation (naive loop reference)."""
    from mrtpo_openrlhf.core import saw_weights

    values = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 1.0], [1.0, -1.0]])
    ids = torch.tensor([[0, 1], [0, 1], [1, 0], [1, 0]])
    present = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    low = -1.0
    cv = {}
    for rid in (0, 1):
        xs = [values[i, k].item() - low for i in range(4) for k in range(2) if ids[i, k] == rid and present[i, k]]
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        cv[rid] = sd / (abs(m) + EPS)
    norm = {r: cv[r] * 2 / (cv[0] + cv[1]) for r in cv}
    got = saw_weights(values, present, EPS, ids, lows=low)
    want = torch.tensor([[norm[int(ids[i, k])] * int(present[i, k]) for k in range(2)] for i in range(4)])
    assert torch.allclose(got, want.float(), atol=1e-6)
    # the shift matters: without it the means (and so the weights) differ
    assert not torch.allclose(saw_weights(values, present, EPS, ids), got, atol=1e-3)


def test_fixed_reward_weights_by_hand():
    """``--algo.mrtpo.reward_weights``: S = sum_k w[name_k] * A[i,k] with w from the flag (1 for a reward not named),
    then GDPO's batch step; against numbers worked by hand. Two groups of two, rewards a, b, c."""
    from mrtpo_openrlhf.core import parse_reward_weights

    rows = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    names = [["a", "b", "c"]] * 4
    weights = parse_reward_weights("a=2, b=0.5")  # c is not named: weight 1
    assert weights == (("a", 2.0), ("b", 0.5))
    # a group of two 0/1 values that differ: mean 0.5, Bessel std sqrt(0.5), so A = +-h, h = 0.5 / (sqrt(0.5) + eps)
    h = 0.5 / (math.sqrt(0.5) + EPS)
    # group 1: a (1, 0) -> (+h, -h); b (0, 1) -> (-h, +h); c (1, 0) -> (+h, -h)
    # group 2: a (1, 1) constant -> 0; b (1, 0) -> (+h, -h); c (0, 1) -> (-h, +h)
    s = [2 * h - 0.5 * h + h, -2 * h + 0.5 * h - h, 0.5 * h - h, -0.5 * h + h]  # 2.5h, -2.5h, -0.5h, 0.5h
    mean = sum(s) / 4  # 0
    std = math.sqrt(sum((x - mean) ** 2 for x in s) / 3)  # h * sqrt(13/3)
    want = [(x - mean) / (std + EPS) for x in s]
    got = response_advantages(torch.tensor(rows), None, 2, MethodSettings(reward_weights=weights), reward_names=names)
    assert torch.allclose(got.summed, torch.tensor(s), atol=1e-6)
    assert torch.allclose(got.level, torch.tensor(want), atol=1e-5)
    assert got.weights.tolist() == [[2.0, 0.5, 1.0]] * 4
    # unweighted differs: the weights really enter
    assert not torch.allclose(gdpo_level(torch.tensor(rows), 2), got.level, atol=1e-3)


def test_fixed_reward_weights_compose_with_saw():
    """SAW's weight per name times the fixed weight: the product weighs A (naive SAW reference)."""
    from mrtpo_openrlhf.core import saw_weights

    rows = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    names = [["x", "y"]] * 4
    settings = MethodSettings(reward_weighting="saw", reward_weights=(("y", 3.0),))
    got = response_advantages(rows, None, 2, settings, torch.tensor([[0, 1]] * 4), reward_names=names)
    saw = saw_weights(rows, None, EPS, torch.tensor([[0, 1]] * 4))
    assert torch.allclose(got.weights, saw * torch.tensor([1.0, 3.0]), atol=1e-6)
    adv = group_normalize(rows, 2, EPS)
    assert torch.allclose(got.summed, (adv * saw * torch.tensor([1.0, 3.0])).sum(1), atol=1e-6)


@pytest.mark.parametrize(
    "text, error",
    [
        ("a", "expected name=weight"),
        ("=1", "expected name=weight"),
        ("a=1,a=2", "given twice"),
        ("a=x", "not a number"),
        ("a=-1", ">= 0"),
        ("a=nan", ">= 0"),
    ],
)
def test_reward_weights_refuse_bad_text(text, error):
    from mrtpo_openrlhf.core import parse_reward_weights

    with pytest.raises(ValueError, match=error):
        parse_reward_weights(text)
    assert parse_reward_weights("none") == ()
