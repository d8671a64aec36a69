"""``label_log_probs`` (fp32 position chunks, model-dtype memory) against a float64 log-softmax and against
upstream's ``log_probs_from_logits`` on the same logits: values and gradients, bf16 and fp32 logits, chunks that
do not divide the positions."""

import pytest
import torch
from openrlhf.models.utils import log_probs_from_logits

from mrtpo_openrlhf.adapter.log_probs import label_log_probs

B, P, V = 3, 11, 53


def inputs(dtype, scale=4.0):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(B, P, V, generator=g) * scale).to(dtype)
    labels = torch.randint(0, V, (B, P), generator=g)
    return logits, labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk", [1, 4, 128])
def test_values_and_gradients_equal_a_float64_log_softmax(dtype, temperature, chunk):
    logits, labels = inputs(dtype)
    weights = torch.randn(B, P, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    ref_in = logits.detach().double().requires_grad_()
    ref = torch.log_softmax(ref_in / temperature, dim=-1).gather(-1, labels[..., None]).squeeze(-1)
    (ref * weights).sum().backward()

    ours_in = logits.detach().requires_grad_()
    ours = label_log_probs(ours_in, labels, temperature, chunk=chunk)
    assert ours.dtype == torch.float32 and ours.shape == (B, P)
    torch.testing.assert_close(ours.double(), ref.detach(), atol=1e-5, rtol=1e-5)
    (ours * weights.float()).sum().backward()
    assert ours_in.grad.dtype == dtype
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=4e-3, rtol=1e-2)
    torch.testing.assert_close(ours_in.grad.double(), ref_in.grad, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_same_numbers_as_upstream(dtype):
    """What the policy's forward computed before: the logits in fp32, divided in place, upstream's helper."""
    logits, labels = inputs(dtype)
    up_in = logits.detach().requires_grad_()
    up = log_probs_from_logits(up_in.to(torch.float32, copy=True), labels, temperature=0.7)
    up.sum().backward()
    ours_in = logits.detach().requires_grad_()
    ours = label_log_probs(ours_in, labels, 0.7, chunk=4)
    ours.sum().backward()
    torch.testing.assert_close(ours, up, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_in.grad, up_in.grad, atol=1e-6 if dtype == torch.float32 else 1e-3, rtol=0)


def test_shapes_are_checked():
    logits, labels = inputs(torch.float32)
    with pytest.raises(ValueError, match=r"logits \(B, P, V\)"):
        label_log_probs(logits[0], labels[0])
    with pytest.raises(ValueError, match="labels"):
        label_log_probs(logits, labels[:, :-1])
