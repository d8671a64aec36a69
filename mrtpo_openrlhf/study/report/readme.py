"""The README's evidence block of a study, generated from its committed ``summary.json``, never written by hand.

The block sits between two markers in the README::

    <!-- study-evidence:tool-smollm2-cpu:begin -->
    ...
    <!-- study-evidence:tool-smollm2-cpu:end -->

``study readme DIR`` rewrites what lies between them from ``DIR/summary.json`` (which ``study report`` writes);
``--check`` only says whether the README is in sync (a test runs it, so the README cannot drift from the report).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .text import _interval, _p, _signed


class ReadmeError(ValueError):
    """The README or the summary cannot be used (no markers, no summary)."""


def markers(name: str) -> tuple[str, str]:
    return f"<!-- study-evidence:{name}:begin -->", f"<!-- study-evidence:{name}:end -->"


def _seeds(seeds: list[int]) -> str:
    """[1, 2, 3, 5] -> '1-3, 5'."""
    spans: list[list[int]] = []
    for s in sorted(seeds):
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"


def evidence_block(summary: dict[str, Any], results: str) -> list[str]:
    """The block's lines (markers excluded) for the study whose summary is ``summary``, committed at ``results``."""
    runs: dict[str, list[int]] = summary["runs"]
    done = sum(len(s) for s in runs.values())
    planned = summary.get("planned_runs") or done
    status = "all planned runs done" if done >= planned else f"{done} of {planned} planned runs done"
    lines = [
        f"*Generated from [`{results}/summary.json`]({results}/summary.json) by `python -m mrtpo_openrlhf.cli.study "
        f"readme {results}`; the [report]({results}/report.md) has every number.*",
        "",
        f"**Status: {status}.** Runs committed, by arm: "
        + "; ".join(f"`{arm}` seeds {_seeds(seeds)}" for arm, seeds in runs.items())
        + ".",
        "",
        f"| declared comparison ({summary['primary_endpoint']}, A - B paired by seed) | seeds | mean | 95% t-interval "
        "| sign-flip p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in summary["declared"].items():
        if r is None:
            lines.append(f"| {name} | 0 | – | – | – | – | not run |")
            continue
        seeds = f"{r['n']} of {r['planned']}" if r.get("planned") else str(r["n"])
        holm = _p(r["p_holm"]) if r.get("p_holm") is not None else "–"
        t = _interval(r["t_low"], r["t_high"]) if r.get("t_low") is not None else "–"
        lines.append(
            f"| {name} | {seeds} | {_signed(r['mean'])} | {t} | {_p(r['p_signflip'])} | {holm} | {r['verdict']} |"
        )
    lines += ["", "| the paper's claim | verdict here |", "|---|---|"]
    lines += [f"| {c['claim']} | {c['verdict']} |" for c in summary["claims"]]
    return lines


def sync_readme(readme: Path, results_dir: Path, check: bool = False) -> bool:
    """Rewrite ``readme``'s evidence block of the study at ``results_dir`` from its summary.json. Returns whether
    the block changed (with ``check``: whether it would; the file is left alone)."""
    summary_file = results_dir / "summary.json"
    if not summary_file.is_file():
        raise ReadmeError(f"{summary_file}: no summary (run `study report {results_dir}` first)")
    summary = json.loads(summary_file.read_text(encoding="utf-8"))
    name = summary.get("name") or results_dir.name
    begin, end = markers(name)
    text = readme.read_text(encoding="utf-8")
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ReadmeError(f"{readme}: needs one line {begin} and, below it, one line {end}")
    try:
        shown = results_dir.resolve().relative_to(readme.resolve().parent).as_posix()
    except ValueError:
        shown = results_dir.as_posix()
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = head + begin + "\n" + "\n".join(evidence_block(summary, shown)) + "\n" + end + tail
    changed = new != text
    if changed and not check:
        readme.write_text(new, encoding="utf-8")
    return changed
