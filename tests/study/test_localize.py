"""``study localize``: diagnose a run's checkpoint, keep its summary beside the results, and the report shows it."""

import json
import math
import shutil

import numpy as np
import pytest

from mrtpo_openrlhf.study.__main__ import main
from mrtpo_openrlhf.study.report import write_report


def make_runs(root, arms=("gdpo", "mrtpo"), steps=3):
    """Minimal finished runs (one seed) so that ``write_report`` has curves to read."""
    (root / "study.json").write_text(json.dumps({"name": "loc", "steps": steps}))
    for arm in arms:
        d = root / arm / "seed1"
        d.mkdir(parents=True)
        rows = [{"step": t, "reward/format/mean": 0.1 * t, "timing/step_wall": 1.0} for t in range(1, steps + 1)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (d / "result.json").write_text(json.dumps({"seconds": 1.0}))


CONFIG = """[study]
name = "loc"
task = "instruction"
data = "mrtpo_openrlhf/data/instructions/study_train.jsonl"
arms = ["gdpo", "mrtpo"]
seeds = [1]
steps = 2
max_new_tokens = 8
"""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from mrtpo_openrlhf.models import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_localize_checkpoint_and_report(tmp_path, tiny_model_dir, monkeypatch):
    import mrtpo_openrlhf.provenance as provenance_module

    real, calls = provenance_module.provenance, []

    def provenance_then_a_commit_lands():  # the checkout moves on while the localization runs
        calls.append(1)
        return {**real(), "commit": ("a" if len(calls) == 1 else "b") * 40, "dirty": len(calls) > 1}

    monkeypatch.setattr(provenance_module, "provenance", provenance_then_a_commit_lands)
    cfg = tmp_path / "loc.toml"
    cfg.write_text(CONFIG)
    study = tmp_path / "study"
    shutil.copytree(tiny_model_dir, study / "mrtpo" / "seed1" / "model")
    results = tmp_path / "results"
    argv = ["localize", str(cfg), "--arms", "mrtpo", "--out", str(study), "--results", str(results)]
    rc = main([*argv, "--prompts", "2", "--samples", "2", "--backend", "transformers", "--relevance", "js", "loggap"])
    assert rc == 0
    kept = results / "localization" / "mrtpo-seed1"
    summary = json.loads((kept / "summary.json").read_text())
    # 2 prompts x 2 samples x 3 constraints per prompt: every (response, reward) pair is counted
    assert summary["pairs_total"] == 12
    assert json.loads((kept / "probe.json").read_text())["setup"]["prompts"] == 2
    assert (study / "localization" / "mrtpo-seed1" / "index.html").is_file()  # the heatmap stays with the checkpoint
    assert not (kept / "index.html").exists()

    # the report of a results folder with a localization/ folder shows one row per reward group
    make_runs(results)
    text = write_report(results).read_text()
    assert "## Localization on final checkpoints" in text
    table, null_table = text.split("## Localization on final checkpoints")[1].split("### Against the null block")
    rows = [line for line in table.splitlines() if line.startswith("| mrtpo-seed1 |")]
    assert len(rows) == len(summary["rewards"]) >= 1
    # and one row per reward against its null block (the summary's null_control)
    null_rows = [line for line in null_table.split("### Claim 1")[0].splitlines() if line.startswith("| mrtpo-seed1 |")]
    assert len(null_rows) == len(summary["null_control"]) == len(summary["rewards"])
    # the commit it ran from is in its run record (the tool plan's amendment 2), and each response's values with
    # its prompt, so the report judges it with intervals over prompts
    run = summary["run"]
    assert len(run["commit"]) == 40 and run["commit_source"] == "recorded by study localize"
    # every measure's summary names the code as it was when the localization started
    for other in (summary, json.loads((kept / "loggap" / "summary.json").read_text())):
        assert other["run"]["commit"] == "a" * 40 and other["run"]["dirty"] is False
    assert "base_model_sha256" in run
    assert all("per_response" in nc for nc in summary["null_control"].values())
    assert "Means with 95% cluster-robust intervals over prompts" in null_table.split("### Claim 1")[0]
    # the heatmap picture, when a browser took it, is linked from the report
    assert ("localization/mrtpo-seed1/heatmap.png" in text) == (kept / "heatmap.png").is_file()
    (kept / "heatmap.png").write_bytes(b"png")
    assert "![mrtpo-seed1 heatmap](localization/mrtpo-seed1/heatmap.png)" in write_report(results).read_text()


def test_screenshot_without_a_browser_writes_nothing_and_says_so(tmp_path, monkeypatch):
    from mrtpo_openrlhf.study import localize

    monkeypatch.setattr(localize, "BROWSERS", ("no-such-browser-here",))
    page = tmp_path / "index.html"
    page.write_text("<h1>q</h1>")
    said = localize.screenshot(page, tmp_path / "heatmap.png")
    assert "no headless browser" in said and not (tmp_path / "heatmap.png").exists()


@pytest.mark.skipif(not any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")),
                    reason="no headless browser installed")  # fmt: skip
def test_screenshot_with_a_browser_is_a_small_png(tmp_path):
    from PIL import Image

    from mrtpo_openrlhf.study import localize

    page = tmp_path / "index.html"
    page.write_text("<h1 style='color:#c00'>relevance</h1>")
    said = localize.screenshot(page, tmp_path / "heatmap.png", width=300, height=200)
    assert said.startswith("heatmap picture"), said
    with Image.open(tmp_path / "heatmap.png") as image:
        assert image.size == (300, 200) and image.mode == "P"


def test_localize_without_checkpoint_says_how_to_train_it(tmp_path, capsys):
    cfg = tmp_path / "loc.toml"
    cfg.write_text(CONFIG)
    rc = main(["localize", str(cfg), "--arms", "gdpo", "--out", str(tmp_path / "study"), "--results", "none"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "gdpo seed 1: no checkpoint" in err and "--results none" in err


def test_localize_rejects_unknown_arm(tmp_path):
    cfg = tmp_path / "loc.toml"
    cfg.write_text(CONFIG)
    with pytest.raises(SystemExit):
        main(["localize", str(cfg), "--arms", "ppo"])


# ------------------------------------------------------------------------- claim 1 by the plan's rule, in the report
def _legacy_interval(values):
    """An interval as summaries written before 2026-12-05 hold it: over responses, the normal's 1.96 beyond 30 df."""
    from mrtpo_openrlhf.study.stats import legacy_t975

    v = np.asarray(values, dtype=float)
    half = legacy_t975(v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return {"n": int(v.size), "mean": float(v.mean()), "low": float(v.mean() - half), "high": float(v.mean() + half)}


def _write_localization(root, label, null_control, samples=4):
    d = root / "localization" / label
    d.mkdir(parents=True)
    run = {"model": "m", "null block": "The museum opens at nine."}
    (d / "summary.json").write_text(json.dumps({"run": run, "rewards": {}, "null_control": null_control}))
    setup = {"data": "/x/train.jsonl", "prompts": 8, "samples": samples, "seed": 7}
    (d / "probe.json").write_text(json.dumps({"setup": setup}))


def test_claim_1_applies_the_plans_two_part_rule_to_committed_summaries(tmp_path):
    """Summaries with only intervals over responses (as committed): the rule needs the span share above the null's
    AND fewer tokens for 80% than the null's and the random profile's. format: both -> passes; correctness: span
    yes, tokens no -> fails (the relaxed reading would have passed it); function: its span (function_name) never
    measured -> untested, not failed. The intervals are rescaled from 1.96 to Student's t (2.040 at 31 df)."""
    from scipy import stats as sps

    rng = np.random.default_rng(0)
    span = rng.normal(0.2, 0.05, 32)  # reward - null share on the checker's span: clearly above 0
    fewer = rng.normal(-0.03, 0.01, 32)  # reward - null tokens for 80%: below 0
    more = rng.normal(0.04, 0.01, 32)  # above 0
    random = rng.normal(-0.2, 0.02, 32)
    tok = lambda d: {"reward_minus_null": _legacy_interval(d), "reward_minus_random": _legacy_interval(random)}  # noqa: E731
    nc = {
        "format": {"tokens_for_80pct": tok(fewer), "spans": {"tags": {"reward_minus_null": _legacy_interval(span)}}},
        "correctness": {
            "tokens_for_80pct": tok(more),
            "spans": {"tool_arguments": {"reward_minus_null": _legacy_interval(span)}},
        },
        "function": {"tokens_for_80pct": tok(fewer), "spans": {"tags": {"reward_minus_null": _legacy_interval(-span)}}},
    }
    for k in nc.values():
        k.update(responses=32, tokens_for_80pct_abs=k["tokens_for_80pct"])
    results = tmp_path / "results"
    results.mkdir()
    make_runs(results)
    (results / "study.json").write_text(json.dumps({"name": "loc", "steps": 3, "task": "tool"}))
    _write_localization(results, "base", nc)
    text = write_report(results).read_text()
    rows = {
        line.split(" | ")[1]: line for line in text.split("### Claim 1")[1].splitlines() if line.startswith("| base |")
    }
    assert rows["format"].split(" | ")[6] == "passes"
    assert rows["correctness"].split(" | ")[6] == "fails"
    assert rows["function"].split(" | ")[2:4] == ["`function_name`", "not measured"]
    assert rows["function"].split(" | ")[6] == "untested"
    # the span interval shown is the t-interval over the 32 responses (scipy), not the stored 1.96 one
    lo, hi = sps.t.interval(0.95, 31, loc=span.mean(), scale=sps.sem(span))
    assert rows["format"].split(" | ")[3] == f"{100 * span.mean():.1f}% [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    summary = json.loads((results / "summary.json").read_text())
    claim = next(c for c in summary["claims"] if c["claim"].startswith("1."))
    assert claim["verdict"] == "by the plan's rule: correctness 0 of 1, format 1 of 1; function untested"
    assert "Exploratory, not the plan's rule" in claim["evidence"] and "untested, not negative" in claim["evidence"]
    # what the committed intervals can support: cluster-robust intervals cannot be computed, the worst case can
    assert "cannot be computed from what is committed" in text and "worst case" in text
    assert "All 1 models were localized on the same 8 prompts" in text


def test_claim_1_is_judged_cluster_robust_when_per_response_values_are_kept(tmp_path):
    """A summary with per-response values and prompt ids (what study localize writes now): the rule's intervals are
    recomputed over the 8 prompts; with identical responses per prompt they equal the t-interval of the 8 prompt
    means (7 df), which here is wide enough that a difference clearly above 0 over 32 'independent' responses is not."""
    from scipy import stats as sps

    rng = np.random.default_rng(1)
    per_prompt = rng.normal(0.02, 0.05, 8)  # the reward - null share differs by prompt, not within
    rows = []
    for prompt in range(8):
        for sample in range(4):
            share = 0.3 + per_prompt[prompt]
            rows.append(
                {
                    "prompt": prompt,
                    "sample": sample,
                    "n_tokens": 50,
                    "tokens_for_80pct": {"reward": 0.2, "null": 0.25 + 0.001 * sample, "random": 0.44},
                    "spans": {"tags": {"reward": share, "null": 0.3}},
                }
            )
    nc = {"format": {"responses": 32, "per_response": rows, "tokens_for_80pct": {}, "tokens_for_80pct_abs": {}}}
    nc["format"]["spans"] = {}
    results = tmp_path / "results"
    results.mkdir()
    make_runs(results)
    (results / "study.json").write_text(json.dumps({"name": "loc", "steps": 3, "task": "tool"}))
    _write_localization(results, "gdpo-seed1", nc)
    text = write_report(results).read_text()
    row = next(line for line in text.split("### Claim 1")[1].splitlines() if line.startswith("| gdpo-seed1 | format"))
    lo, hi = sps.t.interval(0.95, 7, loc=per_prompt.mean(), scale=sps.sem(per_prompt))
    assert row.split(" | ")[3] == f"{100 * per_prompt.mean():.1f}% [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    naive = np.repeat(per_prompt, 4)
    n_lo, _ = sps.t.interval(0.95, 31, loc=naive.mean(), scale=sps.sem(naive))
    assert lo < 0 < n_lo  # over responses it would pass its span part; over prompts it does not
    assert (
        row.split(" | ")[6].strip(" |") == "fails" and "worst-case" not in text.split("### Claim 1")[1].split("\n\n")[1]
    )
