"""Token log-probs from the output layer's logits in position chunks: fp32 math, model-dtype memory.

Upstream (``openrlhf.models.utils.log_probs_from_logits``) turns the (B, P, V) logits into fp32, divides them by
the temperature in place and takes ``gather - logsumexp``; autograd then keeps the fp32 copy for the backward pass,
which builds two or three more fp32 (B, P, V) tensors (softmax, the gather's scatter, their sum) before the output
layer's gradient. For SmolLM2's 49,152-token vocabulary and 4 rows of 160 response tokens that is about 125 MB
per tensor. ``label_log_probs`` computes the same numbers, position chunk by position chunk, and saves only the
logits it was given (the model's dtype) and their (B, P) logsumexp; its backward rebuilds each chunk's softmax from
them and writes the gradient in the logits' dtype, so at most one chunk (``CHUNK`` positions x V) is ever in fp32.
"""

from __future__ import annotations

import torch

CHUNK = 128  # positions per fp32 chunk: 128 x 49,152 x 4 bytes = 25 MB for SmolLM2


def _chunk_fp32(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    x = logits.to(torch.float32)  # the same tensor when the logits are fp32 already: never changed in place
    return x / temperature if temperature != 1.0 else x  # as upstream's in-place division, to the bit


class _LabelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, temperature, chunk):
        batch, positions, _ = logits.shape
        out = torch.empty(batch, positions, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(out)  # kept for the backward: (B, P), small beside the logits
        for b in range(batch):
            for s in range(0, positions, chunk):
                x = _chunk_fp32(logits[b, s : s + chunk], temperature)
                lse[b, s : s + chunk] = torch.logsumexp(x, dim=-1)
                out[b, s : s + chunk] = x.gather(-1, labels[b, s : s + chunk, None]).squeeze(-1) - lse[b, s : s + chunk]
        ctx.save_for_backward(logits, labels, lse)
        ctx.temperature, ctx.chunk = temperature, chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, labels, lse = ctx.saved_tensors
        temperature, chunk = ctx.temperature, ctx.chunk
        grad = torch.empty_like(logits)
        for b in range(logits.shape[0]):
            for s in range(0, logits.shape[1], chunk):
                x = _chunk_fp32(logits[b, s : s + chunk], temperature)
                g = grad_out[b, s : s + chunk, None]
                # d(x_label - logsumexp x)/dx = onehot(label) - softmax(x), as autograd builds it for upstream
                gx = (-g) * torch.exp(x - lse[b, s : s + chunk, None])
                gx.scatter_add_(-1, labels[b, s : s + chunk, None], g)
                if temperature != 1.0:
                    gx.div_(temperature)
                grad[b, s : s + chunk] = gx
        return grad, None, None, None


def label_log_probs(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, chunk: int = CHUNK
) -> torch.Tensor:
    """log softmax(logits / temperature) at ``labels``, computed in fp32 chunks of ``chunk`` positions.

    logits: (B, P, V), any float dtype (the output layer's); labels: (B, P) token ids.
    Returns (B, P) fp32. Differentiable in ``logits``; the gradient comes back in the logits' dtype.
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        shapes = f"{tuple(logits.shape)}, {tuple(labels.shape)}"
        raise ValueError(f"logits (B, P, V) and labels (B, P) expected, got {shapes}")
    return _LabelLogProbs.apply(logits, labels, float(temperature), int(chunk))
