"""``study localize``: diagnose a run's checkpoint, keep its summary beside the results, and the report shows it."""

import json
import shutil

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


def test_localize_checkpoint_and_report(tmp_path, tiny_model_dir):
    cfg = tmp_path / "loc.toml"
    cfg.write_text(CONFIG)
    study = tmp_path / "study"
    shutil.copytree(tiny_model_dir, study / "mrtpo" / "seed1" / "model")
    results = tmp_path / "results"
    argv = ["localize", str(cfg), "--arms", "mrtpo", "--out", str(study), "--results", str(results)]
    rc = main([*argv, "--prompts", "2", "--samples", "2", "--backend", "transformers"])
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
    null_rows = [
        line for line in null_table.split("## The paper")[0].splitlines() if line.startswith("| mrtpo-seed1 |")
    ]
    assert len(null_rows) == len(summary["null_control"]) == len(summary["rewards"])
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
