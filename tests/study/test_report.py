"""``study report`` on small fixture metrics written here (no training)."""

import json
import math

import numpy as np
import pytest

from mrtpo_openrlhf.study.__main__ import main
from mrtpo_openrlhf.study.report import ReportError, write_report
from mrtpo_openrlhf.study.report.runs import checkout_relative

STEPS = 6
# per-arm slope of the format reward: mrtpo > gdpo > grpo by construction
SLOPES = {"grpo": 0.02, "gdpo": 0.05, "mrtpo": 0.10, "mrtpo-shuffle": 0.05, "mrtpo-joint": 0.08}


SEEDS8 = tuple(range(1, 9))  # the fewest seeds at which Holm over the 4 declared comparisons can reject


def make_study(root, arms=SLOPES, seeds=(1, 2, 3), steps=STEPS, heldout=False, provenance=False):
    """Fixture runs; ``heldout``: a heldout.json per run (total = 1 + 10 x slope + a seed offset, per-prompt
    totals around it); ``provenance``: run.json with provenance, every run on training path ``aaa``."""
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
            run = {"cpu_dtype": "bf16"}
            if provenance:
                run["provenance"] = {
                    "commit": "c0ffee" * 7,
                    "dirty": False,
                    "training_path": "aaa",
                    "loadavg": [1, 2, 3],
                }
            (d / "run.json").write_text(json.dumps(run))
            if heldout:
                total = 1.0 + 10 * SLOPES[arm] + 0.01 * seed
                (d / "heldout.json").write_text(
                    json.dumps(
                        {
                            "rewards": {"format": total - 1.0, "correct": 1.0},
                            "total": total,
                            "per_prompt_total": [total - 0.1, total + 0.1, total],
                            "responses": 12,
                            "mean_response_tokens": 50.0,
                            "truncated_frac": 0.1,
                        }
                    )
                )
    return root


def test_report_tables_claims_and_copies(tmp_path):
    src = make_study(tmp_path / "study", seeds=SEEDS8)
    out = tmp_path / "docs"
    path = write_report(src, out, format_reward="format", threshold=0.6)
    text = path.read_text()
    summary = json.loads((out / "summary.json").read_text())
    verdict = {c["claim"][:2]: c["verdict"] for c in summary["claims"]}
    assert verdict["2."] == "held"  # constructed: mrtpo > gdpo > grpo in every one of 8 seeds
    assert verdict["3a"] == "held" and verdict["3b"] == "held"
    assert verdict["5."] == "see numbers (not declared)"  # length is never a declared comparison
    # without held-out scores the primary endpoint is the summed-reward AUC; 8 seeds all positive: p = 2/2^8,
    # Holm over the 4 declared comparisons (all at that p) multiplies the smallest by 4
    assert summary["primary_endpoint"] == "summed reward, training AUC"
    d = summary["declared"]["mrtpo - gdpo"]
    assert d["p_signflip"] == pytest.approx(2 / 256) and d["p_holm"] == pytest.approx(4 * 2 / 256)
    # MRTPO's format AUC - GDPO's (the default AUC, the mean over steps): (0.10 - 0.05) * mean(1..6) = 0.175
    p = summary["comparisons"]["mrtpo - gdpo | format, training AUC"]
    assert p["mean"] == pytest.approx(0.175, abs=0.01) and p["wins"] == 8
    assert "boot_low" not in p  # no bootstrap: the plan rules it out
    assert p["seeds"] == list(SEEDS8)
    assert "| mrtpo | 8 |" in text and "![curves](curves.png)" in text
    assert (out / "curves.png").stat().st_size > 10_000
    assert (out / "runs" / "mrtpo" / "seed2" / "metrics.jsonl").is_file()
    assert summary["step_cost"]["ratio_mean"] == pytest.approx(1.15)  # MRTPO/GDPO, paired within each seed
    assert "No provenance recorded" in text
    assert "the same 36 prompts in every seed" not in text and "the first 0 rows" not in text


def test_three_seeds_cannot_decide_and_no_bootstrap(tmp_path):
    src = make_study(tmp_path / "study")
    text = write_report(src, tmp_path / "out").read_text()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {c["verdict"] for c in summary["claims"] if c["claim"][:2] in ("2.", "3a", "3b")} == {"not resolved"}
    assert "smallest possible two-sided p is 2/2^3 = 0.250" in text
    assert "bootstrap" not in text.split("## Secondary comparisons")[1].split("\n")[2]  # no bootstrap column
    assert all("boot_low" not in p for p in summary["comparisons"].values())
    assert "bootstrap 95%" not in text


def test_heldout_is_the_primary_endpoint(tmp_path):
    src = make_study(tmp_path / "study", seeds=SEEDS8, heldout=True, provenance=True)
    text = write_report(src, tmp_path / "out").read_text()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["primary_endpoint"] == "held-out summed reward"
    d = summary["declared"]["mrtpo - gdpo"]
    assert d["mean"] == pytest.approx(10 * (0.10 - 0.05))  # seed offsets cancel in the pair
    # noise floor: per-prompt totals t-0.1, t+0.1, t: se = 0.1 / sqrt(3) per run, sqrt(2) x that for a pair
    assert d["noise"] == pytest.approx(math.sqrt(2) * 0.1 / math.sqrt(3))
    assert "## Primary endpoint: held-out summed reward" in text
    assert "| mrtpo | 8/8 |" in text  # the held-out table
    assert "held-out format" in text  # per-reward held-out comparisons are secondary
    assert "Excluded pairs: none" in text and "`aaa`" in text


def test_pairs_with_another_training_path_or_dtype_are_excluded(tmp_path, capsys):
    src = make_study(tmp_path / "study", provenance=True)
    run = src / "gdpo" / "seed2" / "run.json"
    rec = json.loads(run.read_text())
    rec["provenance"]["training_path"] = "bbb"
    run.write_text(json.dumps(rec))
    run = src / "grpo" / "seed3" / "run.json"
    rec = json.loads(run.read_text())
    rec["cpu_dtype"] = "fp32"
    run.write_text(json.dumps(rec))
    cfg = src / "mrtpo-shuffle" / "seed1" / "config.json"
    cfg.write_text(json.dumps({"base_model": {"weights_sha256": "1" * 64}}))
    (src / "mrtpo" / "seed1" / "config.json").write_text(json.dumps({"base_model": {"weights_sha256": "2" * 64}}))
    text = write_report(src, tmp_path / "out").read_text()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["excluded"]["mrtpo - mrtpo-shuffle seed 1"] == "base model weights 222222222222 vs 111111111111"
    assert summary["excluded"]["mrtpo - gdpo seed 2"] == "training path aaa vs bbb"
    assert summary["excluded"]["gdpo - grpo seed 3"] == "dtype bf16 vs fp32"
    assert summary["declared"]["mrtpo - gdpo"]["n"] == 2 and summary["declared"]["mrtpo - mrtpo-shuffle"]["n"] == 2
    assert summary["declared"]["mrtpo - mrtpo-joint"]["n"] == 3
    assert "**Excluded pairs**" in text and "mrtpo / gdpo seed 2 (training path aaa vs bbb)" in text
    # each run's base model is named in the provenance table; a run whose config has none shows a dash
    assert "| mrtpo-shuffle | 1 | `c0ffeec0ff` | False | `aaa` | None | `111111111111` | bf16 |" in text
    assert "| mrtpo | 1 | `c0ffeec0ff` | False | `aaa` | None | `222222222222` | bf16 |" in text
    assert "| gdpo | 1 | `c0ffeec0ff` | False | `aaa` | None | – | bf16 |" in text
    assert "not paired: mrtpo / gdpo seed 2: training path aaa vs bbb" in capsys.readouterr().err


def test_declared_comparisons_and_prompts_seen(tmp_path, capsys):
    src = make_study(tmp_path / "study")
    (src / "prompts").mkdir()
    for seed, ids in ((1, ["a", "b", "c"]), (2, ["c", "d", "e"]), (3, ["c", "f", "f"])):
        (src / "prompts" / f"seed{seed}.json").write_text(json.dumps({"seed": seed, "ids": ids}))
    write_report(src, tmp_path / "out", comparisons="mrtpo:grpo")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["declared"]) == ["mrtpo - grpo"] and summary["declared_source"] == "--comparisons"
    assert summary["declared"]["mrtpo - grpo"]["p_holm"] == pytest.approx(0.25)  # one comparison: Holm = raw p
    assert summary["prompts"] == {"per_seed": {"1": 3, "2": 3, "3": 2}, "distinct_all": 6, "in_every_seed": 1}
    assert (tmp_path / "out" / "prompts" / "seed2.json").is_file()
    assert main(["report", str(src), "--comparisons", "mrtpo:ppo"]) == 2
    assert "--comparisons 'mrtpo:ppo'" in capsys.readouterr().err


def test_interval_ends_near_zero_keep_their_sign_and_size():
    from mrtpo_openrlhf.study.report.text import _interval

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


def test_comparisons_from_the_config(tmp_path):
    src = make_study(tmp_path / "study")
    (src / "study.json").write_text(json.dumps({"name": "fixture", "steps": STEPS, "comparisons": ["gdpo:grpo"]}))
    write_report(src, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert list(summary["declared"]) == ["gdpo - grpo"] and summary["declared_source"].startswith("the config")


@pytest.mark.parametrize("name", ["if-smollm2-cpu", "if-smollm2-cpu-pilot"])
def test_committed_reports_regenerate_byte_for_byte(tmp_path, name):
    """The committed reports are what ``study report`` makes of their committed runs (the commands in notes.md)."""
    from pathlib import Path

    folder = Path(__file__).resolve().parents[2] / "docs" / "results" / name
    argv = ["report", str(folder), "--out", str(tmp_path), "--notes", str(folder / "notes.md")]
    argv += ["--probe", str(folder.parent / "probe" / "instruction_study_train_96.json")]
    argv += ["--format-reward", "startend:end_checker", "--threshold", "0.5"]
    assert main(argv) == 0
    assert (tmp_path / "report.md").read_text() == (folder / "report.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads((folder / "summary.json").read_text())


def test_the_tool_study_report_regenerates_byte_for_byte_from_its_amended_plan(tmp_path):
    """The interim tool-study report is what ``study report --config`` (amendment 3) makes of its committed runs,
    the command in docs/results/tool-smollm2-cpu/README.md."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    folder = repo / "docs" / "results" / "tool-smollm2-cpu"
    argv = ["report", str(folder), "--out", str(tmp_path), "--format-reward", "format", "--threshold", "0.8"]
    argv += ["--config", str(repo / "examples" / "study" / "tool_smollm2_cpu.toml")]
    assert main(argv) == 0
    assert (tmp_path / "report.md").read_text() == (folder / "report.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads((folder / "summary.json").read_text())


def test_a_comparison_short_of_its_planned_seeds_is_incomplete_and_not_judged(tmp_path):
    """The plan (10 seeds for the main arms, 8 for grpo and joint) with 8 seeds done everywhere: mrtpo - gdpo and
    mrtpo - shuffle are incomplete, shown with their numbers but judged on nothing and counted in Holm as p = 1;
    gdpo - grpo and mrtpo - joint have all their 8 and are judged."""
    src = make_study(tmp_path / "study", seeds=SEEDS8)
    plan = {
        "name": "fixture",
        "steps": STEPS,
        "arms": list(SLOPES),
        "seeds": list(range(1, 11)),
        "arm_seeds": {"grpo": list(SEEDS8), "mrtpo-joint": list(SEEDS8)},
    }
    (src / "study.json").write_text(json.dumps(plan))
    write_report(src, tmp_path / "out", format_reward="format", threshold=0.6)
    d = json.loads((tmp_path / "out" / "summary.json").read_text())["declared"]
    assert {k: (v["n"], v["planned"]) for k, v in d.items()} == {
        "mrtpo - gdpo": (8, 10),
        "gdpo - grpo": (8, 8),
        "mrtpo - mrtpo-shuffle": (8, 10),
        "mrtpo - mrtpo-joint": (8, 8),
    }
    # by hand: the family's p-values are 2/256, 2/256 and 1, 1 (the incomplete two); Holm: 4p, max(4p, 3p), 1, 1
    assert d["gdpo - grpo"]["p_holm"] == pytest.approx(8 / 256)
    assert d["mrtpo - mrtpo-joint"]["p_holm"] == pytest.approx(8 / 256)
    assert d["mrtpo - gdpo"]["p_holm"] is None and d["mrtpo - gdpo"]["p_signflip"] == pytest.approx(2 / 256)
    md = (tmp_path / "out" / "report.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in md.splitlines() if " | summed reward" in line}
    assert rows["mrtpo - gdpo"].endswith("| incomplete (8 of 10 seeds) |")
    assert rows["gdpo - grpo"].endswith("| A > B |")
    claim2 = next(line for line in md.splitlines() if line.startswith("| 2. Rewards rise faster"))
    assert "| incomplete |" in claim2 and "8 of 10 planned seeds: unadjusted, not judged" in claim2
    claim3b = next(line for line in md.splitlines() if line.startswith("| 3b."))
    assert "| held |" in claim3b
    assert "*incomplete*: mrtpo - gdpo (8 of 10), mrtpo - mrtpo-shuffle (8 of 10). Their numbers can still move" in md


def test_a_partial_study_is_adjusted_over_every_declared_comparison(tmp_path):
    """With mrtpo-joint not yet run, Holm still counts its comparison (as p = 1): the family is the preregistered
    four, so the three with runs are adjusted as if the fourth were there, never over fewer."""
    src = make_study(tmp_path / "study", seeds=SEEDS8)
    for folder in (src / "mrtpo-joint").iterdir():
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
    write_report(src, tmp_path / "out", format_reward="format", threshold=0.6)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    d = summary["declared"]
    assert d["mrtpo - gdpo"]["p_signflip"] == pytest.approx(2 / 256)
    # by hand: p-values 2/256 x 3 and 1.0; Holm's step-down gives 4p, then max(4p, 3p), then max(., 2p)
    assert [d[k]["p_holm"] for k in ("mrtpo - gdpo", "mrtpo - mrtpo-shuffle", "gdpo - grpo")] == pytest.approx(
        [4 * 2 / 256] * 3
    )


def test_superseded_runs_are_listed_and_never_paired(tmp_path):
    """A run moved to superseded/<arm>/seed<k>/ by a plan amendment is named with its base and held-out total,
    and neither counted nor paired: the declared comparison's n is that of the runs under the study."""
    src = make_study(tmp_path / "study", heldout=True)
    old = src / "superseded" / "mrtpo-shuffle" / "seed4"
    old.mkdir(parents=True)
    (old / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/format/mean": 0.9}) + "\n")
    (old / "config.json").write_text(json.dumps({"base_model": {"weights_sha256": "ab" * 32}}))
    (old / "heldout.json").write_text(json.dumps({"total": 2.5}))
    text = write_report(src, tmp_path / "out").read_text()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["superseded"] == [
        {"arm": "mrtpo-shuffle", "seed": 4, "base_model": "abababababab", "heldout_total": 2.5}
    ]
    assert "mrtpo-shuffle seed 4 (base `abababababab`, held-out total 2.500)" in text
    assert summary["runs"]["mrtpo-shuffle"] == [1, 2, 3]
    assert summary["declared"]["mrtpo - mrtpo-shuffle"]["n"] == 3


def test_secondary_comparisons_describe_and_never_decide(tmp_path):
    """8 constructed seeds where mrtpo beats gdpo on every secondary endpoint: the secondary table has no verdict
    column (its rows end at 'A higher in'), and the length claim, never declared, is not judged."""
    src = make_study(tmp_path / "study", seeds=SEEDS8)
    text = write_report(src, tmp_path / "out").read_text()
    table = text.split("## Secondary comparisons")[1].split("\n\n")[1].splitlines()
    assert table[0].endswith("| A higher in |") and "verdict" not in table[0]
    row = next(r for r in table if r.startswith("| mrtpo - gdpo | format, training AUC |"))
    assert row.endswith("| 8/8 |")  # constructed: mrtpo's format slope is twice gdpo's
    claims = {
        c["claim"][:2]: c["verdict"] for c in json.loads((tmp_path / "out" / "summary.json").read_text())["claims"]
    }
    assert claims["5."] == "see numbers (not declared)"


def test_step_time_is_not_paired_across_cpus(tmp_path):
    """GDPO seed 2 ran on another CPU than MRTPO seed 2: that seed's step-time ratio is left out and named; the
    held-out comparison still pairs it (same training path, dtype and base)."""
    src = make_study(tmp_path / "study", heldout=True, provenance=True)
    for arm, seed, model in (("gdpo", 2, "AMD EPYC"), ("mrtpo", 2, "Intel(R) Xeon(R) Processor")):
        run = src / arm / f"seed{seed}" / "run.json"
        rec = json.loads(run.read_text())
        rec["provenance"].update(cpu_model=model, cpu_flags=["avx512_bf16"])
        run.write_text(json.dumps(rec))
    text = write_report(src, tmp_path / "out").read_text()
    cost = json.loads((tmp_path / "out" / "summary.json").read_text())["step_cost"]
    assert len(cost["per_seed"]) == 2 and cost["ratio_mean"] == pytest.approx(1.15)
    assert cost["other_cpus"] == [
        "seed 2 (GDPO on AMD EPYC avx512_bf16, MRTPO on Intel(R) Xeon(R) Processor avx512_bf16)"
    ]
    assert "Not paired for step time (the two runs ran on other CPUs): seed 2 (GDPO on AMD EPYC" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["declared"]["mrtpo - gdpo"]["n"] == 3


def test_heldout_table_splits_arms_by_base_and_shows_the_bases_before_rl(tmp_path):
    """Seeds 1-2 on one base, seed 3 on another: each arm's held-out row is split by base (means over that base's
    seeds only), and each heldout_base*.json in the folder is a 'before RL' row."""
    src = make_study(tmp_path / "study", heldout=True)
    for arm in SLOPES:
        for seed in (1, 2, 3):
            sha = ("1" if seed < 3 else "2") * 64
            (src / arm / f"seed{seed}" / "config.json").write_text(json.dumps({"base_model": {"weights_sha256": sha}}))
    (src / "heldout_base_222222.json").write_text(
        json.dumps({"rewards": {"format": 0.1, "correct": 0.2}, "total": 0.3})
    )
    text = write_report(src, tmp_path / "out").read_text()
    table = text.split("## Primary endpoint")[1]
    # gdpo: total = 1 + 10 x 0.05 + 0.01 x seed -> seeds 1-2: 1.515, seed 3: 1.53
    assert "| gdpo (base `111111111111`) | 2/2 | 1.000 | 0.515 | 1.515 |" in table
    assert "| gdpo (base `222222222222`) | 1/1 | 1.000 | 0.530 | 1.530 |" in table
    assert "| before RL (`heldout_base_222222.json`) | – | 0.200 | 0.100 | 0.300 |" in table
    assert "started from 2 base models (`111111111111`: seeds 1, 2; `222222222222`: seed 3)" in text


def test_heldout_data_is_named_inside_the_checkout_not_by_the_machines_path(tmp_path):
    """heldout.json records the absolute path it was scored on (here a worktree's); the report names the file from
    the package folder on, and leaves a path outside the package as recorded."""
    src = make_study(tmp_path / "study", heldout=True)
    for arm, seed in ((a, s) for a in SLOPES for s in (1, 2, 3)):
        f = src / arm / f"seed{seed}" / "heldout.json"
        h = json.loads(f.read_text())
        h["setup"] = {"data": "/some/where/wt-study/mrtpo_openrlhf/data/tool/study/heldout.jsonl", "prompts": 3}
        f.write_text(json.dumps(h))
    text = write_report(src, tmp_path / "out").read_text()
    assert "scored on `mrtpo_openrlhf/data/tool/study/heldout.jsonl`: 3 prompts" in text
    assert "/some/where" not in text
    assert checkout_relative("/data/bench/heldout.jsonl") == "/data/bench/heldout.jsonl"
    assert checkout_relative(None) is None


def test_localization_names_how_many_finished_checkpoints_it_rests_on(tmp_path):
    """Localized: the base, gdpo seed 2 and seed 3; the method arm none: the section says so per arm, counted
    against the finished runs (3 per arm), before its table."""
    src = make_study(tmp_path / "study", heldout=True)
    summary = {"rewards": {"format": {"pairs": 2, "replayed": 2, "tokens_for_80pct": 0.3, "top20_share": 0.7}}}
    for label in ("base", "gdpo-seed2", "gdpo-seed3"):
        (src / "localization" / label).mkdir(parents=True)
        (src / "localization" / label / "summary.json").write_text(json.dumps(summary))
    text = write_report(src, tmp_path / "out").read_text()
    section = text.split("## Localization on final checkpoints")[1].split("| model |")[0]
    assert "Checkpoints localized: gdpo 2 of 3 finished runs (seeds 2, 3); mrtpo 0 of 3 finished runs." in section
    assert "| gdpo-seed2 | format | 2/2 | 30.0% | 70.0% | – |" in text


def test_per_arm_step_time_is_given_per_cpu_when_runs_span_several(tmp_path):
    """gdpo seeds 1-2 on a Xeon (10 s steps), seed 3 on an EPYC at 20 s: a mean over the three would be 13.3 s and
    compare machine mixes, so the per-arm table gives each CPU's mean and its runs; one CPU: the plain mean."""
    src = make_study(tmp_path / "study", provenance=True)
    for arm in SLOPES:
        for seed in (1, 2, 3):
            run = src / arm / f"seed{seed}" / "run.json"
            rec = json.loads(run.read_text())
            rec["provenance"]["cpu_model"] = "AMD EPYC" if seed == 3 else "Intel(R) Xeon(R) Processor"
            run.write_text(json.dumps(rec))
    m = src / "gdpo" / "seed3" / "metrics.jsonl"
    m.write_text("".join(json.dumps(dict(r, **{"timing/step_wall": 20.0})) + "\n" for r in read_rows(m)))
    text = write_report(src, tmp_path / "out").read_text()
    gdpo = next(line for line in text.split("## Per arm")[1].splitlines() if line.startswith("| gdpo |"))
    assert gdpo.endswith("| 20.0 (AMD EPYC, 1) / 10.0 (Intel Xeon, 2) |")
    one_cpu = make_study(tmp_path / "one")
    text = write_report(one_cpu, tmp_path / "out1").read_text()
    gdpo = next(line for line in text.split("## Per arm")[1].splitlines() if line.startswith("| gdpo |"))
    assert gdpo.endswith("| 10.0 |")


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_per_arm_training_rows_are_split_by_base_model(tmp_path):
    """Seeds 1-2 on one base, seed 3 on another (as the held-out table): a row per (arm, base), its seed count and
    its means over that base's seeds only (format final = 0.2 + slope x steps, the fixture's noise aside)."""
    src = make_study(tmp_path / "study")
    for arm in SLOPES:
        for seed in (1, 2, 3):
            sha = ("1" if seed < 3 else "2") * 64
            (src / arm / f"seed{seed}" / "config.json").write_text(json.dumps({"base_model": {"weights_sha256": sha}}))
    text = write_report(src, tmp_path / "out").read_text()
    rows = [line for line in text.split("## Per arm")[1].split("## ")[0].splitlines() if line.startswith("| gdpo")]
    expected = [["| gdpo (base `111111111111`)", "2"], ["| gdpo (base `222222222222`)", "1"]]
    assert [r.split(" | ")[:2] for r in rows] == expected
    fmt_final = float(rows[0].split(" | ")[2])
    assert fmt_final == pytest.approx(0.2 + SLOPES["gdpo"] * STEPS, abs=0.02)


def test_curves_have_a_line_per_arm_and_base_when_the_runs_have_several(tmp_path, monkeypatch):
    """Seeds 1-2 on one base, seed 3 on another: each arm gets a curve per base (same colour, other line style),
    each the mean over that base's seeds; one base: one curve per arm, labelled as before."""
    import matplotlib.figure

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    src = make_study(tmp_path / "study")
    write_report(src, tmp_path / "one")
    assert sorted(ln.get_label() for ln in saved[-1].axes[0].lines) == sorted(f"{arm} (n=3)" for arm in SLOPES)
    for arm in SLOPES:
        for seed in (1, 2, 3):
            sha = ("a" if seed < 3 else "b") * 64
            (src / arm / f"seed{seed}" / "config.json").write_text(json.dumps({"base_model": {"weights_sha256": sha}}))
    write_report(src, tmp_path / "two")
    lines = {ln.get_label(): ln for ln in saved[-1].axes[0].lines}
    assert "gdpo, base aaaaaaaa (n=2)" in lines and "gdpo, base bbbbbbbb (n=1)" in lines
    one, two = lines["gdpo, base aaaaaaaa (n=2)"], lines["gdpo, base bbbbbbbb (n=1)"]
    assert one.get_color() == two.get_color() and one.get_linestyle() != two.get_linestyle()
    rows = {s: read_rows(src / "gdpo" / f"seed{s}" / "metrics.jsonl") for s in (1, 2)}
    expect = [(rows[1][t]["reward/format/mean"] + rows[2][t]["reward/format/mean"]) / 2 for t in range(STEPS)]
    assert list(one.get_ydata()) == pytest.approx(expect)


def test_comparison_seeds_pair_only_the_seeds_the_plan_gives_a_comparison(tmp_path):
    """Amendment-3 shape: gdpo and mrtpo run seeds 1-10, grpo only 5-10; mrtpo - gdpo is declared on seeds 1-8 and
    gdpo - grpo on 5-10. Seeds 9-10 of mrtpo - gdpo are left out and named; each comparison has its planned n."""
    src = make_study(tmp_path / "study", arms={"grpo": 0, "gdpo": 0, "mrtpo": 0}, seeds=range(1, 11), heldout=True)
    for seed in range(1, 5):
        for file in (src / "grpo" / f"seed{seed}").iterdir():
            file.unlink()
        (src / "grpo" / f"seed{seed}").rmdir()
    plan = {
        "name": "fixture",
        "steps": STEPS,
        "arms": ["grpo", "gdpo", "mrtpo"],
        "seeds": list(range(1, 11)),
        "arm_seeds": {"grpo": list(range(5, 11))},
        "comparisons": ["mrtpo:gdpo", "gdpo:grpo"],
        "comparison_seeds": {"mrtpo:gdpo": list(range(1, 9)), "gdpo:grpo": list(range(5, 11))},
    }
    (src / "study.json").write_text(json.dumps(plan))
    write_report(src, tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    d = summary["declared"]
    assert (d["mrtpo - gdpo"]["n"], d["mrtpo - gdpo"]["planned"]) == (8, 8)
    assert (d["gdpo - grpo"]["n"], d["gdpo - grpo"]["planned"]) == (6, 6)
    # every paired difference has one sign: the exact two-sided sign-flip p is 2 / 2^n
    assert d["mrtpo - gdpo"]["p_signflip"] == pytest.approx(2 / 2**8)
    assert d["gdpo - grpo"]["p_signflip"] == pytest.approx(2 / 2**6)
    left_out = {k for k, why in summary["excluded"].items() if "comparison_seeds" in why}
    assert left_out == {"mrtpo - gdpo seed 9", "mrtpo - gdpo seed 10"}
    assert (
        "mrtpo / gdpo seed 9 (not among the seeds the plan gives mrtpo - gdpo"
        in (tmp_path / "out" / "report.md").read_text()
    )


def _toml(plan):
    def value(v):
        if isinstance(v, dict):
            return "{ " + ", ".join(f'"{k}" = {value(x)}' for k, x in v.items()) + " }"
        return json.dumps(v)

    return "[study]\n" + "".join(f"{k} = {value(v)}\n" for k, v in plan.items() if v is not None)


def test_an_amended_plan_is_read_with_config_and_checked_against_the_runs(tmp_path, capsys):
    """--config: the plan keys may differ from the runs' study.json (here more seeds for gdpo and mrtpo, one
    comparison's seeds narrowed), and the report says which; a training setting that differs is refused."""
    from mrtpo_openrlhf.study.config import parse_config

    src = make_study(tmp_path / "study", arms={"gdpo": 0, "mrtpo": 0}, seeds=range(1, 5), heldout=True)
    base = dict(name="fixture", task="tool", data="x.jsonl", arms=["gdpo", "mrtpo"], seeds=[1, 2, 3], steps=STEPS)
    (src / "study.json").write_text(json.dumps(parse_config(base).to_dict()))
    amended = {
        **base,
        "seeds": [1, 2, 3, 4],
        "comparisons": ["mrtpo:gdpo"],
        "comparison_seeds": {"mrtpo:gdpo": [1, 2, 3]},
    }
    (tmp_path / "plan.toml").write_text(_toml(amended))
    argv = ["report", str(src), "--out", str(tmp_path / "out"), "--config", str(tmp_path / "plan.toml")]
    assert main(argv) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "(`--config`), amended after runs began: its `seeds`, `comparisons`, `comparison_seeds` differ" in md
    d = json.loads((tmp_path / "out" / "summary.json").read_text())["declared"]
    assert (d["mrtpo - gdpo"]["n"], d["mrtpo - gdpo"]["planned"]) == (3, 3)

    (tmp_path / "bad.toml").write_text(_toml({**amended, "lr": 1e-3}))
    assert main([*argv[:-1], str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err
    assert "differs from the runs' study.json beyond the plan keys" in err and "lr: 0.001" in err
    with pytest.raises(SystemExit):
        main([*argv[:-1], str(tmp_path / "missing.toml")])
    assert "no such file" in capsys.readouterr().err


def test_a_seed_run_on_one_side_only_is_named(tmp_path):
    """gdpo seed 4 finished, mrtpo seed 4 not: the caveats name that seed for mrtpo - gdpo (and mrtpo - shuffle,
    whose mrtpo side also misses it); grpo never ran, so gdpo - grpo is not listed seed by seed."""
    src = make_study(tmp_path / "study", arms=["gdpo", "mrtpo", "mrtpo-shuffle"], seeds=(1, 2, 3))
    extra = make_study(tmp_path / "extra", arms=["gdpo", "mrtpo-shuffle"], seeds=(4,))
    for arm in ("gdpo", "mrtpo-shuffle"):
        (extra / arm / "seed4").rename(src / arm / "seed4")
    write_report(src, tmp_path / "out", format_reward="format", threshold=0.6)
    md = (tmp_path / "out" / "report.md").read_text()
    line = next(x for x in md.splitlines() if "on one side only" in x)
    assert line.endswith(": mrtpo - gdpo seed 4 (gdpo only), mrtpo - mrtpo-shuffle seed 4 (mrtpo-shuffle only).")
    assert "grpo seed" not in md


def test_primary_table_states_the_detectable_effect_and_its_share_of_the_rl_gain(tmp_path):
    """The plan promised the detectable effect at the observed sd: a column (at 0.05 and at Holm's first
    threshold 0.05/4) and a line per comparison with its share of what RL gained over the base before RL."""
    from scipy import stats as sps

    src = make_study(tmp_path / "study", heldout=True)
    for arm in SLOPES:
        for seed in (1, 2, 3):
            (src / arm / f"seed{seed}" / "config.json").write_text(
                json.dumps({"base_model": {"weights_sha256": "1" * 64}})
            )
    f = src / "mrtpo" / "seed2" / "heldout.json"  # spread the paired differences so the sd is not 0
    h = json.loads(f.read_text())
    f.write_text(json.dumps(dict(h, total=h["total"] + 0.2)))
    (src / "heldout_base.json").write_text(json.dumps({"rewards": {"format": 0.1, "correct": 0.2}, "total": 0.5}))
    text = write_report(src, tmp_path / "out").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| A - B | endpoint |"))
    assert "detectable at 0.05 / 0.05/4 (80% power)" in head and "bootstrap" not in head
    # by hand: mrtpo - gdpo per seed 0.5 + (0, 0.2, 0) -> sd 0.11547; a Monte-Carlo-free reference: the noncentral t
    d = np.array([0.5, 0.7, 0.5])
    sd = d.std(ddof=1)
    delta = float(
        next(tok for tok in text.split("mrtpo - gdpo: at the observed seed sd")[1].split() if tok[0].isdigit())
    )
    assert delta == pytest.approx(0.115, abs=1e-3)  # the sd as printed
    crit = sps.t.ppf(0.975, 2)
    line = text.split("mrtpo - gdpo: at the observed seed sd")[1].split(". ")[0]
    shown = float(line.split("true difference of ")[1].split(" ")[0])
    nc = shown * math.sqrt(3) / sd
    assert sps.nct.sf(crit, 2, nc) == pytest.approx(0.8, abs=0.01)
    # RL's gain for gdpo: its held-out total (1.5 + 0.01 seed, mean 1.52) minus 0.5 before RL
    assert "of the 1.020 that RL gained over the base for gdpo" in line


def test_steps_to_threshold_and_auc_follow_the_plan(tmp_path):
    """A config with the tool plan's definitions (``auc = "trapezoid"``, ``steps_to = "first"``): steps to format
    >= threshold is the first step reaching it, a run that never does counted as steps + 1, in claim 2b's per-seed
    list and the arm table's mean (not a 3-step trailing mean); the AUC is the trapezoid / T (not the mean)."""
    src = make_study(tmp_path / "study", seeds=SEEDS8)
    plan = json.loads((src / "study.json").read_text())
    (src / "study.json").write_text(json.dumps(dict(plan, auc="trapezoid", steps_to="first")))
    rates = {1: [0.1, 0.9, 0.1, 0.1, 0.1, 0.1], 2: [0.1] * 6, 3: [0.1, 0.1, 0.1, 0.9, 0.9, 0.9]}
    for seed, curve in rates.items():
        m = src / "grpo" / f"seed{seed}" / "metrics.jsonl"
        rows = [dict(r, **{"reward/format/mean": v}) for r, v in zip(read_rows(m), curve)]
        m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = write_report(src, tmp_path / "out", format_reward="format", threshold=0.8).read_text()
    claim = next(line for line in text.splitlines() if line.startswith("| 2b."))
    assert "first reaches 0.8 (censored at 7)" in claim and "grpo: 2, 7 (never), 4, 7 (never)" in claim
    grpo = next(line for line in text.split("## Per arm")[1].splitlines() if line.startswith("| grpo |"))
    # seeds 4-8 of the fixture (0.2 + 0.02 t) never reach 0.8 in 6 steps: 7 each
    assert f"| {(2 + 7 + 4 + 5 * 7) / 8:.1f} (2/8 reached) |" in grpo
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    p = summary["comparisons"]["mrtpo - gdpo | format, training AUC"]
    assert p["mean"] == pytest.approx(0.05 * 17.5 / 6, abs=0.01)  # (0.10 - 0.05) x the trapezoid of t over 1-6 / 6
    assert "AUC = the trapezoid over steps 1-6 divided by 6" in text
    # the default (no keys): the 3-step trailing mean, never-reached runs left out of the mean
    plain = write_report(make_study(tmp_path / "plain"), tmp_path / "out2", format_reward="format", threshold=0.8)
    assert "(3-step trailing mean)" in plain.read_text() and "AUC = mean over steps" in plain.read_text()


def test_step_time_pairs_only_runs_made_back_to_back(tmp_path):
    """Seed 2's GDPO run ended 10 h before its MRTPO run began (another sitting, another machine): its step-time
    ratio is left out of the mean and named with its gap; seeds 1 and 3 ran back to back and are paired."""
    src = make_study(tmp_path / "study", provenance=True)
    for arm, seed, end in (("gdpo", 2, "2026-12-03 08:00:00"), ("mrtpo", 2, "2026-12-03 18:30:00")):
        (src / arm / f"seed{seed}" / "result.json").write_text(json.dumps({"seconds": 1800.0, "finished": end}))
    m = src / "mrtpo" / "seed2" / "metrics.jsonl"
    m.write_text("".join(json.dumps(dict(r, **{"timing/step_wall": 5.0})) + "\n" for r in read_rows(m)))
    text = write_report(src, tmp_path / "out").read_text()
    cost = json.loads((tmp_path / "out" / "summary.json").read_text())["step_cost"]
    assert cost["per_seed"] == pytest.approx([1.15, 1.15]) and cost["ratio_mean"] == pytest.approx(1.15)
    assert cost["not_back_to_back"] == ["seed 2 (10.0 h apart; MRTPO / GDPO 0.50)"]
    assert "did not run back to back" in text and "| 2 |" not in text.split("## Step cost")[1].split("\n\n")[1]


def test_heldout_set_is_described_by_the_categories_it_scores(tmp_path):
    """The scored prompts are the held-out file's first N rows: the report counts their categories and names the
    training pool's categories none of them has (the tool study: 64 simple_python, no multiple)."""
    src = make_study(tmp_path / "study", heldout=True)
    rows = [{"prompt": "p", "label": json.dumps({"category": c})} for c in ["simple_python"] * 3 + ["multiple"]]
    held = tmp_path / "heldout.jsonl"
    held.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[::-1] + [{"label": {"category": "java"}}]))
    plan = json.loads((src / "study.json").read_text())
    (src / "study.json").write_text(json.dumps(dict(plan, data=str(train))))
    for arm, seed in ((a, s) for a in SLOPES for s in (1, 2, 3)):
        f = src / arm / f"seed{seed}" / "heldout.json"
        f.write_text(json.dumps(dict(json.loads(f.read_text()), setup={"data": str(held), "prompts": 3})))
    text = write_report(src, tmp_path / "out").read_text()
    assert (
        "The scored prompts (the file's first 3): 3 `simple_python`; none of `java` (the training pool has 1), "
        "`multiple` (the training pool has 1)." in text
    )
