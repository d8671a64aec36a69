"""``study report DIR``: a markdown report with plots from a study folder's runs.

Reads ``<arm>/seed<k>/metrics.jsonl`` (and ``config.json``/``result.json``) under DIR, writes ``report.md``,
``curves.png`` and ``summary.json`` into ``--out`` (default DIR) and, when ``--out`` differs from DIR, copies each
run's small files (metrics, config, command, result) beside the report so the report can be regenerated from them.
The conclusion is computed from the numbers by fixed rules (``claims``), never written by hand.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mrtpo_openrlhf.metrics import first_key, read_metrics

from .config import ARMS
from .stats import Paired, area, mean_band, paired, steps_to

SMALL_FILES = ("metrics.jsonl", "config.json", "command.txt", "result.json", "run.json", "heldout.json")
TOTAL = "total"  # the summed reward (what GRPO optimizes)
LENGTH_KEYS = ("rollout/response_length_mean", "response_length", "rollout/response_length")
STEP_TIME_KEYS = ("timing/step_wall",)  # timing/step_total double-counts (it sums the other timings)
COMPARISONS = [
    ("mrtpo", "gdpo"),
    ("mrtpo", "grpo"),
    ("gdpo", "grpo"),
    ("mrtpo", "mrtpo-shuffle"),
    ("mrtpo", "mrtpo-joint"),
    ("mrtpo-joint", "gdpo"),
    ("mrtpo-shuffle", "gdpo"),
]


class ReportError(ValueError):
    """A study folder with nothing to report; the message says what is missing."""


def load_runs(root: Path) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """{arm: {seed: metric rows}} for every run folder that has a metrics file (finished or not)."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for arm in ARMS:
        for seed_dir in sorted((root / arm).glob("seed*")):
            path = seed_dir / "metrics.jsonl"
            if path.is_file() and seed_dir.name[4:].isdigit():
                rows = read_metrics(path)
                if rows:
                    runs.setdefault(arm, {})[int(seed_dir.name[4:])] = rows
    if not runs:
        raise ReportError(f"{root}: no <arm>/seed<k>/metrics.jsonl found (arms: {', '.join(ARMS)})")
    return runs


def reward_names(runs: dict[str, dict[int, list[dict]]]) -> list[str]:
    names: list[str] = []
    for by_seed in runs.values():
        for rows in by_seed.values():
            for row in rows:
                for key in row:
                    if key.startswith("reward/") and key.endswith("/mean"):
                        name = key[len("reward/") : -len("/mean")]
                        if name not in names:
                            names.append(name)
    return names


def series(rows: list[dict], key: str, steps: int) -> np.ndarray:
    """(steps,) values of ``key`` by step (1-based ``step``), NaN where absent. ``total``: sum of reward means."""
    out = np.full(steps, np.nan)
    for row in rows:
        t = int(row.get("step", 0)) - 1
        if not 0 <= t < steps:
            continue
        if key == TOTAL:
            vals = [v for k, v in row.items() if k.startswith("reward/") and k.endswith("/mean")]
            value = sum(vals) if vals else math.nan
        else:
            value = row.get(key, math.nan)
        out[t] = value if isinstance(value, (int, float)) else math.nan
    return out


def curves(runs, arm: str, key: str, steps: int) -> tuple[list[int], np.ndarray]:
    seeds = sorted(runs.get(arm, {}))
    return seeds, np.array([series(runs[arm][s], key, steps) for s in seeds]).reshape(len(seeds), steps)


def per_seed(runs, arm: str, key: str, steps: int, fn) -> dict[int, float]:
    seeds, c = curves(runs, arm, key, steps)
    return {s: fn(row) for s, row in zip(seeds, c)}


def _last(row: np.ndarray) -> float:
    ok = row[~np.isnan(row)]
    return float(ok[-1]) if ok.size else math.nan


def _fmt(x: float | None, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.{max(0, digits - 2)}f}%" if pct else f"{x:.{digits}f}"


def _signed(x: float) -> str:
    """``+0.051``; a nonzero value that would print as ``±0.000`` keeps two significant digits (``+0.00049``), so an
    interval end that barely excludes zero reads as such."""
    text = f"{x:+.3f}"
    return f"{x:+.2g}" if x != 0 and float(text) == 0 else text


def _interval(low: float, high: float) -> str:
    return f"[{_signed(low)}, {_signed(high)}]"


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def compare(runs, a: str, b: str, key: str, steps: int, fn=area) -> Paired | None:
    if a not in runs or b not in runs:
        return None
    va, vb = per_seed(runs, a, key, steps, fn), per_seed(runs, b, key, steps, fn)
    seeds = sorted(set(va) & set(vb))
    if not seeds:
        return None
    return paired(np.array([va[s] for s in seeds]), np.array([vb[s] for s in seeds]))


def plot(runs, keys: list[str], steps: int, out: Path, titles: dict[str, str] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    x = np.arange(1, steps + 1)
    for ax, key in zip(axes.flat, keys):
        for arm in ARMS:
            if arm not in runs:
                continue
            _, c = curves(runs, arm, key, steps)
            mean, lo, hi = mean_band(c)
            (line,) = ax.plot(x, mean, label=f"{arm} (n={c.shape[0]})", lw=1.6)
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


def claims(runs, names: list[str], steps: int, format_reward: str | None, threshold: float) -> list[dict[str, str]]:
    """The paper's claims checked against this study, each with the numbers behind its verdict."""
    out = []

    def line(p: Paired | None) -> str:
        if p is None:
            return "not run"
        if p.n < 2:
            return f"{p.mean:+.3f} (one seed: no interval; higher in {p.wins}/{p.n})"
        return (
            f"{p.mean:+.3f} (95% t-CI {_interval(p.t_low, p.t_high)}, bootstrap {_interval(p.boot_low, p.boot_high)}, "
            f"higher in {p.wins}/{p.n} seeds)"
        )

    def held(p: Paired | None, want: str) -> str:
        if p is None:
            return "not tested"
        v = p.verdict()
        if v == want:
            return "held"
        if v in ("A > B", "A < B"):
            return "contradicted"
        return "not resolved" if v != "too few seeds" else "too few seeds"

    tok = {
        n: _mean(
            [
                v
                for rows in runs.get("mrtpo", {}).values()
                for r in rows
                if isinstance(v := r.get(f"mrtpo/{n}/tokens_for_80pct"), float)
            ]
        )
        for n in names
    }
    measured = "; ".join(f"{n}: {_fmt(v, 3, pct=True)}" for n, v in tok.items() if not math.isnan(v))
    out.append(
        {
            "claim": "1. Localization: 80% of a reward's distance on few tokens (paper: 26-29% of the tokens on "
            "SQL, 13-15% on tool calling; uniform relevance would need 80%)",
            "verdict": "see numbers",
            "evidence": f"MRTPO arm, replayed pairs during training, tokens for 80%: {measured or 'not measured'}",
        }
    )
    conv = [compare(runs, "mrtpo", "gdpo", TOTAL, steps), compare(runs, "gdpo", "grpo", TOTAL, steps)]
    state = [held(p, "A > B") for p in conv]
    out.append(
        {
            "claim": "2. Rewards rise faster: MRTPO > GDPO > GRPO (area under the summed-reward curve)",
            "verdict": "held"
            if state == ["held", "held"]
            else (
                "contradicted"
                if "contradicted" in state
                else "too few seeds"
                if "too few seeds" in state
                else "not tested"
                if "not tested" in state
                else "not resolved"
            ),
            "evidence": f"MRTPO-GDPO {line(conv[0])}; GDPO-GRPO {line(conv[1])}",
        }
    )
    if format_reward:
        key = f"reward/{format_reward}/mean"
        reach = {arm: [steps_to(row, threshold) for row in curves(runs, arm, key, steps)[1]] for arm in runs}
        txt = "; ".join(f"{arm}: {', '.join(str(s) if s else f'>{steps}' for s in v)}" for arm, v in reach.items())
        out.append(
            {
                "claim": f"2b. Steps to {format_reward} >= {threshold} (3-step trailing mean), per seed",
                "verdict": "see numbers",
                "evidence": txt,
            }
        )
    shuf = compare(runs, "mrtpo", "mrtpo-shuffle", TOTAL, steps)
    out.append(
        {
            "claim": "3a. Shuffling the weights within the response removes the gain (MRTPO > shuffle)",
            "verdict": held(shuf, "A > B"),
            "evidence": f"MRTPO-shuffle {line(shuf)}",
        }
    )
    joint = compare(runs, "mrtpo", "mrtpo-joint", TOTAL, steps)
    out.append(
        {
            "claim": "3b. One shared profile (joint) is weaker than per-reward placement (MRTPO > joint)",
            "verdict": held(joint, "A > B"),
            "evidence": f"MRTPO-joint {line(joint)}",
        }
    )
    frac = (
        _mean([_mean(list(per_seed(runs, "mrtpo", "mrtpo/replayed_pairs_frac", steps, area).values()))])
        if "mrtpo" in runs
        else math.nan
    )
    ratio = step_time_ratio(runs, steps)
    out.append(
        {
            "claim": "4. Cost: 12-21% of (response, reward) pairs replayed; a step 10-20% longer than GDPO",
            "verdict": "see numbers",
            "evidence": f"replayed pairs {_fmt(frac, 3, pct=True)} (steps with beta > 0 included); "
            f"MRTPO/GDPO mean step time {_fmt(ratio, 2)}",
        }
    )
    lk = length_key(runs)
    length = compare(runs, "mrtpo", "gdpo", lk, steps, _last) if lk else None
    out.append(
        {
            "claim": "5. Shorter responses than GDPO (final-step mean length, MRTPO - GDPO, tokens)",
            "verdict": held(length, "A < B"),
            "evidence": line(length),
        }
    )
    return out


def length_key(runs) -> str | None:
    for by_seed in runs.values():
        for rows in by_seed.values():
            key = first_key(rows[-1], *LENGTH_KEYS)
            if key:
                return key
    return None


def step_time_ratio(runs, steps: int) -> float:
    """Mean step time of MRTPO over GDPO, both in this study (same machine, runs interleaved by seed)."""

    def mean_time(arm):
        vals = []
        for rows in runs.get(arm, {}).values():
            for row in rows[1:]:  # the first step carries JIT/warm-up costs
                key = first_key(row, *STEP_TIME_KEYS)
                if key:
                    vals.append(row[key])
        return _mean(vals)

    return mean_time("mrtpo") / mean_time("gdpo") if "mrtpo" in runs and "gdpo" in runs else math.nan


def arm_table(runs, names: list[str], steps: int, format_reward: str | None, threshold: float) -> list[str]:
    lk = length_key(runs)
    head = ["arm", "seeds"] + [f"{n} final" for n in names + [TOTAL]] + [f"{TOTAL} AUC"]
    if format_reward:
        head.append(f"steps to {format_reward}>={threshold}")
    head += ["response length (final)", "replayed pairs", "replay share of step", "step time (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm in ARMS:
        if arm not in runs:
            continue
        cells = [arm, str(len(runs[arm]))]
        for n in names + [TOTAL]:
            key = TOTAL if n == TOTAL else f"reward/{n}/mean"
            vals = list(per_seed(runs, arm, key, steps, _last).values())
            cells.append(_fmt(_mean(vals), 2))
        cells.append(_fmt(_mean(list(per_seed(runs, arm, TOTAL, steps, area).values())), 3))
        if format_reward:
            reach = [steps_to(r, threshold) for r in curves(runs, arm, f"reward/{format_reward}/mean", steps)[1]]
            got = [r for r in reach if r]
            cells.append(
                f"{_mean(got):.1f} ({len(got)}/{len(reach)} reached)" if got else f"not reached (0/{len(reach)})"
            )
        cells.append(_fmt(_mean(list(per_seed(runs, arm, lk, steps, _last).values())), 1) if lk else "–")
        cells.append(
            _fmt(_mean(list(per_seed(runs, arm, "mrtpo/replayed_pairs_frac", steps, area).values())), 3, pct=True)
        )
        cells.append(
            _fmt(_mean(list(per_seed(runs, arm, "mrtpo/replay_share_of_step", steps, area).values())), 3, pct=True)
        )
        times = [row[k] for rows in runs[arm].values() for row in rows[1:] if (k := first_key(row, *STEP_TIME_KEYS))]
        cells.append(_fmt(_mean(times), 1))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def localization_table(runs, names: list[str], steps: int) -> list[str]:
    lines = [
        "| arm | reward | tokens for 80% of the distance | top-20% tokens' share | steps measured |",
        "|---|---|---|---|---|",
    ]
    for arm in ("mrtpo", "mrtpo-shuffle", "mrtpo-joint"):
        for n in names:
            tok = [
                v
                for rows in runs.get(arm, {}).values()
                for r in rows
                if isinstance(v := r.get(f"mrtpo/{n}/tokens_for_80pct"), float)
            ]
            top = [
                v
                for rows in runs.get(arm, {}).values()
                for r in rows
                if isinstance(v := r.get(f"mrtpo/{n}/top20_share"), float)
            ]
            if tok:
                lines.append(
                    f"| {arm} | {n} | {_fmt(_mean(tok), 3, pct=True)} | {_fmt(_mean(top), 3, pct=True)} | {len(tok)} |"
                )
    return lines


def checkpoint_localization_section(root: Path) -> list[str]:
    """The diagnose summaries of ``study localize`` (``<root>/localization/<label>/summary.json``), one row per
    (model, reward group); span ratio = the span's share of the distance / its share of the tokens."""
    from .localize import HEATMAP, load_localization

    found = load_localization(root)
    if not found:
        return []
    lines = [
        "## Localization on final checkpoints (`study localize`: diagnose on the same sampled prompts)",
        "",
        "| model | reward | replayed / pairs | tokens for 80% of the distance | top-20% tokens' share | "
        "span: distance share / token share = ratio |",
        "|---|---|---|---|---|---|",
    ]
    for name, summary in found.items():
        for reward, row in sorted(summary.get("rewards", {}).items()):
            spans = "; ".join(
                f"{kind}: {_fmt(sp['distance_share'], 3, pct=True)} / {_fmt(sp['token_share'], 3, pct=True)} = "
                f"{_fmt(sp['ratio'], 2)}"
                for kind, sp in sorted(row.get("spans", {}).items())
            )
            lines.append(
                f"| {name} | {reward} | {row['replayed']}/{row['pairs']} | "
                f"{_fmt(row['tokens_for_80pct'], 3, pct=True)} | {_fmt(row['top20_share'], 3, pct=True)} | "
                f"{spans or '–'} |"
            )
    pictures = [name for name in found if (root / "localization" / name / HEATMAP).is_file()]
    if pictures:
        lines += ["", "Heatmaps of q (the top of each `diagnose` page; darker = more of that reward's distance):", ""]
        lines += [f"**{name}**\n\n![{name} heatmap](localization/{name}/{HEATMAP})\n" for name in pictures]
    return lines + [""]


def probe_section(probe_files: Sequence[Path]) -> list[str]:
    from .probe import format_table

    out = []
    for path in probe_files:
        out += [format_table(json.loads(Path(path).read_text())), ""]
    return out


def write_report(
    root: Path,
    out: Path | None = None,
    probe_files: Sequence[Path] = (),
    format_reward: str | None = None,
    threshold: float = 0.8,
    extra_md: str = "",
) -> Path:
    root = Path(root).resolve()
    out = Path(out or root).resolve()
    study_file = root / "study.json"
    folder = root  # the study or results folder itself (localization/ lives here, not under runs/)
    if (root / "runs").is_dir() and not any((root / arm).is_dir() for arm in ARMS):
        root = root / "runs"  # a committed results folder: the runs' copies live under runs/
    runs = load_runs(root)
    study = json.loads(study_file.read_text()) if study_file.is_file() else {}
    steps = int(study.get("steps") or max(len(r) for by in runs.values() for r in by.values()))
    names = reward_names(runs)
    out.mkdir(parents=True, exist_ok=True)
    if out / "runs" != root and out != root:
        for arm, by_seed in runs.items():
            for seed in by_seed:
                src, dst = root / arm / f"seed{seed}", out / "runs" / arm / f"seed{seed}"
                dst.mkdir(parents=True, exist_ok=True)
                for name in SMALL_FILES:
                    if (src / name).is_file():
                        shutil.copy2(src / name, dst / name)
        if study_file.is_file() and study_file != out / "study.json":
            shutil.copy2(study_file, out / "study.json")
    if out != folder:
        from .localize import HEATMAP, SMALL_OUTPUTS

        for src in (folder / "localization").glob("*"):
            for name in (*SMALL_OUTPUTS, HEATMAP):
                if (src / name).is_file():
                    (out / "localization" / src.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / name, out / "localization" / src.name / name)
    lk = length_key(runs)
    keys = [f"reward/{n}/mean" for n in names] + [TOTAL] + ([lk] if lk else [])
    titles = {f"reward/{n}/mean": f"reward: {n}" for n in names}
    titles[TOTAL] = "summed reward"
    plot(runs, keys, steps, out / "curves.png", titles)
    results = {}
    done = {arm: sorted(by) for arm, by in runs.items()}
    incomplete = [f"{arm} seed {s}" for arm, by in runs.items() for s, rows in by.items() if len(rows) < steps]
    for a, b in COMPARISONS:
        for n in names + [TOTAL]:
            p = compare(runs, a, b, TOTAL if n == TOTAL else f"reward/{n}/mean", steps)
            if p:
                results[f"{a} - {b} | {n}"] = asdict(p)
    verdicts = claims(runs, names, steps, format_reward, threshold)
    md = [f"# Study: {study.get('name', root.name)}", ""]
    if study:
        md += ["Config: " + ", ".join(f"`{k}={v}`" for k, v in study.items() if k not in ("extra_args", "env")), ""]
    planned = [(a, s) for s in study.get("seeds", []) for a in study.get("arms", [])]
    missing = [f"{a} seed {s}" for a, s in planned if s not in done.get(a, [])]
    if missing:
        md += [
            f"**Partial study: {len(planned) - len(missing)} of {len(planned)} planned runs done.** Not yet run: "
            f"{', '.join(missing)}. Verdicts below use only the runs found.",
            "",
        ]
    md += [
        "Runs found: " + "; ".join(f"{a}: seeds {s}" for a, s in done.items()) + ".",
        f"Incomplete runs (fewer than {steps} steps logged): {', '.join(incomplete) or 'none'}.",
        "",
    ]
    if extra_md:
        md += [extra_md, ""]
    if probe_files:
        md += ["## What the base model can learn (probe at step 0)", ""] + probe_section(probe_files)
    md += [
        "## Curves",
        "",
        "![curves](curves.png)",
        "",
        "## Per arm (mean over seeds; final = last logged step; AUC = mean over steps)",
        "",
    ]
    md += arm_table(runs, names, steps, format_reward, threshold) + [""]
    md += [
        "## Paired comparisons (A - B, area under the curve, paired by seed)",
        "",
        "| A - B | reward | mean | 95% t-interval | bootstrap 95% | A higher in |",
        "|---|---|---|---|---|---|",
    ]
    for label, p in results.items():
        pair, n = label.split(" | ")
        t_ci, boot = (
            (_interval(p["t_low"], p["t_high"]), _interval(p["boot_low"], p["boot_high"])) if p["n"] > 1 else ("–", "–")
        )
        md.append(f"| {pair} | {n} | {p['mean']:+.3f} | {t_ci} | {boot} | {p['wins']}/{p['n']} |")
    md += ["", "## Localization during training (replayed pairs, MRTPO arms)", ""]
    md += localization_table(runs, names, steps)
    md += [""] + checkpoint_localization_section(out)
    md += [
        "",
        "## The paper's claims against this study",
        "",
        "Verdicts follow fixed rules: *held* when the paired 95% t-interval over seeds excludes zero in the "
        "claimed direction, *contradicted* when it excludes zero in the other, *not resolved* otherwise.",
        "",
        "| claim | verdict | evidence |",
        "|---|---|---|",
    ]
    md += [f"| {c['claim']} | {c['verdict']} | {c['evidence']} |" for c in verdicts]
    tested = sum(1 for p in results.values() if p["n"] > 1)
    if tested:
        md += [
            "",
            f"What these verdicts do not show: the report makes {tested} paired comparisons with an interval; at 95% "
            f"about {0.05 * tested:.1f} of them would exclude zero by chance alone, so a single *held* whose interval "
            "end lies near zero is weak evidence, and *not resolved* means this study cannot tell, not that the "
            "arms are equal.",
        ]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / "summary.json").write_text(
        json.dumps(
            {"steps": steps, "rewards": names, "runs": done, "comparisons": results, "claims": verdicts}, indent=2
        )
        + "\n"
    )
    return out / "report.md"
