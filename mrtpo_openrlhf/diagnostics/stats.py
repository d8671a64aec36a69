"""Localization statistics of replayed relevance profiles (the paper's diagnostics).

Per (response, reward) pair with relevance q (T,):

- ``tokens_for_80pct``: fraction of tokens holding 80% of the reward's distance (``core.tokens_for_mass``).
- ``top20_share``: share of the distance on the top 20% of tokens (``core.localization``).
- per span kind: ``token_share`` = span tokens / tokens, ``distance_share`` = q on the span / total q, and
  ``ratio`` = distance_share / token_share (1 = no preference for the span; 2 = twice its token share).

Aggregates over pairs (``summarize``) report means of the shares, and the span ratio as
mean distance_share / mean token_share (the paper's "x% of the distance on y% of the tokens").
Undefined values (no distance, empty span) are ``None``.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

import torch

from mrtpo_openrlhf.core import localization, tokens_for_mass

MASS = 0.8
TOP_FRAC = 0.2


def _finite(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def span_share(q: Sequence[float] | torch.Tensor, span_mask: Sequence[bool] | torch.Tensor) -> dict[str, Any]:
    """Distance and token share of one span.

    q: (T,) non-negative relevance; span_mask: (T,) bool.
    Returns {"n_tokens", "token_share", "distance_share", "ratio"}; shares are None when undefined.
    """
    qv = torch.as_tensor(q, dtype=torch.float64)
    mask = torch.as_tensor(span_mask, dtype=torch.bool)
    if qv.shape != mask.shape or qv.dim() != 1:
        raise ValueError(
            f"q and span_mask must be 1-D of the same length, got {tuple(qv.shape)} and {tuple(mask.shape)}"
        )
    n, n_span = qv.numel(), int(mask.sum())
    total = float(qv.sum())
    token_share = n_span / n if n else None
    distance_share = float(qv[mask].sum()) / total if total > 0 and n_span else None
    ratio = distance_share / token_share if distance_share is not None and token_share else None
    return {"n_tokens": n_span, "token_share": token_share, "distance_share": distance_share, "ratio": ratio}


def pair_stats(
    q: Sequence[float] | torch.Tensor, span_masks: Mapping[str, Sequence[bool]] | None = None
) -> dict[str, Any]:
    """Statistics of one (response, reward) profile.

    q: (T,) relevance over the response tokens; span_masks: kind -> (T,) bool (empty spans are skipped).
    Returns {"n_tokens", "total_distance", "tokens_for_80pct", "top20_share", "spans": {kind: span_share}}.
    """
    qv = torch.as_tensor(q, dtype=torch.float32)
    valid = torch.ones_like(qv, dtype=torch.bool)
    spans = {kind: span_share(qv, m) for kind, m in (span_masks or {}).items() if any(m)}
    return {
        "n_tokens": int(qv.numel()),
        "total_distance": float(qv.sum()),
        "tokens_for_80pct": _finite(float(tokens_for_mass(qv, valid, MASS))) if qv.numel() else None,
        "top20_share": _finite(float(localization(qv, valid, TOP_FRAC))) if qv.numel() else None,
        "spans": spans,
    }


def reward_group(name: str) -> str:
    """Name to aggregate a reward under: a repeated constraint id's ``#2`` suffix is dropped."""
    return re.sub(r"#\d+$", "", name)


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def aggregate(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Aggregate pair records (each with "value" and "stats" from ``pair_stats``) into one summary row.

    Only pairs with distance (total_distance > 0) count for the localization means.
    """
    live = [r for r in records if r["stats"]["total_distance"] > 0]
    kinds = sorted({k for r in live for k in r["stats"]["spans"]})
    spans = {}
    for kind in kinds:
        shares = [r["stats"]["spans"][kind] for r in live if kind in r["stats"]["spans"]]
        dist = _mean(s["distance_share"] for s in shares)
        tok = _mean(s["token_share"] for s in shares)
        spans[kind] = {
            "pairs": len(shares),
            "distance_share": dist,
            "token_share": tok,
            "ratio": dist / tok if dist is not None and tok else None,
        }
    return {
        "pairs": len(records),
        "replayed": len(live),
        "mean_value": _mean(float(r["value"]) for r in records),
        "tokens_for_80pct": _mean(r["stats"]["tokens_for_80pct"] for r in live),
        "top20_share": _mean(r["stats"]["top20_share"] for r in live),
        "spans": spans,
    }


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per reward group (``reward_group(record["reward"])``), split by value, plus ``"all"``.

    Returns {"rewards": {group: aggregate + {"by_value": {"0": ..., "1": ...}}}, "all": aggregate}.
    """
    groups: dict[str, list] = defaultdict(list)
    for rec in records:
        groups[reward_group(rec["reward"])].append(rec)
    rewards = {}
    for name, recs in groups.items():
        row = aggregate(recs)
        by_value: dict[str, list] = defaultdict(list)
        for rec in recs:
            by_value[f"{float(rec['value']):g}"].append(rec)
        row["by_value"] = {v: aggregate(rs) for v, rs in sorted(by_value.items())}
        rewards[name] = row
    return {"rewards": rewards, "all": aggregate(records)}
