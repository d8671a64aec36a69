"""Per-token relevance: the Jensen-Shannon distance between two next-token distributions.

q[t] = sqrt(JSD(p_t, m_t) / ln 2) in [0, 1], with p from the ``full`` context and m from ``minus_k``.
This equals ``scipy.spatial.distance.jensenshannon(p, m, base=2)``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_CHUNK_SIZE = 256


def _jsd_nats(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """JSD in nats over the last dim from two log-distributions (N, V) -> (N,).

    Written through d = log p - log q so that identical inputs give exactly 0:
    log p - log m = ln2 - softplus(-d) and log q - log m = ln2 - softplus(d).
    """
    ln2 = F.softplus(torch.zeros((), dtype=logp.dtype, device=logp.device))
    d = logp - logq
    p, q = logp.exp(), logq.exp()
    # 0 * log(0/..) = 0: guard positions where a distribution has no mass (also -inf - -inf = nan).
    term_p = torch.where(p > 0, p * (ln2 - F.softplus(-d)), torch.zeros_like(p))
    term_q = torch.where(q > 0, q * (ln2 - F.softplus(d)), torch.zeros_like(q))
    return (0.5 * (term_p + term_q).sum(dim=-1)).clamp_min(0.0)


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
        chunk_size: positions per chunk; extra memory is O(chunk_size * V), not O(T * V).
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
    flat_full = logits_full.reshape(-1, vocab)
    flat_minus = logits_minus.reshape(-1, vocab)
    flat_mask = None if mask is None else mask.reshape(-1).bool()
    out = torch.zeros(flat_full.shape[0], dtype=torch.float32, device=logits_full.device)
    with torch.no_grad():
        for start in range(0, flat_full.shape[0], chunk_size):
            stop = min(start + chunk_size, flat_full.shape[0])
            if flat_mask is not None and not bool(flat_mask[start:stop].any()):
                continue
            logp = torch.log_softmax(flat_full[start:stop].float() / temperature, dim=-1)
            logq = torch.log_softmax(flat_minus[start:stop].float() / temperature, dim=-1)
            jsd = _jsd_nats(logp, logq)
            out[start:stop] = (jsd / torch.log(torch.tensor(2.0))).clamp(0.0, 1.0).sqrt()
            del logp, logq, jsd
    if flat_mask is not None:
        out = out * flat_mask
    return out.reshape(lead)
