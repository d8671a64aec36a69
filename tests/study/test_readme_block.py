"""The README's study evidence block: generated from the committed summary.json, in sync, and the same numbers the
report prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mrtpo_openrlhf.cli.study import main as study_main
from mrtpo_openrlhf.study.report.readme import ReadmeError, evidence_block, markers, sync_readme

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "docs" / "results" / "tool-smollm2-cpu"


def test_the_readme_block_is_in_sync_with_the_committed_summary():
    """Regenerate with `python -m mrtpo_openrlhf.cli.study readme docs/results/tool-smollm2-cpu` after each report."""
    assert sync_readme(REPO / "README.md", TOOL, check=True) is False


def _rows(text: str, first_cell: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith(f"| {first_cell} |")
    ]


def test_the_readme_shows_the_reports_primary_numbers():
    """The report prints its primary table from the comparisons themselves; the README block from summary.json."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    report = (TOOL / "report.md").read_text(encoding="utf-8")
    summary = json.loads((TOOL / "summary.json").read_text(encoding="utf-8"))
    for name, record in summary["declared"].items():
        if record is None:
            continue
        (readme_row,) = _rows(readme, name)
        report_rows = [r for r in _rows(report, name) if r[1] == summary["primary_endpoint"]]
        (report_row,) = report_rows
        (header,) = _rows(report, "A - B")[:1]
        cell = dict(zip(header, report_row))
        assert readme_row[1].split()[0] == cell["seeds"]
        assert readme_row[2:6] == [cell["mean"], cell["95% t-interval"], cell["sign-flip p"], cell["Holm p"]]
        assert readme_row[6] == cell["verdict"]


SUMMARY = {
    "name": "demo",
    "runs": {"gdpo": [1, 2, 3, 5], "mrtpo": [1, 2, 3]},
    "planned_runs": 8,
    "primary_endpoint": "held-out summed reward",
    "declared": {
        "mrtpo - gdpo": {
            "n": 3, "mean": 0.25, "t_low": -0.1, "t_high": 0.6, "p_signflip": 0.25, "p_holm": None, "planned": 4,
            "verdict": "incomplete (3 of 4 seeds)",
        },
        "gdpo - grpo": None,
    },
    "claims": [{"claim": "2. Rewards rise faster", "verdict": "not tested", "evidence": "..."}],
}  # fmt: skip


def _write(tmp_path: Path, readme_text: str, summary=SUMMARY) -> tuple[Path, Path]:
    results = tmp_path / "docs" / "results" / "demo"
    results.mkdir(parents=True)
    (results / "summary.json").write_text(json.dumps(summary))
    readme = tmp_path / "README.md"
    readme.write_text(readme_text)
    return readme, results


def test_sync_rewrites_only_the_block_and_check_sees_drift(tmp_path):
    begin, end = markers("demo")
    readme, results = _write(tmp_path, f"# Title\n\nbefore\n{begin}\nold text\n{end}\nafter\n")
    assert sync_readme(readme, results, check=True) is True
    assert "old text" in readme.read_text()  # --check leaves the file alone
    assert sync_readme(readme, results) is True
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n" + begin + "\n") and text.endswith(end + "\nafter\n")
    assert "old text" not in text
    assert "**Status: 7 of 8 planned runs done.**" in text
    assert "`gdpo` seeds 1-3, 5; `mrtpo` seeds 1-3" in text
    assert "| mrtpo - gdpo | 3 of 4 | +0.250 | [-0.100, +0.600] | 0.250 | – | incomplete (3 of 4 seeds) |" in text
    assert "| gdpo - grpo | 0 | – | – | – | – | not run |" in text
    assert "| 2. Rewards rise faster | not tested |" in text
    assert "(docs/results/demo/summary.json)" in text  # linked relative to the README
    assert sync_readme(readme, results) is False  # idempotent
    readme.write_text(text.replace("not tested |", "held |"))  # a hand edit inside the block
    assert sync_readme(readme, results, check=True) is True


@pytest.mark.parametrize(
    "body",
    ["no markers at all\n", "<!-- study-evidence:demo:end -->\n<!-- study-evidence:demo:begin -->\n",
     "<!-- study-evidence:demo:begin -->\n<!-- study-evidence:demo:begin -->\n<!-- study-evidence:demo:end -->\n"],
)  # fmt: skip
def test_a_readme_without_one_pair_of_markers_is_refused(tmp_path, body):
    readme, results = _write(tmp_path, body)
    with pytest.raises(ReadmeError, match="needs one line"):
        sync_readme(readme, results)
    assert readme.read_text() == body


def test_the_command_exits_1_on_drift_and_2_without_a_summary(tmp_path, capsys):
    begin, end = markers("demo")
    readme, results = _write(tmp_path, f"{begin}\n{end}\n")
    assert study_main(["readme", str(results), "--readme", str(readme), "--check"]) == 1
    assert study_main(["readme", str(results), "--readme", str(readme)]) == 0
    assert study_main(["readme", str(results), "--readme", str(readme), "--check"]) == 0
    (results / "summary.json").unlink()
    assert study_main(["readme", str(results), "--readme", str(readme)]) == 2
    assert "no summary" in capsys.readouterr().err


def test_all_runs_done_reads_as_such():
    lines = evidence_block({**SUMMARY, "planned_runs": 7}, "docs/results/demo")
    assert any(line.startswith("**Status: all planned runs done.**") for line in lines)
    assert not any(re.search(r"\bof 7 planned", line) for line in lines)
