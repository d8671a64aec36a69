"""Invariants of credit weights, token advantages, the cap, the ablation modes and beta."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo_openrlhf.core import (
    apply_cap,
    beta_schedule,
    credit_weights,
    group_normalize,
    rescale_token_advantages,
    token_advantages,
)


@st.composite
def batches(draw):
    B = draw(st.integers(1, 4))
    K = draw(st.integers(1, 4))
    T = draw(st.integers(1, 12))
    lengths = draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    mask = torch.tensor([[1 if t < n else 0 for t in range(T)] for n in lengths], dtype=torch.bool)
    qs = draw(st.lists(st.floats(0, 1, allow_nan=False), min_size=B * K * T, max_size=B * K * T))
    q = torch.tensor(qs, dtype=torch.float32).reshape(B, K, T)
    if draw(st.booleans()):
        q[0] = 0  # an all-zero profile
    adv = torch.tensor(draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=B * K, max_size=B * K))).reshape(B, K)
    beta = draw(st.floats(0, 1))
    return adv, q, mask, beta


@settings(max_examples=150, deadline=None)
@given(batches())
def test_weights_mean_one_min_one_minus_beta(case):
    _, q, mask, beta = case
    w = credit_weights(q, mask.unsqueeze(1), beta)
    assert torch.isfinite(w).all()
    m = mask.unsqueeze(1).expand_as(w)
    assert (w[~m] == 0).all()
    n = mask.sum(-1)
    for i in range(w.shape[0]):
        if n[i] == 0:
            continue
        wi = w[i][:, mask[i]]
        assert torch.allclose(wi.mean(-1), torch.ones(wi.shape[0]), atol=1e-4)
        assert (wi >= 1 - beta - 1e-6).all()


@settings(max_examples=150, deadline=None)
@given(batches())
def test_each_reward_total_credit_equals_gdpo(case):
    adv, q, mask, beta = case
    a = token_advantages(adv, q, mask, beta)
    assert torch.isfinite(a).all()
    assert (a[~mask] == 0).all()
    n = mask.sum(-1).float()
    # per reward: sum_t w_k * A_k == T * A_k, so the sum over k holds too
    assert torch.allclose(a.sum(-1), n * adv.sum(-1), atol=1e-3 * (1 + n.max().item()))
    w = credit_weights(q, mask.unsqueeze(1), beta)
    per_reward = (w * adv.unsqueeze(-1)).sum(-1)
    assert torch.allclose(per_reward, n.unsqueeze(-1) * adv, atol=1e-3 * (1 + n.max().item()))


@settings(max_examples=80, deadline=None)
@given(batches(), st.floats(1, 4))
def test_cap_never_binds_for_a_single_reward(case, cap):
    adv, q, mask, beta = case
    one = adv[:, :1], q[:, :1]
    assert torch.allclose(token_advantages(*one, mask, beta, cap=cap), token_advantages(*one, mask, beta), atol=1e-5)


def test_cap_binds_only_when_rewards_concentrate():
    mask = torch.ones(1, 4, dtype=torch.bool)
    spike = torch.tensor([1.0, 0, 0, 0])
    adv = torch.tensor([[1.0, 1.0, 1.0]])
    piled = torch.stack([spike, spike, spike]).unsqueeze(0)  # all rewards on token 0, same sign
    free = token_advantages(adv, piled, mask, 0.5)
    capped = token_advantages(adv, piled, mask, 0.5, cap=1.5)
    assert capped[0, 0] < free[0, 0]
    excess = credit_weights(piled, mask.unsqueeze(1), 0.5) - 1
    assert torch.allclose(capped[0] - adv.sum(), apply_cap(excess, adv, 1.5)[0])
    assert capped[0, 0] - adv.sum() == pytest.approx(1.5 * (excess[0, :, 0] * adv[0]).abs().max().item())
    # what the other tokens give up is untouched
    assert torch.allclose(capped[0, 1:], free[0, 1:])
    # spread over different tokens: no pile-up, the cap does not bind
    spread = torch.eye(4)[:3].unsqueeze(0)
    assert torch.allclose(token_advantages(adv, spread, mask, 0.5, cap=1.0), token_advantages(adv, spread, mask, 0.5))
    with pytest.raises(ValueError, match="cap must be >= 1"):
        token_advantages(adv, piled, mask, 0.5, cap=0.5)


def test_uniform_mode_and_beta_zero_reproduce_gdpo():
    r = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    A = group_normalize(r, 4)
    q = torch.rand(4, 2, 5)
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 5, [1] + [0] * 4], dtype=torch.bool)
    S = [sum(row) for row in A.tolist()]
    m, s = sum(S) / 4, (sum((x - sum(S) / 4) ** 2 for x in S) / 3) ** 0.5
    gdpo = torch.tensor([(x - m) / (s + 1e-4) for x in S])  # naive batch step

    def placed(beta, mode="mrtpo"):
        return rescale_token_advantages(token_advantages(A, q, mask, beta, mode=mode), A.sum(-1), mask)

    for adv in (placed(0.0), placed(0.5, "uniform")):
        expected = gdpo.unsqueeze(-1) * mask
        assert torch.allclose(adv, expected, atol=1e-5)
    # with beta > 0 the per-response token mean still equals GDPO's advantage
    adv = placed(0.5)
    assert torch.allclose(adv.sum(-1) / mask.sum(-1), gdpo, atol=1e-4)
    assert not torch.allclose(adv, gdpo.unsqueeze(-1) * mask)


def test_shuffle_keeps_values_moves_places():
    g = torch.Generator().manual_seed(0)
    adv = torch.tensor([[1.0, -0.5]])
    q = torch.tensor([[[0.0, 0, 0, 0, 0, 0, 1, 0], [0.0, 0, 0, 0, 0, 0, 0, 1]]])
    mask = torch.ones(1, 8, dtype=torch.bool)
    base = token_advantages(adv, q, mask, 0.5)
    shuf = token_advantages(adv, q, mask, 0.5, mode="shuffle", generator=g)
    assert torch.allclose(base.sort().values, shuf.sort().values)
    assert not torch.allclose(base, shuf)


def test_joint_mode_uses_one_profile():
    adv = torch.tensor([[1.0, 2.0]])
    q = torch.tensor([[0.0, 1.0, 0.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    out = token_advantages(adv, q, mask, 0.5, mode="joint")
    w = credit_weights(q, mask, 0.5)
    assert torch.allclose(out, w * 3.0)
    # as the replay writes it: the profile on the replayed rewards only (here reward 1), zeros elsewhere;
    # reward 0 has no profile (no verifier block) and stays uniform, as it would under "mrtpo"
    per_reward = torch.stack([torch.zeros(3), q[0]]).unsqueeze(0)
    expected = 1.0 * torch.ones(3) + 2.0 * w[0]
    assert torch.allclose(token_advantages(adv, per_reward, mask, 0.5, mode="joint")[0], expected)
    assert torch.allclose(
        token_advantages(adv, per_reward, mask, 0.5, mode="joint"),
        token_advantages(adv, per_reward, mask, 0.5, mode="mrtpo"),
    )


def test_empty_and_all_zero_inputs():
    adv = torch.zeros(2, 3)
    q = torch.zeros(2, 3, 0)
    mask = torch.zeros(2, 0, dtype=torch.bool)
    assert token_advantages(adv, q, mask, 0.5).shape == (2, 0)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    q = torch.zeros(2, 3, 3)
    out = token_advantages(torch.ones(2, 3), q, mask, 0.5)
    assert torch.equal(out, torch.tensor([[3.0, 3.0, 0.0], [0.0, 0.0, 0.0]]))


def test_beta_schedule():
    assert beta_schedule(0) == 0.0
    assert beta_schedule(5) == pytest.approx(0.25)
    assert beta_schedule(10) == 0.5 and beta_schedule(1000) == 0.5
    assert beta_schedule(3, beta_max=0.5, warmup_steps=0) == 0.5
    with pytest.raises(ValueError):
        credit_weights(torch.zeros(1, 2), torch.ones(1, 2), 1.5)
