"""``python -m mrtpo_openrlhf.plot RUN_DIR_or_metrics.jsonl [...] --out curves.png``: training curves.

Each run writes one JSON object per step to ``RUN_DIR/metrics.jsonl`` (``{"step": 1, "reward/format/mean":
0.5, "mrtpo/beta": 0.05, ...}``). By default the figure has one panel per reward (``reward/<name>/mean``),
plus ``mrtpo/replayed_pairs_frac`` and ``mrtpo/replay_share_of_step`` when a run logs them; one line per run.
``--keys`` takes metric names or shell-style patterns (``reward/*/mean``) instead.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path
from typing import Sequence

from mrtpo_openrlhf.metrics import is_finite
from mrtpo_openrlhf.metrics import read_metrics as read_metrics_jsonl

DEFAULT_KEYS = ("reward/*/mean", "mrtpo/replayed_pairs_frac", "mrtpo/replay_share_of_step")
METRICS_FILE = "metrics.jsonl"


class PlotError(ValueError):
    """A missing, empty or malformed metrics file, or nothing to plot."""


def metrics_path(source: str | Path) -> Path:
    """A run folder (its metrics.jsonl) or a metrics JSONL file."""
    path = Path(source).expanduser()
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise PlotError(f"{source}: no such metrics file (expected a run folder with {METRICS_FILE} or a .jsonl file)")
    return path


def read_metrics(path: Path) -> list[dict[str, float]]:
    """Rows of a metrics JSONL (parsed by ``mrtpo_openrlhf.metrics.read_metrics``: a torn last line is skipped), sorted
    by ``step`` (the line order when absent); non-numeric and non-finite values are dropped."""
    try:
        records = read_metrics_jsonl(path)
    except ValueError as exc:
        raise PlotError(str(exc)) from None
    rows = []
    for rec in records:
        if not isinstance(rec, dict):
            raise PlotError(f"{path}: a line is not a JSON object")
        row = {k: float(v) for k, v in rec.items() if not isinstance(v, bool) and is_finite(v)}
        row.setdefault("step", float(len(rows) + 1))
        rows.append(row)
    if not rows:
        raise PlotError(f"{path}: empty metrics file")
    return sorted(rows, key=lambda r: r["step"])


def select_keys(runs: Sequence[Sequence[dict]], patterns: Sequence[str]) -> list[str]:
    """Metric names matching ``patterns`` in any run, in pattern order (names sorted within a pattern)."""
    present = {k for rows in runs for row in rows for k in row if k != "step"}
    keys: list[str] = []
    for pattern in patterns:
        for key in sorted(fnmatch.filter(present, pattern)):
            if key not in keys:
                keys.append(key)
    return keys


def figure(runs: Sequence[Sequence[dict]], labels: Sequence[str], keys: Sequence[str], ncols: int = 3):
    """The matplotlib figure of ``plot_runs`` (Agg backend): one panel per key, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    if not keys:
        raise PlotError("no metric to plot (none of the keys is in any run)")
    ncols = max(1, min(ncols, len(keys)))
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.6 * ncols, 3.2 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for i, rows in enumerate(runs):
            pts = [(r["step"], r[key]) for r in rows if key in r]
            if pts:  # a fixed colour per run, so a run keeps its colour in panels other runs lack
                ax.plot(
                    *zip(*pts), color=f"C{i % 10}", marker="o" if len(pts) < 30 else None, markersize=3, linewidth=1.5
                )
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no "1.5" tick on a 4-step run
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    handles = [Line2D([], [], color=f"C{i % 10}", linewidth=1.5) for i in range(len(runs))]
    fig.legend(handles, list(labels), loc="upper center", ncol=min(len(labels), 6), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94 if nrows == 1 else 0.97))
    return fig


def plot_runs(
    runs: Sequence[Sequence[dict]], labels: Sequence[str], keys: Sequence[str], out: Path, ncols: int = 3
) -> Path:
    """One panel per key, one line per run; saves a PNG (Agg backend)."""
    import matplotlib.pyplot as plt

    fig = figure(runs, labels, keys, ncols)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def run_label(source: str | Path) -> str:
    """A run's default label: its folder name (the file's parent for a metrics.jsonl, else the file stem)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path.resolve().name
    return path.resolve().parent.name if path.name == METRICS_FILE else path.stem


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.plot", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (with metrics.jsonl) or metrics JSONL files")
    p.add_argument("--out", required=True, help="output PNG")
    p.add_argument(
        "--keys", nargs="+", default=None, help=f"metric names or patterns (default: {' '.join(DEFAULT_KEYS)})"
    )
    p.add_argument("--labels", nargs="+", default=None, help="one legend label per run (default: folder names)")
    p.add_argument("--ncols", type=int, default=3)
    args = p.parse_args(argv)
    try:
        if args.labels is not None and len(args.labels) != len(args.runs):
            raise PlotError(f"{len(args.labels)} labels for {len(args.runs)} runs")
        runs = [read_metrics(metrics_path(src)) for src in args.runs]
        labels = args.labels or [run_label(src) for src in args.runs]
        keys = select_keys(runs, args.keys or DEFAULT_KEYS)
        out = plot_runs(runs, labels, keys, Path(args.out).expanduser(), args.ncols)
    except PlotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} ({len(keys)} panels, {len(runs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
