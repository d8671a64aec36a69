"""JS relevance against scipy, chunking, dtype, masking and extreme inputs."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon

from mrtpo_openrlhf.core import js_relevance


def test_matches_scipy_base2():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 7, 50, generator=g) * 3
    b = torch.randn(3, 7, 50, generator=g) * 3
    q = js_relevance(a, b, chunk_size=4)
    p = torch.softmax(a.double(), -1).numpy()
    m = torch.softmax(b.double(), -1).numpy()
    ref = np.array([[jensenshannon(p[i, t], m[i, t], base=2) for t in range(7)] for i in range(3)])
    assert np.allclose(q.numpy(), ref, atol=1e-5)


def test_temperature_is_applied():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 30, generator=g), torch.randn(5, 30, generator=g)
    q = js_relevance(a, b, temperature=0.7)
    p = torch.softmax(a.double() / 0.7, -1).numpy()
    m = torch.softmax(b.double() / 0.7, -1).numpy()
    assert np.allclose(q.numpy(), [jensenshannon(p[t], m[t], base=2) for t in range(5)], atol=1e-5)


def test_identical_is_exactly_zero_and_disjoint_is_one():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(4, 11, 1000, generator=g) * 10
    assert (js_relevance(a, a.clone()) == 0).all()
    big = torch.full((2, 10), -1e4)
    left, right = big.clone(), big.clone()
    left[:, :5] = 1e4
    right[:, 5:] = 1e4
    assert torch.allclose(js_relevance(left, right), torch.ones(2), atol=1e-6)


def test_bf16_input_computed_in_fp32_and_chunks_agree():
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(2, 33, 64, generator=g) * 2).bfloat16()
    b = (torch.randn(2, 33, 64, generator=g) * 2).bfloat16()
    q1 = js_relevance(a, b, chunk_size=1)
    q2 = js_relevance(a, b, chunk_size=1000)
    ref = js_relevance(a.float(), b.float())
    assert q1.dtype == torch.float32
    assert torch.equal(q1, q2) and torch.allclose(q1, ref)


def test_mask_zeroes_positions():
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(2, 6, 9, generator=g), torch.randn(2, 6, 9, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 0, 1, 0, 1, 0]])
    q = js_relevance(a, b, mask=mask, chunk_size=2)
    assert (q[mask == 0] == 0).all() and (q[mask == 1] > 0).all()


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape mismatch"):
        js_relevance(torch.zeros(2, 3), torch.zeros(2, 4))
    with pytest.raises(ValueError, match="temperature"):
        js_relevance(torch.zeros(2, 3), torch.zeros(2, 3), temperature=0)


finite_logit = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda v: st.tuples(
            st.lists(finite_logit, min_size=v, max_size=v), st.lists(finite_logit, min_size=v, max_size=v)
        )
    )
)
def test_always_finite_and_in_unit_interval(pair):
    a, b = torch.tensor([pair[0]]), torch.tensor([pair[1]])
    q = js_relevance(a, b)
    assert torch.isfinite(q).all() and (q >= 0).all() and (q <= 1).all()


def test_minus_inf_logits_are_handled():
    a = torch.tensor([[0.0, float("-inf"), 1.0]])
    b = torch.tensor([[0.0, float("-inf"), float("-inf")]])
    q = js_relevance(a, b)
    assert torch.isfinite(q).all() and 0 < q.item() < 1
    assert js_relevance(a, a).item() == 0
