"""JS relevance against scipy, chunking, dtype, masking and extreme inputs."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import jensenshannon

from mrtpo_openrlhf.core import JS_KERNELS, js_relevance
from mrtpo_openrlhf.core import relevance as relevance_module

kernels = pytest.mark.parametrize("kernel", JS_KERNELS)


@kernels
def test_matches_scipy_base2(kernel):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 7, 50, generator=g) * 3
    b = torch.randn(3, 7, 50, generator=g) * 3
    q = js_relevance(a, b, chunk_size=4, kernel=kernel)
    p = torch.softmax(a.double(), -1).numpy()
    m = torch.softmax(b.double(), -1).numpy()
    ref = np.array([[jensenshannon(p[i, t], m[i, t], base=2) for t in range(7)] for i in range(3)])
    assert np.allclose(q.numpy(), ref, atol=1e-5)


@kernels
def test_temperature_is_applied(kernel):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 30, generator=g), torch.randn(5, 30, generator=g)
    q = js_relevance(a, b, temperature=0.7, kernel=kernel)
    p = torch.softmax(a.double() / 0.7, -1).numpy()
    m = torch.softmax(b.double() / 0.7, -1).numpy()
    assert np.allclose(q.numpy(), [jensenshannon(p[t], m[t], base=2) for t in range(5)], atol=1e-5)


@kernels
def test_identical_is_exactly_zero_and_disjoint_is_one(kernel):
    g = torch.Generator().manual_seed(2)
    a = torch.randn(4, 11, 1000, generator=g) * 10
    assert (js_relevance(a, a.clone(), kernel=kernel) == 0).all()
    big = torch.full((2, 10), -1e4)
    left, right = big.clone(), big.clone()
    left[:, :5] = 1e4
    right[:, 5:] = 1e4
    assert torch.allclose(js_relevance(left, right, kernel=kernel), torch.ones(2), atol=1e-6)


@kernels
def test_bf16_input_computed_in_fp32_and_chunks_agree(kernel):
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(2, 33, 64, generator=g) * 2).bfloat16()
    b = (torch.randn(2, 33, 64, generator=g) * 2).bfloat16()
    q1 = js_relevance(a, b, chunk_size=1, kernel=kernel)
    q2 = js_relevance(a, b, chunk_size=1000, kernel=kernel)
    ref = js_relevance(a.float(), b.float(), kernel=kernel)
    assert q1.dtype == torch.float32
    assert torch.allclose(q1, q2, atol=1e-6) and torch.allclose(q1, ref, atol=1e-6)


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
    with pytest.raises(ValueError, match="kernel"):
        js_relevance(torch.zeros(2, 3), torch.zeros(2, 3), kernel="triton")


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


@kernels
def test_minus_inf_logits_are_handled(kernel):
    a = torch.tensor([[0.0, float("-inf"), 1.0]])
    b = torch.tensor([[0.0, float("-inf"), float("-inf")]])
    q = js_relevance(a, b, kernel=kernel)
    p, m = torch.softmax(a.double(), -1).numpy()[0], torch.softmax(b.double(), -1).numpy()[0]
    assert torch.isfinite(q).all() and abs(q.item() - jensenshannon(p, m, base=2)) < 1e-6
    assert js_relevance(a, a, kernel=kernel).item() == 0


@kernels
def test_large_log_ratios_match_a_float64_reference(kernel):
    """Probabilities e^-100 apart (the smaller one's terms underflow) and near-identical rows."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(6, 400, generator=g, dtype=torch.float64) * 40
    b = a.clone()
    b[:3, :50] -= 100.0
    b[3:] += torch.randn(3, 400, generator=g, dtype=torch.float64) * 1e-3
    p, m = torch.softmax(a, -1).numpy(), torch.softmax(b, -1).numpy()
    ref = np.array([jensenshannon(p[t], m[t], base=2) for t in range(6)])
    q = js_relevance(a.float(), b.float(), kernel=kernel).numpy()
    assert np.allclose(q, ref, atol=2e-5, rtol=1e-3), (q, ref)


@kernels
@pytest.mark.parametrize("noise", [1e-3, 1e-4, 1e-5])
def test_near_identical_rows_keep_their_small_distance(kernel, noise):
    """A real vocabulary, logits a tiny step apart: the distance (~noise) must keep its digits. A compiler that
    lowers expm1 to exp - 1 made the compiled kernel's distance 2x too large at noise 1e-4 (error ~3e-5)."""
    g = torch.Generator().manual_seed(6)
    a = torch.randn(8, 32_000, generator=g, dtype=torch.float64) * 3
    b = a + torch.randn(8, 32_000, generator=g, dtype=torch.float64) * noise
    p, m = torch.softmax(a, -1).numpy(), torch.softmax(b, -1).numpy()
    ref = np.array([jensenshannon(p[t], m[t], base=2) for t in range(8)])
    q = js_relevance(a.float(), b.float(), kernel=kernel).numpy()
    assert np.allclose(q, ref, rtol=1e-2, atol=1e-8), (q, ref)


def test_a_compile_that_fails_falls_back_to_eager_with_a_logged_reason(monkeypatch, caplog):
    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("no C++ compiler found")

        return run

    monkeypatch.setattr(relevance_module, "_compiled", {})
    monkeypatch.setattr(relevance_module, "_compile_failed", {})
    monkeypatch.setattr(relevance_module.torch, "compile", broken_compile)
    g = torch.Generator().manual_seed(6)
    a, b = torch.randn(3, 20, generator=g), torch.randn(3, 20, generator=g)
    with caplog.at_level("WARNING", logger=relevance_module.__name__):
        q = js_relevance(a, b, kernel="compiled")
        q_again = js_relevance(a, b, kernel="compiled")
    assert torch.equal(q, js_relevance(a, b, kernel="eager")) and torch.equal(q, q_again)
    warnings = [r.getMessage() for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert len(warnings) == 1 and "no C++ compiler found" in warnings[0]


def test_compiled_kernel_compiles_once_for_every_length(monkeypatch):
    """T = 1, a single chunk and several chunks (views of different bases) run the same compiled graph: before the
    fix a 1-row chunk and the first multi-chunk call each compiled again (a GPU run would compile 3 times)."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(relevance_module, "_compiled", {})
    monkeypatch.setattr(relevance_module, "_compile_failed", {})
    g = torch.Generator().manual_seed(7)
    a = torch.randn(1500, 64, generator=g, dtype=torch.float64) * 3
    b = a + torch.randn(1500, 64, generator=g, dtype=torch.float64) * 1e-2
    counts = []
    for T in (5, 1, 2, 300, 1500):  # chunk_size 256: 300 and 1500 are several chunks
        q = js_relevance(a[:T].float(), b[:T].float(), kernel="compiled", chunk_size=256)
        p, m = torch.softmax(a[:T], -1).numpy(), torch.softmax(b[:T], -1).numpy()
        assert np.allclose(q.numpy(), [jensenshannon(p[t], m[t], base=2) for t in range(T)], rtol=1e-2, atol=1e-8)
        counts.append(counters["stats"]["unique_graphs"])
    assert counts[1:] == [counts[0]] * 4 and relevance_module._compile_failed == {}
