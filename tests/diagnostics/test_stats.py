"""Localization statistics on hand-built relevance profiles, with exact expected numbers."""

import math

import pytest

from mrtpo_openrlhf.diagnostics.stats import (
    aggregate,
    interval,
    null_control,
    null_stats,
    pair_stats,
    random_tokens_for_mass,
    reward_group,
    span_share,
    summarize,
)


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


# ------------------------------------------------------------------------------------------- null control
def test_random_profile_tends_to_the_exponential_value():
    # i.i.d. Exp(1): the top tokens above x hold (1 + x) e^-x of the mass; 80% at x = 0.8244, a share e^-x = 0.4385
    x = 0.8244
    assert (1 + x) * math.exp(-x) == pytest.approx(0.8, abs=1e-4)
    assert random_tokens_for_mass(20_000, draws=4) == pytest.approx(math.exp(-x), abs=0.005)
    assert random_tokens_for_mass(40, seed=3) == random_tokens_for_mass(40, seed=3)  # seeded
    assert math.isnan(random_tokens_for_mass(0))


def test_interval_matches_scipy():
    from scipy import stats as sps

    v = [0.1, 0.4, 0.35, 0.2, 0.7]
    got = interval(v + [None])
    lo, hi = sps.t.interval(0.95, len(v) - 1, loc=sum(v) / len(v), scale=sps.sem(v))
    assert got["n"] == 5 and got["low"] == pytest.approx(lo, rel=1e-3) and got["high"] == pytest.approx(hi, rel=1e-3)
    assert interval([0.3]) == {"n": 1, "mean": 0.3, "low": None, "high": None}


def _pair(q, q_null, mask):
    masks = {"target": mask}
    return {"stats": pair_stats(q, masks), "controls": null_stats(q_null, masks, len(q))}


def test_null_control_by_hand():
    # Two responses of 4 tokens, the reward's span = the last token.
    # 1: reward q [0, 0, 1, 3]: span share 3/4, 80% needs 2 tokens (3, then 1) -> 0.5; null [1, 1, 1, 1]: share 1/4,
    #    80% needs 4 -> 1.0. 2: reward [0, 0, 0, 2]: share 1, 1 token -> 0.25; null [2, 1, 1, 0]: share 0, 80% needs
    #    3 (2, 1, 1 = 4 of 4 >= 3.2 only at the third) -> 0.75.
    mask = [False, False, False, True]
    recs = [_pair([0, 0, 1, 3], [1, 1, 1, 1], mask), _pair([0, 0, 0, 2], [2, 1, 1, 0], mask)]
    nc = null_control(recs)
    assert nc["responses"] == 2
    span = nc["spans"]["target"]
    assert span["reward"]["mean"] == pytest.approx((0.75 + 1.0) / 2)
    assert span["null"]["mean"] == pytest.approx((0.25 + 0.0) / 2)
    assert span["reward_minus_null"]["mean"] == pytest.approx((0.5 + 1.0) / 2)
    # t-interval of the differences [0.5, 1.0] (1 dof): 0.75 +- 12.706 * 0.3536 / sqrt(2)
    half = 12.706 * math.sqrt(((0.5 - 0.75) ** 2 + (1.0 - 0.75) ** 2) / 1) / math.sqrt(2)
    assert span["reward_minus_null"]["low"] == pytest.approx(0.75 - half, rel=1e-4)
    assert nc["beats_null_on_span"] == {"target": False}  # two responses: the interval still spans 0
    tok, ab = nc["tokens_for_80pct"], nc["tokens_for_80pct_abs"]
    assert tok["reward"]["mean"] == pytest.approx((0.5 + 0.25) / 2) and tok["null"]["mean"] == pytest.approx(0.875)
    assert ab["reward"]["mean"] == pytest.approx(1.5) and ab["null"]["mean"] == pytest.approx(3.5)
    assert tok["reward_minus_null"]["mean"] == pytest.approx(-0.5) and tok["reward_minus_null"]["high"] is not None
    # with these two differences equal (-0.5, -0.5) the interval is a point: more concentrated than the null
    assert nc["more_concentrated_than_null"] is True
    assert 0.25 <= tok["random"]["mean"] <= 1.0  # 4 tokens: the random profile needs 2-4 of them


def test_null_control_skips_pairs_without_a_null_or_distance():
    mask = [True, False]
    recs = [_pair([0, 0], [1, 1], mask), _pair([1, 1], None, mask), _pair([1, 0], [0, 1], mask)]
    nc = null_control(recs)
    assert nc["responses"] == 1  # the first has no distance, the second no null
    assert nc["spans"]["target"]["reward"]["mean"] == 1.0 and nc["spans"]["target"]["null"]["mean"] == 0.0
    assert nc["beats_null_on_span"] == {"target": False}  # one response: no interval, no verdict


def test_null_control_intervals_are_cluster_robust_over_prompts():
    """Four responses from two prompts: each interval is the t-interval of the two per-prompt means (1 df), not of
    the four responses (3 df); each response's values and prompt are kept for a report to recompute from."""
    from scipy import stats as sps

    mask = [False, False, False, True]
    profiles = [([0, 0, 1, 3], 0), ([0, 0, 0, 2], 0), ([1, 1, 1, 1], 1), ([0, 1, 0, 3], 1)]
    recs = []
    for k, (q, prompt) in enumerate(profiles):
        rec = _pair(q, [1, 1, 1, 1], mask)
        recs.append({**rec, "prompt_index": prompt, "sample": k % 2, "response_index": k})
    nc = null_control(recs)
    diffs = [r["stats"]["spans"]["target"]["distance_share"] - 0.25 for r in recs]  # null share on the span: 1/4
    means = [(diffs[0] + diffs[1]) / 2, (diffs[2] + diffs[3]) / 2]
    lo, hi = sps.t.interval(0.95, 1, loc=sum(means) / 2, scale=sps.sem(means))
    got = nc["spans"]["target"]["reward_minus_null"]
    assert got["clusters"] == 2 and got["low"] == pytest.approx(lo) and got["high"] == pytest.approx(hi)
    naive = sps.t.interval(0.95, 3, loc=sum(diffs) / 4, scale=sps.sem(diffs))
    assert got["low"] != pytest.approx(naive[0])
    assert [r["prompt"] for r in nc["per_response"]] == [0, 0, 1, 1]
    assert nc["per_response"][0]["spans"]["target"] == {"reward": 0.75, "null": 0.25}
    assert nc["per_response"][0]["tokens_for_80pct"]["reward"] == pytest.approx(0.5)
    assert "cluster-robust over prompts" in nc["intervals"]
