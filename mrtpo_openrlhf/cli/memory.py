"""What used a run's memory: ``python -m mrtpo_openrlhf.cli.memory RUN_FOLDER [--plot memory.png]``.

Reads ``memory.jsonl`` (written each second by the CPU launcher, ``launch/memory.py``) and prints the peak, its
make-up by process role, and each phase's peak by role; ``--plot`` draws the PSS of each role over time, stacked,
with the system's MemAvailable and the phases shaded. A run started with ``MRTPO_CPU_PEAK_STACKS=DIR`` (the folder
``--stacks`` reads, default ``RUN_FOLDER/peak_stacks``) also recorded where in the code each process peaked
(``cpu/peak_stack.py``): the largest processes' peaks are printed with the innermost frames of their stacks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from ..cpu.peak_stack import read_peaks
from ..launch.memory import PHASES, read_trace, roles_table


def table(rows: List[dict]) -> List[str]:
    peak = max(rows, key=lambda r: r["pss_gib"])
    by_phase = roles_table(rows)
    roles = list(peak["by_role_gib"])[:7]
    lines = [
        f"peak {peak['pss_gib']:.2f} GiB PSS at {peak['t']:.0f}s (step {peak['step']}, {peak['phase']}); "
        f"MemAvailable then {peak['available_gib']:.1f} GiB, lowest {min(r['available_gib'] for r in rows):.1f}",
        "",
        f"{'phase':<11}" + "".join(f"{r[:18]:>20}" for r in roles) + f"{'sum of the phase peak':>24}",
    ]
    for phase in [p for p in PHASES if p in by_phase]:
        peak_of_phase = max(r["pss_gib"] for r in rows if r["phase"] == phase)
        cells = "".join(f"{by_phase[phase].get(r, 0.0):>20.2f}" for r in roles)
        lines.append(f"{phase:<11}{cells}{peak_of_phase:>24.2f}")
    lines.append("(GiB; each role's column is its own peak within the phase)")
    return lines


def stacks(folder: Path, processes: int = 4, frames: int = 8) -> List[str]:
    """The ``processes`` largest peaks recorded under ``folder``, each with its innermost ``frames`` frames."""
    lines = []
    for record in read_peaks(folder)[:processes]:
        name = record.get("name") or record["file"]
        lines.append(f"{name} (pid {record.get('pid')}): peak RSS {record['peak_rss_bytes'] / 2**30:.2f} GiB at "
                     f"{record.get('at_s', 0):.0f}s, in")  # fmt: skip
        lines += [f"    {frame}" for frame in record.get("stack", [])[-frames:]]
    return lines


def plot(rows: List[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    totals: dict = {}
    for r in rows:
        for role, gib in r["by_role_gib"].items():
            totals[role] = max(totals.get(role, 0.0), gib)
    roles = sorted(totals, key=lambda k: -totals[k])
    main, rest = roles[:6], roles[6:]
    series = [[r["by_role_gib"].get(role, 0.0) for r in rows] for role in main]
    if rest:
        series.append([sum(r["by_role_gib"].get(role, 0.0) for role in rest) for r in rows])
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.stackplot(t, series, labels=main + (["other"] if rest else []), alpha=0.85)
    ax.plot(t, [r["available_gib"] for r in rows], color="black", lw=1, label="MemAvailable")
    shades = {"generation": "#dde", "experience": "#ede", "training": "#eed", "sync+save": "#dee"}
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i]["phase"] != rows[start]["phase"]:
            color = shades.get(rows[start]["phase"])
            if color:
                ax.axvspan(rows[start]["t"], rows[i - 1]["t"], color=color, zorder=0, lw=0)
            start = i
    ax.set_xlabel("seconds since the Ray head started")
    ax.set_ylabel("GiB")
    ax.set_title("PSS by process role (stacked); shaded: generation, experience, training, sync+save")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.cli.memory", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run folder holding memory.jsonl (or the file itself)")
    parser.add_argument("--plot", type=Path, help="also draw the trace into this PNG")
    parser.add_argument("--stacks", type=Path, help="peak stacks folder (default: RUN_FOLDER/peak_stacks, if there)")
    args = parser.parse_args(argv)
    path = args.run / "memory.jsonl" if args.run.is_dir() else args.run
    if not path.is_file():
        print(f"memory: {path}: no such file (the CPU launcher writes it in each run folder)", file=sys.stderr)
        return 2
    try:
        rows = read_trace(path)
    except ValueError as err:
        print(f"memory: {path}: not a memory trace ({err})", file=sys.stderr)
        return 2
    if not rows:
        print(f"memory: {path}: empty (the run ended before its first sample)", file=sys.stderr)
        return 2
    print("\n".join(table(rows)))
    folder = args.stacks or (path.parent / "peak_stacks")
    if folder.is_dir():
        print(f"\nwhere each process peaked ({folder}):")
        print("\n".join(stacks(folder)))
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
