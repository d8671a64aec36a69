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
from mrtpo_openrlhf.study.stats import cluster_interval, t975

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


# ------------------------------------------------------------------------------------------- null control
# A reward localizes when its profile beats the null's (a neutral sentence no reward reads, removed the same way
# as the reward's own block), not when it beats uniform: a position-free random profile already puts 80% of its
# mass on ~44% of the tokens (i.i.d. exponential values), far below uniform's 80%.
RANDOM_DRAWS = 64  # random profiles per response for the position-free reference


def random_tokens_for_mass(n_tokens: int, draws: int = RANDOM_DRAWS, seed: int = 0, mass: float = MASS) -> float:
    """Mean fraction of tokens holding ``mass`` of a position-free random profile of ``n_tokens`` i.i.d.
    Exp(1) values (``draws`` profiles, seeded): the reference a profile with no position preference gives.
    For large T it tends to e^-x with (1 + x) e^-x = mass (0.4385 at 80%)."""
    if n_tokens < 1:
        return math.nan
    gen = torch.Generator().manual_seed(int(seed))
    q = torch.empty(draws, n_tokens, dtype=torch.float64).exponential_(1.0, generator=gen)
    return float(tokens_for_mass(q, torch.ones_like(q, dtype=torch.bool), mass).mean())


def null_stats(
    q_null: Sequence[float] | torch.Tensor | None,
    span_masks: Mapping[str, Sequence[bool]] | None,
    n_tokens: int,
    seed: int = 0,
) -> dict[str, Any]:
    """The controls of one (response, reward) pair: the null's profile on the reward's own spans and its tokens
    for 80%, and the random profile's tokens for 80% (same length).

    Returns {"null": {"tokens_for_80pct", "spans": {kind: span_share}} or None (no null replayed),
             "random": {"tokens_for_80pct"}}.
    """
    out: dict[str, Any] = {
        "null": None,
        "random": {"tokens_for_80pct": _finite(random_tokens_for_mass(n_tokens, seed=seed))},
    }
    if q_null is not None:
        st = pair_stats(q_null, span_masks)
        if st["total_distance"] > 0:
            out["null"] = {"tokens_for_80pct": st["tokens_for_80pct"], "spans": st["spans"]}
    return out


def interval(values: Iterable[float | None]) -> dict[str, Any]:
    """{"n", "mean", "low", "high"}: the 95% t-interval of the mean over responses (None edges with n < 2)."""
    v = [float(x) for x in values if x is not None and math.isfinite(x)]
    n = len(v)
    if not n:
        return {"n": 0, "mean": None, "low": None, "high": None}
    mean = sum(v) / n
    if n < 2:
        return {"n": 1, "mean": mean, "low": None, "high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "low": mean - half, "high": mean + half}


INTERVALS = "cluster-robust over prompts (CR1 sandwich, t with prompts - 1 df)"


def null_control(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reward vs null vs random over the replayed pairs of one reward group that have a null profile.

    Each record: "stats" from ``pair_stats`` plus "controls" from ``null_stats`` and its "prompt_index" (the
    cluster: responses to one prompt are not independent). Per response i: the reward's tokens for 80% f_i
    (fraction) and a_i = f_i * T_i (tokens), the null's and the random profile's, and per span kind the reward's
    distance share on the span its checker reads against the null's share on that same span. Returns, each as a
    ``study.stats.cluster_interval`` over responses clustered by prompt (``INTERVALS``): ``tokens_for_80pct``
    {reward, null, random, reward_minus_null, reward_minus_random}, ``tokens_for_80pct_abs`` (the same in tokens),
    ``spans`` {kind: {reward, null, reward_minus_null}}; the verdicts ``beats_null_on_span`` {kind: bool} (the
    interval of reward - null share lies above 0), ``more_concentrated_than_null`` and
    ``more_concentrated_than_random`` (the interval of reward - null, or - random, tokens for 80% lies below 0);
    and ``per_response`` (each response's prompt, sample and values), so a report can recompute any of them.
    """
    live = [
        r for r in records if r["stats"]["total_distance"] > 0 and (r.get("controls") or {}).get("null") is not None
    ]
    keys = ("reward", "null", "random", "reward_minus_null", "reward_minus_random")
    frac: dict[str, list] = {k: [] for k in keys}  # (value, prompt) pairs
    absolute: dict[str, list] = {k: [] for k in keys}
    kinds = sorted({k for r in live for k in r["stats"]["spans"]})
    span_rows: dict[str, dict[str, list]] = {k: {"reward": [], "null": [], "reward_minus_null": []} for k in kinds}
    per_response = []
    for i, r in enumerate(live):  # a record without its prompt is a cluster of its own
        n, prompt = r["stats"]["n_tokens"], r.get("prompt_index", f"response {i}")
        f = r["stats"]["tokens_for_80pct"]
        fn = r["controls"]["null"]["tokens_for_80pct"]
        fr = r["controls"]["random"]["tokens_for_80pct"]
        values = {
            "reward": f,
            "null": fn,
            "random": fr,
            "reward_minus_null": None if f is None or fn is None else f - fn,
            "reward_minus_random": None if f is None or fr is None else f - fr,
        }
        for key, value in values.items():
            frac[key].append((value, prompt))
            absolute[key].append((None if value is None else value * n, prompt))
        shares = {}
        for kind in kinds:
            own = r["stats"]["spans"].get(kind, {}).get("distance_share")
            null = r["controls"]["null"]["spans"].get(kind, {}).get("distance_share")
            if own is not None and null is not None:
                shares[kind] = {"reward": own, "null": null}
                for key, value in (("reward", own), ("null", null), ("reward_minus_null", own - null)):
                    span_rows[kind][key].append((value, prompt))
        per_response.append(
            {
                "prompt": prompt,
                "sample": r.get("sample"),
                "n_tokens": n,
                "tokens_for_80pct": {"reward": f, "null": fn, "random": fr},
                "spans": shares,
            }
        )

    def clustered(pairs: list) -> dict[str, Any]:
        return cluster_interval([v for v, _ in pairs], [c for _, c in pairs])

    spans = {kind: {key: clustered(v) for key, v in rows.items()} for kind, rows in span_rows.items()}
    tok = {k: clustered(v) for k, v in frac.items()}
    below_null, below_random = tok["reward_minus_null"]["high"], tok["reward_minus_random"]["high"]
    return {
        "responses": len(live),
        "intervals": INTERVALS,
        "tokens_for_80pct": tok,
        "tokens_for_80pct_abs": {k: clustered(v) for k, v in absolute.items()},
        "spans": spans,
        "beats_null_on_span": {
            kind: (s["reward_minus_null"]["low"] is not None and s["reward_minus_null"]["low"] > 0)
            for kind, s in spans.items()
        },
        "more_concentrated_than_null": below_null is not None and below_null < 0,
        "more_concentrated_than_random": below_random is not None and below_random < 0,
        "per_response": per_response,
    }
