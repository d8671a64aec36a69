"""The instruction-level endpoints of a study whose prompts carry different numbers of rewards (issue 45), against
hand computations, and a report judged on them."""

import json

import pytest

from mrtpo_openrlhf.study.report import write_report
from mrtpo_openrlhf.study.report.levels import INSTRUCTION, PROMPT, UNSEEN, by_k, per_prompt_levels

# two prompts: the first with 3 constraints (the last of an unseen type), the second with 5 (none unseen)
ROWS = [
    {"types": ["a", "b", "u"], "unseen": ["u"]},
    {"types": ["a", "b", "c", "d", "e"], "unseen": []},
]
HELDOUT = {
    "names_by_prompt": [["A", "B", "U"], ["A", "B", "C", "D", "E"]],
    "per_prompt_total": [None, None],
    "per_response": [
        [0, [1.0, 0.0, 1.0]],
        [0, [1.0, 1.0, 1.0]],
        [1, [1.0, 1.0, 0.0, 0.0, 0.0]],
        [1, [1.0, 1.0, 1.0, 1.0, 0.0]],
    ],
}


def test_levels_by_hand():
    assert per_prompt_levels(HELDOUT, INSTRUCTION) == pytest.approx([(2 / 3 + 1) / 2, (2 / 5 + 4 / 5) / 2])
    assert per_prompt_levels(HELDOUT, PROMPT) == [0.5, 0.0]
    assert per_prompt_levels(HELDOUT, UNSEEN, ROWS) == [1.0, None]  # prompt 2 has no unseen constraint
    k = by_k(HELDOUT)
    assert k[(3, 4)] == pytest.approx(5 / 6) and k[(5, 6)] == pytest.approx(0.6) and k[(7, 8)] != k[(7, 8)]  # NaN


def _if_study(root, heldout_file, arms=("gdpo", "mrtpo"), seeds=(1, 2, 3)):
    root.mkdir(parents=True)
    config = {"name": "ifx", "steps": 2, "heldout": str(heldout_file), "primary_endpoint": INSTRUCTION,
              "comparisons": ["mrtpo:gdpo"]}  # fmt: skip
    (root / "study.json").write_text(json.dumps(config))
    for arm in arms:
        for seed in seeds:
            d = root / arm / f"seed{seed}"
            d.mkdir(parents=True)
            rows = [{"step": t, "constraints_satisfied_frac": 0.5 + 0.1 * t, "reward/A/mean": 0.5} for t in (1, 2)]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (d / "config.json").write_text(json.dumps({"arm": arm, "seed": seed}))
            (d / "result.json").write_text(json.dumps({"seconds": 1.0}))
            (d / "run.json").write_text(json.dumps({"cpu_dtype": "bf16"}))
            met = 1.0 if arm == "mrtpo" and seed != 3 else 0.0  # mrtpo meets prompt 1's first constraint more often
            h = json.loads(json.dumps(HELDOUT))
            h["per_response"][0][1][1] = met
            h.update(rewards={"A": 1.0}, total=2.0, responses=4, mean_response_tokens=50.0, truncated_frac=0.0)
            (d / "heldout.json").write_text(json.dumps(h))
    return root


def test_report_judges_the_instruction_level(tmp_path):
    held = tmp_path / "heldout.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    src = _if_study(tmp_path / "study", held)
    write_report(src, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["primary_endpoint"] == "held-out instruction-level pass rate"
    declared = summary["declared"]["mrtpo - gdpo"]
    # seeds 1 and 2: prompt 1's mean level rises by (1/3)/2, the mean over the two prompts by 1/12; seed 3: 0
    assert declared["mean"] == pytest.approx((1 / 12 + 1 / 12 + 0) / 3)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "held-out prompt-level pass rate" in text and "unseen constraint types" in text
    assert "by constraints per held-out prompt" in text and "K 3-4" in text


def test_rewards_scored_only_held_out_are_compared_with_their_own_response_count(tmp_path):
    """The unseen types are never trained on, so only the held-out scores name them; their binomial noise floor
    counts the responses of the prompts that carry them (2 of the 4 here), not every response."""
    held = tmp_path / "heldout.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    src = _if_study(tmp_path / "study", held)
    for arm, rate in (("gdpo", 0.5), ("mrtpo", 0.25)):
        for seed in (1, 2, 3):
            f = src / arm / f"seed{seed}" / "heldout.json"
            h = json.loads(f.read_text())
            h["rewards"] = {"A": 1.0, "U": rate}
            f.write_text(json.dumps(h))
    write_report(src, tmp_path / "out")
    comparisons = json.loads((tmp_path / "out" / "summary.json").read_text())["comparisons"]
    unseen = comparisons["mrtpo - gdpo | held-out U"]
    assert unseen["mean"] == pytest.approx(-0.25)
    assert unseen["noise"] == pytest.approx((0.25 * 0.75 / 2 + 0.5 * 0.5 / 2) ** 0.5)
    assert "mrtpo - gdpo | held-out response length (tokens)" in comparisons
