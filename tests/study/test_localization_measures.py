"""The report reads every relevance measure's localization (``<label>/<measure>/summary.json``), a task's wildcard
checker span (one reward per constraint: each reads its own ``target``), and the plan's rule as its config states it
(the multi-constraint study's: against the null alone)."""

import json

from mrtpo_openrlhf.study.report.localization import judge_all, null_control_section


def _summary(span_gap: float, tok_gap: float, random_gap: float) -> dict:
    """One constraint's null control over 4 prompts x 2 responses: the reward's span share exceeds the null's by
    ``span_gap`` and its tokens for 80% by ``tok_gap`` (negative: fewer), give or take a little per prompt."""
    rows = []
    for prompt in range(4):
        for sample in range(2):
            wobble = 0.01 * (prompt - 1.5) + 0.005 * sample
            rows.append(
                {
                    "prompt": prompt,
                    "sample": sample,
                    "n_tokens": 50,
                    "tokens_for_80pct": {"reward": 0.3 + tok_gap + wobble, "null": 0.3, "random": 0.3 - random_gap},
                    "spans": {"target": {"reward": 0.2 + span_gap + wobble, "null": 0.2}},
                }
            )
    return {"null_control": {"keywords:existence": {"responses": 8, "per_response": rows}}}


def test_each_measure_is_judged_by_the_plans_rule_on_its_own_summaries(tmp_path):
    loc = tmp_path / "localization" / "base"
    (loc / "loggap").mkdir(parents=True)
    # js: a larger share and fewer tokens than the null, but more than the random profile
    (loc / "summary.json").write_text(json.dumps(_summary(0.3, -0.1, 0.2)))
    # loggap: no larger share than the null's
    (loc / "loggap" / "summary.json").write_text(json.dumps(_summary(-0.05, -0.1, 0.2)))

    js, _, _ = judge_all(tmp_path, "instruction", None, "null")
    loggap, _, _ = judge_all(tmp_path, "instruction", "loggap", "null")
    assert [j.span for j in js] == ["target"]  # the instruction task's wildcard checker span
    assert js[0].clustered and js[0].verdict == "passes"  # the null-only rule ignores the random profile
    strict, _, _ = judge_all(tmp_path, "instruction", None, "null_and_random")
    assert strict[0].verdict == "fails"  # the tool study's rule also asks fewer tokens than the random profile's
    assert loggap[0].verdict == "fails"

    text = "\n".join(null_control_section(tmp_path, "instruction", "null"))
    assert "### Relevance measure `loggap`" in text
    assert "random profile's comparison is reported, not judged" in text


def _located_on(prompts: set[int]) -> dict:
    """A clear localizer whose checker's span was found only in the responses of ``prompts`` (a title written on
    some prompts only): the other responses carry no ``target`` span."""
    summary = _summary(0.3, -0.1, 0.2)
    for row in summary["null_control"]["keywords:existence"]["per_response"]:
        if row["prompt"] not in prompts:
            row["spans"] = {}
    return summary


def test_a_span_located_on_fewer_than_three_prompts_is_untested_under_the_multi_constraint_rule(tmp_path):
    loc = tmp_path / "localization"
    for label, prompts in (("base", {0, 1}), ("gdpo-seed1", {0, 1, 2})):
        (loc / label).mkdir(parents=True)
        (loc / label / "summary.json").write_text(json.dumps(_located_on(prompts)))
    judged, _, _ = judge_all(tmp_path, "instruction", None, "null")
    by_label = {j.label: j for j in judged}
    assert by_label["base"].verdict == "untested"  # 2 prompts: the plan says untested there, not failed
    assert by_label["gdpo-seed1"].verdict == "passes"  # 3 prompts: judged
    # the tool study's rule has no such minimum: two prompts are judged (here, a 1-df interval)
    tool_rule, _, _ = judge_all(tmp_path, "instruction", None, "null_and_random")
    assert {j.label: j.verdict for j in tool_rule}["base"] != "untested"

    text = "\n".join(null_control_section(tmp_path, "instruction", "null"))
    assert "located on 2 prompts (< 3)" in text
    assert "keywords:existence 1 of 2 (1 untested)" in text
    assert "untested in 1 of 2 models (its span located on fewer than 3 prompts in 1" in text
    assert "of the 1 tested, span share above its null's in 1, tokens for 80% below its null's in 1, both" in text


def test_claim_one_has_a_row_per_relevance_measure(tmp_path):
    from mrtpo_openrlhf.study.report.localization import localization_claim

    loc = tmp_path / "localization" / "base"
    (loc / "loggap").mkdir(parents=True)
    (loc / "summary.json").write_text(json.dumps(_summary(0.3, -0.1, 0.2)))
    (loc / "loggap" / "summary.json").write_text(json.dumps(_summary(-0.05, -0.1, 0.2)))
    rows = localization_claim(tmp_path, "instruction", "null")
    assert [r["claim"][:8] for r in rows] == ["1. Local", "1-loggap"]
    assert [r["verdict"] for r in rows] == [
        "by the plan's rule: keywords:existence 1 of 1",
        "by the plan's rule: keywords:existence 0 of 1",
    ]
    assert localization_claim(tmp_path / "nowhere", "instruction", "null") == []
