"""The training curves (``curves.png``)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config import ARMS
from ..stats import mean_band
from .runs import TOTAL, Study, curves, length_key


def plot(
    runs, keys: list[str], steps: int, out: Path, titles: dict[str, str] | None = None, base_of=lambda arm, seed: None
) -> Path:
    """Mean curve per arm with a 95% t-band across seeds. ``base_of(arm, seed)``: the base model a run started
    from; when the runs have several, each arm has a curve per base (one colour per arm, one line style per base)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    x = np.arange(1, steps + 1)
    bases = sorted({base_of(arm, seed) for arm, by in runs.items() for seed in by}, key=str)
    styles = dict(zip(bases, ["-", "--", ":", "-."] * len(bases)))
    for ax, key in zip(axes.flat, keys):
        for i, arm in enumerate(a for a in ARMS if a in runs):
            for base in bases:
                sub = {arm: {s: r for s, r in runs[arm].items() if base_of(arm, s) == base}}
                if not sub[arm]:
                    continue
                _, c = curves(sub, arm, key, steps)
                mean, lo, hi = mean_band(c)
                label = f"{arm} (n={c.shape[0]})" if len(bases) == 1 else f"{arm}, base {base or '?'} (n={c.shape[0]})"
                kw = {} if len(bases) == 1 else {"color": f"C{i}", "ls": styles[base]}
                (line,) = ax.plot(x, mean, label=label, lw=1.6, **kw)
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
        ax.set_title((titles or {}).get(key, key), fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("mean across seeds, band: 95% t-interval across seeds", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_curves(study: Study, out: Path) -> None:
    lk = length_key(study.runs)
    keys = [f"reward/{n}/mean" for n in study.names] + [TOTAL] + ([lk] if lk else [])
    titles = {f"reward/{n}/mean": f"reward: {n}" for n in study.names}
    titles[TOTAL] = "summed reward"
    legend_base = lambda arm, seed: (study.base_short(arm, seed) or "")[:8] or None  # noqa: E731
    plot(study.runs, keys, study.steps, out / "curves.png", titles, legend_base)
