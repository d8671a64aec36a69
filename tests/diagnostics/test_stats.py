"""Localization statistics on hand-built relevance profiles, with exact expected numbers."""

import math

import pytest

from mrtpo_openrlhf.diagnostics.stats import aggregate, pair_stats, reward_group, span_share, summarize


def test_span_share_exact():
    # distance on the span 0.3 + 0.4 = 0.7 of 1.0, tokens 2 of 4: ratio 0.7 / 0.5 = 1.4
    s = span_share([0.1, 0.2, 0.3, 0.4], [False, False, True, True])
    assert s["n_tokens"] == 2
    assert s["token_share"] == pytest.approx(0.5)
    assert s["distance_share"] == pytest.approx(0.7)
    assert s["ratio"] == pytest.approx(1.4)


def test_span_share_undefined_without_distance():
    s = span_share([0.0, 0.0, 0.0], [True, False, False])
    assert s["token_share"] == pytest.approx(1 / 3)
    assert s["distance_share"] is None and s["ratio"] is None


def test_span_share_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        span_share([0.1, 0.2], [True])


def test_pair_stats_mass_and_top_share():
    # 10 tokens, total 10. Sorted cumulative 4, 7, 8: three tokens hold 80% -> 0.3.
    # Top 20% = 2 tokens hold 4 + 3 = 7 of 10 -> 0.7.
    q = [0, 1, 4, 0, 3, 1, 0, 1, 0, 0]
    tags = [False, False, True, False, False, False, False, False, False, True]
    st = pair_stats(q, {"tags": tags, "empty": [False] * 10})
    assert st["n_tokens"] == 10
    assert st["total_distance"] == pytest.approx(10.0)
    assert st["tokens_for_80pct"] == pytest.approx(0.3)
    assert st["top20_share"] == pytest.approx(0.7)
    assert set(st["spans"]) == {"tags"}  # an empty span is left out, never reported as 0
    assert st["spans"]["tags"]["distance_share"] == pytest.approx(0.4)
    assert st["spans"]["tags"]["token_share"] == pytest.approx(0.2)
    assert st["spans"]["tags"]["ratio"] == pytest.approx(2.0)


def test_pair_stats_zero_profile_gives_none():
    st = pair_stats([0.0] * 5, {"tags": [True] + [False] * 4})
    assert st["tokens_for_80pct"] is None and st["top20_share"] is None
    assert st["spans"]["tags"]["ratio"] is None


def _rec(name, value, q, mask):
    return {"reward": name, "value": value, "stats": pair_stats(q, {"target": mask})}


def test_aggregate_ratio_is_ratio_of_mean_shares():
    a = _rec("r", 1.0, [1, 1, 2], [False, False, True])  # dist 0.5 on 1/3 of the tokens
    b = _rec("r", 0.0, [1, 0, 0, 0], [True, True, False, False])  # dist 1.0 on 1/2 of the tokens
    row = aggregate([a, b])
    assert row["pairs"] == 2 and row["replayed"] == 2
    assert row["mean_value"] == pytest.approx(0.5)
    span = row["spans"]["target"]
    assert span["distance_share"] == pytest.approx(0.75)
    assert span["token_share"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    assert span["ratio"] == pytest.approx(0.75 / ((1 / 3 + 1 / 2) / 2))


def test_aggregate_ignores_pairs_without_distance_for_localization():
    live = _rec("r", 1.0, [0, 4, 0, 1], [False, True, False, False])
    dead = _rec("r", 0.0, [0, 0, 0, 0], [True, False, False, False])
    row = aggregate([live, dead])
    assert row["pairs"] == 2 and row["replayed"] == 1
    assert row["tokens_for_80pct"] == pytest.approx(0.25)
    assert row["spans"]["target"]["pairs"] == 1


def test_summarize_groups_repeated_ids_and_splits_by_value():
    recs = [
        _rec("startend:end_checker", 1.0, [0, 0, 1, 3], [False, False, False, True]),
        _rec("startend:end_checker#2", 0.0, [1, 1, 1, 1], [False, False, False, True]),
        _rec("punctuation:no_comma", 1.0, [1, 1], [False, False]),
    ]
    out = summarize(recs)
    assert set(out["rewards"]) == {"startend:end_checker", "punctuation:no_comma"}
    end = out["rewards"]["startend:end_checker"]
    assert end["pairs"] == 2
    assert end["by_value"]["1"]["spans"]["target"]["distance_share"] == pytest.approx(0.75)
    assert end["by_value"]["0"]["spans"]["target"]["ratio"] == pytest.approx(1.0)
    assert out["all"]["pairs"] == 3
    assert "target" not in out["rewards"]["punctuation:no_comma"]["spans"]
    assert reward_group("keywords:existence#12") == "keywords:existence"
    assert not math.isnan(out["all"]["top20_share"])
