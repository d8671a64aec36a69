"""The path training runs from rewards to token advantages (``response_advantages`` then
``ADVANTAGE_ESTIMATORS[name]``, as the experience maker calls them) against plain loops written from README's
"The method, as implemented"; no helper of ``mrtpo_openrlhf.core`` is used by the reference."""

import math
import random

import pytest
import torch

from mrtpo_openrlhf.core import ADVANTAGE_ESTIMATORS, MethodSettings, TokenInputs, response_advantages

EPS = 1e-4


# ── naive reference ──


def mean(xs):
    return sum(xs) / len(xs)


def bessel_std(xs):
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def group_advantages(rewards, present, n):
    """A[i][k] = (r - mean_g) / (std_g + eps) over the present values of the group; 0 if constant or < 2 there."""
    A = [[0.0] * len(rewards[0]) for _ in rewards]
    for g in range(0, len(rewards), n):
        for k in range(len(rewards[0])):
            rows = [i for i in range(g, g + n) if present[i][k]]
            vals = [rewards[i][k] for i in rows]
            if len(vals) < 2 or max(vals) == min(vals):
                continue
            for i in rows:
                A[i][k] = (rewards[i][k] - mean(vals)) / (bessel_std(vals) + EPS)
    return A


def weights(q, beta):
    m = mean(q)
    return [1.0] * len(q) if m <= 0 else [(1 - beta) + beta * x / m for x in q]


def placed_row(A_row, q_rows, beta, cap, joint):
    """One response: a[t] = sum_k w_k[t] A_k, what a token receives from all rewards (the positive parts of
    (w_k - 1) A_k) capped at cap times the largest single part. Joint: the one profile (the max over the replayed
    rewards' rows, which all hold it) for every reward with a profile; the others uniform."""
    T, K = len(q_rows[0]), len(A_row)
    if joint:
        profile = [max(q_rows[k][t] for k in range(K)) for t in range(T)]
        ws = [weights(profile, beta) if any(q_rows[k]) else [1.0] * T for k in range(K)]
    else:
        ws = [weights(q_rows[k], beta) for k in range(K)]
    out = []
    for t in range(T):
        recv = [max(ws[k][t] - 1, 0.0) * A_row[k] for k in range(K)]
        give = [min(ws[k][t] - 1, 0.0) * A_row[k] for k in range(K)]
        total = sum(recv)
        if cap is not None:
            bound = cap * max(abs(r) for r in recv)
            total = min(max(total, -bound), bound)
        out.append(sum(A_row) + total + sum(give))
    return out


def naive_token_advantages(R, present, n, q, lengths, beta, cap, mode, penalty, clip):
    """Final per-row token advantages (lists of each row's valid length)."""
    A = group_advantages(R, present, n)
    S = [sum(row) for row in A]
    m, s = mean(S), bessel_std(S)
    out = []
    for i, L in enumerate(lengths):
        q_rows = [q[i][k][:L] for k in range(len(A[i]))]
        if mode == "uniform" or beta == 0:
            tok = [S[i]] * L
        else:
            tok = placed_row(A[i], q_rows, beta, cap, mode == "joint")
        row = [(x - m) / (s + EPS) + penalty[i] for x in tok]
        level = (S[i] - m) / (s + EPS) + penalty[i]
        if clip is not None:
            row = [x + min(max(level, clip[0]), clip[1]) - level for x in row]
        out.append(row)
    return out, s


# ── cases ──


def make_case(seed, groups=3, n=4, K=3, T=9, joint=False):
    rng = random.Random(seed)
    B = groups * n
    R = [[rng.choice([0.0, 1.0, 0.5, rng.random()]) for _ in range(K)] for _ in range(B)]
    present = [[rng.random() > 0.1 for _ in range(K)] for _ in range(B)]
    lengths = [rng.randint(1, T) for _ in range(B)]
    q = [[[0.0] * T for _ in range(K)] for _ in range(B)]
    for i in range(B):
        shared = [rng.random() ** 3 for _ in range(T)]
        for k in range(K):
            if rng.random() < 0.7:  # a replayed pair; the others keep q = 0
                for t in range(lengths[i]):
                    q[i][k][t] = shared[t] if joint else rng.random() ** 3
    penalty = [rng.choice([0.0, 0.0, -0.25, -0.01]) for _ in range(B)]
    return R, present, lengths, q, penalty


def run_training_path(name, R, present, n, q, lengths, settings, penalty, step, micro_batches):
    """What the experience maker does: the response level on the whole batch, then each micro-batch's rows."""
    values = torch.tensor(R, dtype=torch.float32)
    mask_present = torch.tensor(present, dtype=torch.float32)
    response = response_advantages(values, mask_present, n, settings, penalty=torch.tensor(penalty))
    out = {}
    for rows in micro_batches:
        T = max(lengths[i] for i in rows)  # each micro-batch has its own padding
        mask = torch.tensor([[t < lengths[i] for t in range(T)] for i in rows])
        rel = torch.tensor([[q[i][k][:T] for k in range(len(R[0]))] for i in rows], dtype=torch.float32)
        got = ADVANTAGE_ESTIMATORS[name](response, TokenInputs(torch.tensor(rows), mask, rel, step), settings)
        assert got.advantages.dtype == torch.float32 and got.advantages.shape == mask.shape
        assert (got.advantages[~mask] == 0).all()
        for j, i in enumerate(rows):
            out[i] = got.advantages[j][mask[j]]
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "name, mode, cap, clip",
    [
        ("gdpo", "mrtpo", 1.5, None),
        ("gdpo", "mrtpo", None, (-0.5, 0.6)),
        ("mrtpo", "mrtpo", 1.5, None),
        ("mrtpo", "mrtpo", 1.0, (-0.5, 0.6)),
        ("mrtpo", "mrtpo", None, None),
        ("mrtpo", "uniform", 1.5, None),
        ("mrtpo", "joint", 1.5, None),
    ],
)
def test_training_path_matches_naive_loops(seed, name, mode, cap, clip):
    R, present, lengths, q, penalty = make_case(seed, joint=mode == "joint")
    beta_max, warmup, step = 0.7, 4, 3 + seed % 3  # step 3: beta still ramping; 4, 5: beta_max
    settings = MethodSettings(beta=beta_max, warmup_steps=warmup, cap=cap, placement=mode, clip_range=clip)
    rng = random.Random(seed)
    order = list(range(len(R)))
    rng.shuffle(order)
    micro_batches = [order[:5], order[5:7], order[7:]]
    got = run_training_path(name, R, present, 4, q, lengths, settings, penalty, step, micro_batches)
    beta = 0.0 if name == "gdpo" else beta_max * min(1.0, step / warmup)
    want, s = naive_token_advantages(
        R, present, 4, q, lengths, beta, cap, "uniform" if name == "gdpo" else mode, penalty, clip
    )
    for i, row in enumerate(want):
        # float32 rounding of S (~1e-7) is divided by the batch std of S
        tol = 1e-4 * (1 + max(abs(x) for x in row)) + 1e-6 / (s + EPS)
        assert torch.allclose(got[i].double(), torch.tensor(row, dtype=torch.float64), atol=tol, rtol=0), (i, got[i])


def test_micro_batch_rows_equal_the_whole_batch_bit_for_bit():
    """The token advantages of a row do not depend on which other rows share its call (same padding)."""
    R, present, lengths, q, penalty = make_case(7)
    lengths = [9] * len(R)
    settings = MethodSettings(beta=0.5, warmup_steps=0, cap=1.5)
    whole = run_training_path("mrtpo", R, present, 4, q, lengths, settings, penalty, 0, [list(range(len(R)))])
    split = run_training_path(
        "mrtpo", R, present, 4, q, lengths, settings, penalty, 0, [[3, 0, 7], [1, 2], [4, 5, 6, 8, 9, 10, 11]]
    )
    assert all(torch.equal(whole[i], split[i]) for i in whole)


def test_response_level_is_float32_like_training():
    values = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    response = response_advantages(values, None, 4, MethodSettings())
    assert response.group.dtype == response.summed.dtype == response.level.dtype == torch.float32


def test_estimators_registered_and_what_they_read():
    assert set(ADVANTAGE_ESTIMATORS) == {"gdpo", "mrtpo"}
    assert ADVANTAGE_ESTIMATORS["gdpo"].reads == {"eps", "reward_weighting", "reward_weights"}
    assert {"beta", "warmup_steps", "cap", "placement"} <= ADVANTAGE_ESTIMATORS["mrtpo"].reads
    settings = MethodSettings(beta=0.5, warmup_steps=10)
    assert not ADVANTAGE_ESTIMATORS["gdpo"].placement(settings, 20).needs_relevance
    assert not ADVANTAGE_ESTIMATORS["mrtpo"].placement(settings, 0).needs_relevance  # beta 0 at step 0
    assert ADVANTAGE_ESTIMATORS["mrtpo"].placement(settings, 5).beta == pytest.approx(0.25)
    uniform = MethodSettings(placement="uniform")
    assert not ADVANTAGE_ESTIMATORS["mrtpo"].placement(uniform, 20).needs_relevance


def test_missing_relevance_and_unknown_placement_fail_clearly():
    response = response_advantages(torch.tensor([[1.0], [0.0]]), None, 2, MethodSettings())
    inputs = TokenInputs(torch.tensor([0, 1]), torch.ones(2, 3, dtype=torch.bool), None, step=20)
    with pytest.raises(ValueError, match="needs the relevance"):
        ADVANTAGE_ESTIMATORS["mrtpo"](response, inputs, MethodSettings())
    with pytest.raises(ValueError, match="unknown placement mode"):
        ADVANTAGE_ESTIMATORS["mrtpo"](response, inputs, MethodSettings(placement="everywhere"))
    gdpo = ADVANTAGE_ESTIMATORS["gdpo"](response, inputs, MethodSettings())  # GDPO needs no q
    assert torch.isfinite(gdpo.advantages).all()
