"""Per-token relevance: the Jensen-Shannon distance between two next-token distributions.

q[t] = sqrt(JSD(p_t, m_t) / ln 2) in [0, 1], with p from the ``full`` context and m from ``minus_k``.
This equals ``scipy.spatial.distance.jensenshannon(p, m, base=2)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .settings import DEFAULT_CHUNK_SIZE

# On CPU a chunk's fp32 buffers should stay in cache: ~2 MiB each (measured 1.8x faster than 256 positions
# at V=32,000 on a 2-core AVX512 machine). Only ever lowers the chunk size, so memory only goes down.
CPU_CHUNK_ELEMENTS = 1 << 19


def _log_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 log-softmax of logits / temperature, never modifying the caller's tensor.

    A -inf logit becomes the lowest finite fp32 value: its probability is still exactly 0, and the JSD
    terms below stay finite (no 0 * inf), so they can be summed by one fused dot product.
    """
    x = logits.to(torch.float32, copy=True)
    if temperature != 1.0:
        x.div_(temperature)
    x.clamp_min_(torch.finfo(torch.float32).min)
    return torch.log_softmax(x, dim=-1)


def _jsd_nats(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """JSD in nats over the last dim, (N, V) x 2 -> (N,). Consumes (overwrites) both inputs.

    Written through d = log p - log q so that identical inputs give exactly 0:
        log p - log m = ln2 - softplus(-d),  log q - log m = ln2 - softplus(d).
    In-place steps keep at most four (N, V) fp32 buffers alive; the sums over V are fused dot products.
    """
    ln2 = F.softplus(torch.zeros((), dtype=logp.dtype, device=logp.device))
    d = logp - logq
    p, q = logp.exp_(), logq.exp_()
    log_pm = F.softplus(d.neg_()).neg_().add_(ln2)
    jsd = torch.linalg.vecdot(p, log_pm)
    del p
    log_qm = F.softplus(d.neg_(), out=log_pm).neg_().add_(ln2)
    del d
    jsd += torch.linalg.vecdot(q, log_qm)
    return (0.5 * jsd).clamp_min(0.0)


def js_relevance(
    logits_full: torch.Tensor,
    logits_minus: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> torch.Tensor:
    """Per-position JS distance between softmax(logits_full/τ) and softmax(logits_minus/τ).

    Args:
        logits_full, logits_minus: (..., T, V) in any float dtype (bf16 is fine); computed in fp32.
        mask: optional (..., T) bool/0-1; masked positions give 0.
        temperature: the rollout's sampling temperature τ > 0.
        chunk_size: positions per chunk (at most); extra memory is O(chunk_size * V), not O(T * V).
            On CPU it is capped at ``CPU_CHUNK_ELEMENTS // V`` positions (cache-sized, faster).
    Returns:
        (..., T) float32 in [0, 1]: 0 for identical distributions, 1 for disjoint supports.
    """
    if logits_full.shape != logits_minus.shape:
        raise ValueError(f"shape mismatch: {tuple(logits_full.shape)} vs {tuple(logits_minus.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    lead, vocab = logits_full.shape[:-1], logits_full.shape[-1]
    if logits_full.device.type == "cpu":
        chunk_size = min(chunk_size, max(1, CPU_CHUNK_ELEMENTS // max(vocab, 1)))
    flat_full = logits_full.reshape(-1, vocab)
    flat_minus = logits_minus.reshape(-1, vocab)
    flat_mask = None if mask is None else mask.reshape(-1).bool()
    out = torch.zeros(flat_full.shape[0], dtype=torch.float32, device=logits_full.device)
    with torch.no_grad():
        for start in range(0, flat_full.shape[0], chunk_size):
            stop = min(start + chunk_size, flat_full.shape[0])
            if flat_mask is not None and not bool(flat_mask[start:stop].any()):
                continue
            jsd = _jsd_nats(
                _log_probs(flat_full[start:stop], temperature), _log_probs(flat_minus[start:stop], temperature)
            )
            out[start:stop] = (jsd / math.log(2.0)).clamp(0.0, 1.0).sqrt()
    if flat_mask is not None:
        out = out * flat_mask
    return out.reshape(lead)
