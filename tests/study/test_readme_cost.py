"""The README's cost table (``study readme``'s cost block): its figures are the results files', never typed."""

import json
import math
from pathlib import Path

from mrtpo_openrlhf.study.report.readme import cost_block, gpu_check_cost, markers, sync_readme

REPO = Path(__file__).resolve().parents[2]
GPU_TEXT = (
    "# bash benchmarks/gpu_check.sh on one NVIDIA H100 80GB HBM3 (81559 MiB, driver 580.1), torch 2.13.0; 2027-01-02\n"
    "model=qwen device=cuda\n"
    "replay/floor 1.21 replay/GDPO 9.4% (qwen2.5-coder-7b, IF-like, 12% of pairs)\n"
)
SUMMARY = {"steps": 24, "step_cost": {"ratio_mean": 1.234, "ratio_low": 1.1, "ratio_high": 1.37, "per_seed": [1, 2]}}


def test_a_gpu_check_output_gives_its_cost_line():
    g = gpu_check_cost(GPU_TEXT)
    assert g == {
        "gpu": "NVIDIA H100 80GB HBM3",
        "date": "2027-01-02",
        "floor": "1.21",
        "share": "9.4",
        "model": "qwen2.5-coder-7b",
        "shape": "IF-like",
        "pairs": "12",
    }
    assert gpu_check_cost(GPU_TEXT.replace("replay/floor", "no cost line")) is None  # a failed run adds no row


def test_the_cost_block_shows_the_summary_and_gpu_figures_and_what_was_not_measured():
    lines = cost_block(SUMMARY, "docs/results/s", 0.7061, {"docs/results/gpu-check/h100.txt": GPU_TEXT})
    rows = [x for x in lines if x.startswith("| ") and not x.startswith("| where")]
    assert len(rows) == 3
    assert "x1.23 [1.10, 1.37]" in rows[0] and "70.6%" in rows[0] and "(2 seeds)" in rows[0]
    assert "NVIDIA H100 80GB HBM3, 2027-01-02" in rows[1] and "+9.4%" in rows[1] and "| 12% |" in rows[1]
    assert "[h100.txt](docs/results/gpu-check/h100.txt)" in rows[1]
    assert rows[2].count("not measured") == 2
    nan_rows = cost_block({"steps": 4}, "r", math.nan, {})
    assert "| – |" in nan_rows[4]  # no MRTPO arm: no replayed share, no invented figure


def test_sync_rewrites_the_cost_block_where_the_readme_has_its_markers(tmp_path, monkeypatch):
    import mrtpo_openrlhf.study.report.readme as readme_mod

    results = tmp_path / "docs" / "results" / "s"
    results.mkdir(parents=True)
    summary = {
        "name": "s",
        "runs": {"mrtpo": [1]},
        "primary_endpoint": "held-out summed reward",
        "declared": {},
        "claims": [],
        **SUMMARY,
    }
    (results / "summary.json").write_text(json.dumps(summary))
    gpu = tmp_path / "docs" / "results" / "gpu-check"
    gpu.mkdir()
    (gpu / "h100.txt").write_text(GPU_TEXT)
    monkeypatch.setattr(readme_mod, "_replayed_pairs", lambda _: 0.5)
    (eb, ee), (cb, ce) = markers("s"), markers("s", "cost")
    readme = tmp_path / "README.md"
    readme.write_text(f"# T\n{cb}\nold\n{ce}\nmid\n{eb}\n{ee}\n")
    assert sync_readme(readme, results) is True
    text = readme.read_text()
    assert "old" not in text and "x1.23" in text and "+9.4%" in text and "| 50.0% |" in text
    assert text.index(cb) < text.index("x1.23") < text.index(ce) < text.index("mid")
    assert sync_readme(readme, results, check=True) is False


def test_the_readmes_cost_figures_are_the_committed_results():
    """Read independently of the generator: the study's step-time ratio and each gpu_check's replay share."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    cb, ce = markers("tool-smollm2-cpu", "cost")
    block = readme.split(cb)[1].split(ce)[0]
    cost = json.loads((REPO / "docs/results/tool-smollm2-cpu/summary.json").read_text())["step_cost"]
    assert f"x{cost['ratio_mean']:.2f}" in block
    for f in (REPO / "docs/results/gpu-check").glob("*.txt"):
        line = next(x for x in f.read_text().splitlines() if x.startswith("replay/floor "))
        assert "+" + line.split("replay/GDPO ")[1].split("%")[0] + "%" in block
