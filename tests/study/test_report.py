"""``study report`` on small fixture metrics written here (no training)."""

import json

import numpy as np
import pytest

from mrtpo_openrlhf.study.__main__ import main
from mrtpo_openrlhf.study.report import ReportError, write_report

STEPS = 6
# per-arm slope of the format reward: mrtpo > gdpo > grpo by construction
SLOPES = {"grpo": 0.02, "gdpo": 0.05, "mrtpo": 0.10, "mrtpo-shuffle": 0.05, "mrtpo-joint": 0.08}


def make_study(root, arms=SLOPES, seeds=(1, 2, 3), steps=STEPS):
    rng = np.random.default_rng(0)
    (root).mkdir(parents=True, exist_ok=True)
    (root / "study.json").write_text(json.dumps({"name": "fixture", "steps": steps}))
    for arm in arms:
        for seed in seeds:
            d = root / arm / f"seed{seed}"
            d.mkdir(parents=True)
            with open(d / "metrics.jsonl", "w") as f:
                for t in range(1, steps + 1):
                    row = {
                        "step": t,
                        "reward/format/mean": 0.2 + SLOPES[arm] * t + 0.005 * rng.normal(),
                        "reward/correct/mean": 0.1,
                        "rollout/response_length_mean": 100.0 - t,
                        "timing/step_wall": 10.0 * (1.15 if arm.startswith("mrtpo") else 1.0),
                    }
                    if arm.startswith("mrtpo"):
                        row.update(
                            {
                                "mrtpo/replayed_pairs_frac": 0.2,
                                "mrtpo/replay_share_of_step": 0.1,
                                "mrtpo/format/tokens_for_80pct": 0.3,
                                "mrtpo/format/top20_share": 0.7,
                            }
                        )
                    f.write(json.dumps(row) + "\n")
            (d / "config.json").write_text(json.dumps({"arm": arm, "seed": seed}))
            (d / "result.json").write_text(json.dumps({"seconds": 1.0}))
    return root


def test_report_tables_claims_and_copies(tmp_path):
    src = make_study(tmp_path / "study")
    out = tmp_path / "docs"
    path = write_report(src, out, format_reward="format", threshold=0.6)
    text = path.read_text()
    summary = json.loads((out / "summary.json").read_text())
    verdict = {c["claim"][:2]: c["verdict"] for c in summary["claims"]}
    assert verdict["2."] == "held"  # constructed: mrtpo > gdpo > grpo in every seed
    assert verdict["3a"] == "held" and verdict["3b"] == "held"
    assert verdict["5."] == "not resolved"  # identical lengths
    # MRTPO's format AUC - GDPO's: (0.10 - 0.05) * mean(1..6) = 0.175
    p = summary["comparisons"]["mrtpo - gdpo | format"]
    assert p["mean"] == pytest.approx(0.175, abs=0.01) and p["wins"] == 3
    assert "| mrtpo | 3 |" in text and "![curves](curves.png)" in text
    assert (out / "curves.png").stat().st_size > 10_000
    assert (out / "runs" / "mrtpo" / "seed2" / "metrics.jsonl").is_file()
    assert "1.15" in text  # the MRTPO/GDPO step-time ratio
    tested = sum(1 for c in summary["comparisons"].values() if c["n"] > 1)
    assert f"the report makes {tested} paired comparisons with an interval" in text


def test_interval_ends_near_zero_keep_their_sign_and_size():
    from mrtpo_openrlhf.study.report import _interval

    assert _interval(-0.0613, 0.1766) == "[-0.061, +0.177]"
    assert _interval(0.0004857, 0.1766) == "[+0.00049, +0.177]"  # not "+0.000": it does exclude zero
    assert _interval(-0.0004857, 0.0) == "[-0.00049, +0.000]"


def test_report_regenerates_from_its_own_copies(tmp_path):
    src = make_study(tmp_path / "study")
    out = tmp_path / "docs"
    write_report(src, out)
    again = write_report(out)  # the copies alone suffice
    assert again.is_file() and json.loads((out / "summary.json").read_text())["steps"] == STEPS


def test_partial_study_says_so(tmp_path):
    src = make_study(tmp_path / "study", arms={"gdpo": 0.05, "mrtpo": 0.1}, seeds=(1,), steps=STEPS)
    rows = (src / "mrtpo" / "seed1" / "metrics.jsonl").read_text().splitlines()[:3]
    (src / "mrtpo" / "seed1" / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    text = write_report(src).read_text()
    assert "Incomplete runs (fewer than 6 steps logged): mrtpo seed 1" in text
    assert "too few seeds" in text


def test_empty_folder_and_cli_errors(tmp_path, capsys):
    with pytest.raises(ReportError, match="no <arm>/seed<k>/metrics.jsonl"):
        write_report(tmp_path)
    assert main(["report", str(tmp_path)]) == 2
    with pytest.raises(SystemExit):
        main(["report", str(tmp_path / "missing")])
    src = make_study(tmp_path / "s")
    assert main(["report", str(src), "--format-reward", "format"]) == 0
    assert "report:" in capsys.readouterr().out
