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
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from mrtpo_openrlhf.core.placements import NO_REPLAY, get_placement
from mrtpo_openrlhf.metrics import first_key, read_metrics
from mrtpo_openrlhf.paths import REPO_ROOT

from .config import ARMS, ablation_arms, method_arm
from .stats import (
    ALPHA,
    BOOTSTRAP_MIN_SEEDS,
    Paired,
    area,
    heldout_noise,
    holm,
    mean_band,
    noise_floor,
    paired,
    steps_to,
    t975,
    t_interval,
)

# The package folder, by which a recorded absolute path is shown inside the checkout.
PACKAGE_DIR = Path(__file__).resolve().parents[1].name
SMALL_FILES = ("metrics.jsonl", "config.json", "command.txt", "result.json", "run.json", "heldout.json")
TOTAL = "total"  # the summed reward (what GRPO optimizes)
LENGTH_KEYS = ("rollout/response_length_mean", "response_length", "rollout/response_length")
STEP_TIME_KEYS = ("timing/step_wall",)  # timing/step_total double-counts (it sums the other timings)


def default_declared() -> list[tuple[str, str]]:
    """The declared comparisons by default (claims 2, 3a, 3b), Holm-adjusted together: the method against GDPO, GDPO
    against GRPO, the method against each other placement's arm (``core.placements``: shuffle, joint)."""
    m = method_arm()
    return [(m, "gdpo"), ("gdpo", "grpo"), *((m, ab) for ab in ablation_arms())]


def exploratory_comparisons() -> list[tuple[str, str]]:
    """The comparisons described besides the declared ones; each placement's arm against the method and GDPO."""
    m, ablations = method_arm(), ablation_arms()
    # (the ablations against GDPO last to first: the order the committed reports were written in)
    return [(m, "gdpo"), (m, "grpo"), ("gdpo", "grpo"), *((m, ab) for ab in ablations)] + [
        (ab, "gdpo") for ab in reversed(ablations)
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


# ------------------------------------------------------------------------------------------- run files
@dataclass
class Study:
    """Everything the report reads: metrics by run, each run's small JSON files, the config as run."""

    root: Path  # the folder holding <arm>/seed<k>/
    folder: Path  # the study or results folder (prompts/, localization/)
    runs: dict[str, dict[int, list[dict[str, Any]]]]
    files: dict[str, dict[int, dict[str, Any]]]  # arm -> seed -> {"run", "heldout", "result", "config"} or None
    config: dict[str, Any]
    steps: int
    names: list[str]

    def file(self, arm: str, seed: int, name: str) -> dict[str, Any] | None:
        return self.files.get(arm, {}).get(seed, {}).get(name)

    def cpu_label(self, arm: str, seed: int) -> str | None:
        """The CPU the run recorded (``run.json`` provenance), short: ``Intel Xeon``, ``AMD EPYC``."""
        model = ((self.file(arm, seed, "run") or {}).get("provenance") or {}).get("cpu_model")
        if not model:
            return None
        short = model.replace("(R)", "").replace("(TM)", "").split(" CPU")[0].split("(")[0]
        return " ".join(w for w in short.split() if w != "Processor") or model

    def base_weights(self, arm: str, seed: int) -> str | None:
        """The sha256 of the weights the run started from (``config.json`` ``base_model``), when recorded."""
        return ((self.file(arm, seed, "config") or {}).get("base_model") or {}).get("weights_sha256")

    def base_short(self, arm: str, seed: int) -> str | None:
        """``base_weights`` as the report prints it (12 hex digits)."""
        sha = self.base_weights(arm, seed)
        return sha[:12] if sha else None

    @property
    def has_heldout(self) -> bool:
        return any(f.get("heldout") for by in self.files.values() for f in by.values())


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def load_study(root: Path, folder: Path, config: dict[str, Any]) -> Study:
    runs = load_runs(root)
    files = {
        arm: {
            seed: {
                name: _read_json(root / arm / f"seed{seed}" / f"{name}.json")
                for name in ("run", "heldout", "result", "config")
            }
            for seed in by
        }
        for arm, by in runs.items()
    }
    steps = int(config.get("steps") or max(len(r) for by in runs.values() for r in by.values()))
    return Study(root, folder, runs, files, config, steps, reward_names(runs))


def parse_comparisons(text: str, flag: str = "--comparisons") -> list[tuple[str, str]]:
    """``a:b,c:d`` -> [(a, b), (c, d)]; each arm one of ``ARMS``."""
    out = []
    for item in [x.strip() for x in str(text).split(",") if x.strip()]:
        a, sep, b = item.partition(":")
        if not sep or a not in ARMS or b not in ARMS or a == b:
            raise ReportError(f"{flag} {item!r}: give A:B with two different arms of {', '.join(ARMS)}")
        out.append((a, b))
    if not out:
        raise ReportError(f"{flag}: no comparison given")
    return out


def planned_seeds(config: dict[str, Any], a: str, b: str) -> list[int]:
    """The seeds the config plans for comparison A - B: its ``comparison_seeds`` entry, else every seed planned
    for both arms (``seeds``, narrowed by ``arm_seeds``); none for an arm it lacks."""
    seeds = config.get("seeds", [])
    arms = config.get("arms", [])
    if f"{a}:{b}" in config.get("comparison_seeds", {}):
        return sorted(config["comparison_seeds"][f"{a}:{b}"])

    def of(arm: str) -> list[int]:
        return config.get("arm_seeds", {}).get(arm, seeds) if arm in arms else []

    return [s for s in seeds if s in of(a) and s in of(b)]


# the keys of a study config that say what is run and compared, not how a run trains: an amended plan
# (``study report --config``) may change these and nothing else
PLAN_KEYS = ("seeds", "arm_seeds", "comparisons", "comparison_seeds")


def amended_plan(config_file: Path, as_run: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study config at ``config_file`` (TOML, validated) and the plan keys in which it differs from
    ``as_run`` (the runs' ``study.json``); any other difference is an error, since its runs would not be the
    runs the config describes."""
    from .config import ConfigError, load_config

    try:
        plan = load_config(config_file).to_dict()
    except ConfigError as exc:
        raise ReportError(f"--config: {exc}") from None
    if not as_run:
        raise ReportError(f"--config {config_file}: the study folder has no study.json to check it against")
    other = sorted(k for k in set(plan) | set(as_run) if k not in PLAN_KEYS and plan.get(k) != as_run.get(k))
    if other:
        shown = "; ".join(f"{k}: {plan.get(k)!r} vs {as_run.get(k)!r} as run" for k in other)
        raise ReportError(
            f"--config {config_file} differs from the runs' study.json beyond the plan keys {', '.join(PLAN_KEYS)}: "
            f"{shown}"
        )
    return plan, [k for k in PLAN_KEYS if plan.get(k, {}) != as_run.get(k, {})]


def _paired_record(p: Paired | None) -> dict[str, Any] | None:
    """``summary.json``'s record of a comparison (``planned`` only where the config says it)."""
    if p is None:
        return None
    record = asdict(p)
    if record["planned"] is None:
        record.pop("planned")
    return record


def declared_comparisons(config: dict[str, Any], given: str | None) -> tuple[list[tuple[str, str]], str]:
    """The declared comparisons and where they came from: ``--comparisons``, else the config's ``comparisons``
    (a list of "a:b" or a string), else ``default_declared()``."""
    if given:
        return parse_comparisons(given), "--comparisons"
    raw = config.get("comparisons")
    if raw:
        text = raw if isinstance(raw, str) else ",".join(x if isinstance(x, str) else ":".join(x) for x in raw)
        return parse_comparisons(text, "study.json comparisons"), "the config (study.json `comparisons`)"
    return default_declared(), "the report's default"


def pair_problem(study: Study, a: str, b: str, seed: int) -> str | None:
    """Why runs (a, seed) and (b, seed) must not be paired: another training path, dtype or base model (its
    weights' sha256 in ``config.json``); None: pair them. Runs without provenance are paired and reported as such."""
    ra, rb = study.file(a, seed, "run") or {}, study.file(b, seed, "run") or {}
    pa, pb = ra.get("provenance"), rb.get("provenance")
    problems = []
    if pa and pb and pa.get("training_path") != pb.get("training_path"):
        problems.append(f"training path {pa.get('training_path')} vs {pb.get('training_path')}")
    elif bool(pa) != bool(pb):
        problems.append(f"provenance recorded for {a if pa else b} only")
    da, db = ra.get("cpu_dtype"), rb.get("cpu_dtype")
    if da and db and da != db:
        problems.append(f"dtype {da} vs {db}")
    wa, wb = study.base_weights(a, seed), study.base_weights(b, seed)
    if wa and wb and wa != wb:
        problems.append(f"base model weights {wa[:12]} vs {wb[:12]}")
    return "; ".join(problems) or None


def exclusions(
    study: Study, pairs: Sequence[tuple[str, str]], config: dict[str, Any] | None = None
) -> dict[tuple[str, str, int], str]:
    """(a, b, seed) -> why that seed's runs are not paired: ``pair_problem``, or a seed outside the config's
    ``comparison_seeds`` for A - B (run for another comparison only)."""
    out = {}
    chosen = (config or {}).get("comparison_seeds", {})
    for a, b in dict.fromkeys(pairs):
        for seed in sorted(set(study.runs.get(a, {})) & set(study.runs.get(b, {}))):
            why = pair_problem(study, a, b, seed)
            if f"{a}:{b}" in chosen and seed not in chosen[f"{a}:{b}"]:
                why = "; ".join(filter(None, [why, f"not among the seeds the plan gives {a} - {b} (comparison_seeds)"]))
            if why:
                out[(a, b, seed)] = why
    return out


# ------------------------------------------------------------------------------------------- endpoints
@dataclass(frozen=True)
class Endpoint:
    """What is compared: ``heldout`` (the final checkpoint on unseen prompts), ``auc`` (mean over training steps)
    or ``final`` (the last training step), of ``name`` (a reward, ``total``, or ``length``)."""

    kind: str
    name: str

    def label(self) -> str:
        what = {TOTAL: "summed reward", LENGTH: "response length (tokens)"}.get(self.name, self.name)
        return {"heldout": f"held-out {what}", "auc": f"{what}, training AUC", "final": f"{what}, final step"}[
            self.kind
        ]


LENGTH = "length"


def _metric_key(study: Study, name: str) -> str | None:
    if name == LENGTH:
        return length_key(study.runs)
    return TOTAL if name == TOTAL else f"reward/{name}/mean"


def endpoint_values(study: Study, arm: str, ep: Endpoint) -> dict[int, float]:
    """Per seed, the endpoint's value for ``arm`` (NaN where the run has no such value)."""
    if ep.kind == "heldout":
        out = {}
        for seed in study.runs.get(arm, {}):
            h = study.file(arm, seed, "heldout")
            if not h:
                out[seed] = math.nan
            elif ep.name == TOTAL:
                out[seed] = float(h["total"])
            elif ep.name == LENGTH:
                out[seed] = float(h.get("mean_response_tokens", math.nan))
            else:
                out[seed] = float(h.get("rewards", {}).get(ep.name, math.nan))
        return out
    key = _metric_key(study, ep.name)
    if key is None:
        return {}
    return per_seed(study.runs, arm, key, study.steps, area if ep.kind == "auc" else _last)


def _seed_noise(study: Study, a: str, b: str, seeds: Sequence[int], ep: Endpoint) -> float:
    """The within-run noise floor of one seed's A - B (``stats.noise_floor`` / ``stats.heldout_noise``)."""
    if ep.kind in ("auc", "final"):
        key = _metric_key(study, ep.name)
        ca = [series(study.runs[a][s], key, study.steps) for s in seeds]
        cb = [series(study.runs[b][s], key, study.steps) for s in seeds]
        return noise_floor(ca, cb, ep.kind)
    per = []
    for s in seeds:
        ha, hb = study.file(a, s, "heldout"), study.file(b, s, "heldout")
        if ep.name == TOTAL:
            per.append(heldout_noise(ha.get("per_prompt_total", []), hb.get("per_prompt_total", [])))
        elif ep.name != LENGTH:  # a 0/1 reward: the binomial standard error over the scored responses
            va, vb = (h.get("rewards", {}).get(ep.name, math.nan) for h in (ha, hb))
            na, nb = max(1, ha.get("responses", 1)), max(1, hb.get("responses", 1))
            per.append(math.sqrt(va * (1 - va) / na + vb * (1 - vb) / nb))
    per = [x for x in per if not math.isnan(x)]
    return math.sqrt(float(np.mean(np.square(per)))) if per else math.nan


def compare(study: Study, a: str, b: str, ep: Endpoint, excluded=None) -> Paired | None:
    """A - B paired by seed on ``ep``; seeds in ``excluded`` (``exclusions``) are left out."""
    if a not in study.runs or b not in study.runs:
        return None
    va, vb = endpoint_values(study, a, ep), endpoint_values(study, b, ep)
    seeds = [
        s
        for s in sorted(set(va) & set(vb))
        if (a, b, s) not in (excluded or {}) and not (math.isnan(va[s]) or math.isnan(vb[s]))
    ]
    if not seeds:
        return None
    p = paired(np.array([va[s] for s in seeds]), np.array([vb[s] for s in seeds]))
    p.noise = _seed_noise(study, a, b, seeds, ep)
    return p


def primary_endpoint(study: Study) -> Endpoint:
    return Endpoint("heldout" if study.has_heldout else "auc", TOTAL)


def _p(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "–"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def _sd(p: Paired) -> float:
    """The seed-to-seed sd of the difference, back from the t-interval."""
    if p.n < 2 or math.isnan(p.t_high):
        return math.nan
    return (p.t_high - p.mean) * math.sqrt(p.n) / t975(p.n - 1)


def comparison_rows(results: dict[str, Paired], with_holm: bool, alpha: float, with_verdict: bool = True) -> list[str]:
    """A markdown table of paired comparisons; ``with_verdict`` False for secondary ones, which describe and
    never decide (no verdict column)."""
    boot = any(p.n >= BOOTSTRAP_MIN_SEEDS for p in results.values())
    head = ["A - B", "endpoint", "seeds", "mean", "95% t-interval", "noise floor", "seed sd", "sign-flip p"]
    head += (["Holm p"] if with_holm else []) + (["bootstrap 95%"] if boot else []) + ["A higher in"]
    head += ["verdict"] if with_verdict else []
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, p in results.items():
        pair, ep = label.split(" | ")
        t_ci = _interval(p.t_low, p.t_high) if p.n > 1 else "–"
        cells = [pair, ep, str(p.n), f"{p.mean:+.3f}", t_ci, _fmt(p.noise), _fmt(_sd(p)), _p(p.p_signflip)]
        if with_holm:
            cells.append(_p(p.p_holm))
        if boot:
            cells.append(_interval(p.boot_low, p.boot_high) if p.n >= BOOTSTRAP_MIN_SEEDS else "–")
        cells += [f"{p.wins}/{p.n}"] + ([p.verdict(alpha)] if with_verdict else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


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


def length_key(runs) -> str | None:
    for by_seed in runs.values():
        for rows in by_seed.values():
            key = first_key(rows[-1], *LENGTH_KEYS)
            if key:
                return key
    return None


def arm_table(
    runs,
    names: list[str],
    steps: int,
    format_reward: str | None,
    threshold: float,
    cpu_of=lambda arm, seed: None,
    base_of=lambda arm, seed: None,
) -> list[str]:
    """Per arm, means over seeds. ``cpu_of(arm, seed)``: the run's CPU; when the runs span several, step time is
    given per CPU (a mean over machines would compare the machines' mix, not the arms). ``base_of(arm, seed)``: the
    base model it started from; when the runs have several, each arm has a row per base (as the held-out table)."""
    lk = length_key(runs)
    cpus = {cpu_of(arm, seed) for arm, by in runs.items() for seed in by}
    bases = {base_of(arm, seed) for arm, by in runs.items() for seed in by}
    head = ["arm", "seeds"] + [f"{n} final" for n in names + [TOTAL]] + [f"{TOTAL} AUC"]
    if format_reward:
        head.append(f"steps to {format_reward}>={threshold}")
    head += ["response length (final)", "replayed pairs", "replay share of step", "step time (s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    groups = []  # (label, {arm: that base's runs})
    for arm in ARMS:
        by_base: dict[str | None, dict] = {}
        for seed, rows in sorted(runs.get(arm, {}).items()):
            by_base.setdefault(base_of(arm, seed) if len(bases) > 1 else None, {})[seed] = rows
        groups += [(arm if len(bases) <= 1 else f"{arm} (base `{b or '?'}`)", {arm: r}) for b, r in by_base.items()]
    for label, runs in groups:
        arm = next(iter(runs))
        cells = [label, str(len(runs[arm]))]
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
        by_cpu: dict[str | None, tuple[list[float], list[int]]] = {}  # step times pooled per CPU, and its seeds
        for seed, rows in sorted(runs[arm].items()):
            times, seeds = by_cpu.setdefault(cpu_of(arm, seed), ([], []))
            times += [row[k] for row in rows[1:] if (k := first_key(row, *STEP_TIME_KEYS))]  # step 1: warm-up
            seeds.append(seed)
        cells.append(
            _fmt(_mean([t for times, _ in by_cpu.values() for t in times]), 1)
            if len(cpus) <= 1
            else " / ".join(
                f"{_fmt(_mean(times), 1)} ({cpu or '?'}, {len(seeds)})"
                for cpu, (times, seeds) in sorted(by_cpu.items(), key=lambda kv: str(kv[0]))
            )
        )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def replaying_arms() -> list[str]:
    """The arms whose placement replays (they log the localization metrics), in ``ARMS`` order."""
    return [arm for arm, spec in ARMS.items() if spec.placement and get_placement(spec.placement).replay != NO_REPLAY]


def localization_table(runs, names: list[str], steps: int) -> list[str]:
    lines = [
        "| arm | reward | tokens for 80% of the distance | top-20% tokens' share | steps measured |",
        "|---|---|---|---|---|",
    ]
    for arm in replaying_arms():
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


def localization_coverage(localized: Sequence[str], runs: dict[str, dict[int, Any]]) -> str:
    """One line: which finished runs' checkpoints were localized (labels ``<arm>-seed<k>``), per arm localized and
    for the method's arm, so a reader sees how few checkpoints the localization rests on."""
    from .localize import parse_label

    seeds: dict[str, set[int]] = {method_arm(): set()}
    for arm, seed in filter(None, map(parse_label, localized)):
        seeds.setdefault(arm, set()).add(seed)
    parts = []
    for arm in [a for a in ARMS if a in seeds] + sorted(set(seeds) - set(ARMS)):
        done = sorted(seeds[arm])
        parts.append(
            f"{arm} {len(done)} of {len(runs.get(arm, {}))} finished runs"
            + (f" (seed{'s' if len(done) > 1 else ''} {', '.join(map(str, done))})" if done else "")
        )
    return (
        "Checkpoints localized: " + "; ".join(parts) + ". A run's checkpoint is not committed, so only runs localized "
        "in the sitting that trained them are here; the rows below rest on these checkpoints alone."
    )


def checkpoint_localization_section(root: Path, runs: dict[str, dict[int, Any]]) -> list[str]:
    """The diagnose summaries of ``study localize`` (``<root>/localization/<label>/summary.json``), one row per
    (model, reward group); span ratio = the span's share of the distance / its share of the tokens."""
    from .localize import HEATMAP, load_localization

    found = load_localization(root)
    if not found:
        return []
    lines = [
        "## Localization on final checkpoints (`study localize`: diagnose on the same sampled prompts)",
        "",
        localization_coverage(list(found), runs),
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


# ------------------------------------------------------------------------------------------- sections
def provenance_section(study: Study, excluded: dict[tuple[str, str, int], str]) -> list[str]:
    rows, missing = [], []
    for arm in ARMS:
        for seed in sorted(study.runs.get(arm, {})):
            run = study.file(arm, seed, "run") or {}
            prov = run.get("provenance")
            if not prov:
                missing.append(f"{arm} seed {seed}")
                continue
            load = prov.get("loadavg") or []
            base = study.base_weights(arm, seed)
            rows.append(
                f"| {arm} | {seed} | `{str(prov.get('commit') or '?')[:10]}` | {prov.get('dirty')} | "
                f"`{prov.get('training_path')}` | {prov.get('training_path_dirty')} | "
                f"{f'`{base[:12]}`' if base else '–'} | {run.get('cpu_dtype', '–')} | "
                f"{prov.get('cpu_model', '–')} ({prov.get('cpu_capability', '–')}) | "
                f"{' / '.join(f'{x:.1f}' for x in load) or '–'} |"
            )
    md = ["## Provenance", ""]
    if not rows:
        md += [
            "No provenance recorded: no run's `run.json` has a `provenance` entry (these runs predate it), so the "
            "report cannot check that paired runs trained on the same code (training path) at the same commit; "
            "only their dtypes are compared.",
            "",
        ]
    else:
        md += [
            "| arm | seed | commit | dirty | training path | training path dirty | base model (weights sha256) | dtype "
            "| CPU | load 1/5/15 min |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
        if missing:
            md += [f"No provenance recorded: {', '.join(missing)}.", ""]
    if excluded:
        md += [
            "**Excluded pairs** (not paired: another training path, dtype or base model, provenance on one side "
            "only, or a seed the plan gives that comparison no part in): "
            + "; ".join(f"{a} / {b} seed {s} ({why})" for (a, b, s), why in excluded.items())
            + ".",
            "",
        ]
    else:
        md += ["Excluded pairs: none (no paired runs differ in training path, dtype or base model).", ""]
    return md


def superseded_runs(folder: Path) -> list[dict[str, Any]]:
    """Runs moved to ``<folder>/superseded/<arm>/seed<k>/`` by a plan amendment: kept and listed, never paired or
    counted. One record per run: arm, seed, base weights' sha256 (12 hex digits) and held-out total when present."""
    out = []
    for arm in ARMS:
        for seed_dir in sorted((folder / "superseded" / arm).glob("seed*")):
            if not (seed_dir.name[4:].isdigit() and (seed_dir / "metrics.jsonl").is_file()):
                continue
            base = ((_read_json(seed_dir / "config.json") or {}).get("base_model") or {}).get("weights_sha256")
            heldout = _read_json(seed_dir / "heldout.json") or {}
            out.append(
                {
                    "arm": arm,
                    "seed": int(seed_dir.name[4:]),
                    "base_model": base[:12] if base else None,
                    "heldout_total": heldout.get("total"),
                }
            )
    return out


def superseded_lines(records: Sequence[dict[str, Any]]) -> list[str]:
    if not records:
        return []
    items = []
    for r in records:
        total = r["heldout_total"]
        held = f", held-out total {total:.3f}" if isinstance(total, (int, float)) else ""
        items.append(f"{r['arm']} seed {r['seed']} (base `{r['base_model'] or '?'}`{held})")
    return [
        "**Superseded runs** (under `superseded/`, kept and listed, never paired or counted; the plan's amendments "
        "say why): " + "; ".join(items) + ".",
        "",
    ]


def prompt_section(study: Study) -> tuple[list[str], dict[str, Any]]:
    """How many distinct prompts each run trained on, and how the seeds' prompts overlap."""
    found = {}
    for base in (study.folder, study.root):
        for path in sorted((base / "prompts").glob("seed*.json")):
            if path.stem[4:].isdigit():
                found.setdefault(int(path.stem[4:]), json.loads(path.read_text(encoding="utf-8")))
    pps = study.config.get("prompts_per_step")
    per_run = study.steps * int(pps) if pps else None
    md = ["## Prompts seen", ""]
    if found:
        ids = {s: [str(x) for x in rec.get("ids", rec.get("indices", []))] for s, rec in found.items()}
        union = set().union(*ids.values())
        shared = set.intersection(*(set(v) for v in ids.values()))
        md.append(
            "Each seed draws its own training prompts (every arm of a seed gets them; `prompts/seed<k>.json`): "
            + "; ".join(f"seed {s}: {len(set(v))} distinct of {len(v)}" for s, v in sorted(ids.items()))
            + f". Over all {len(ids)} seeds: {len(union)} distinct prompts, {len(shared)} in every seed."
        )
        info = {
            "per_seed": {s: len(set(v)) for s, v in ids.items()},
            "distinct_all": len(union),
            "in_every_seed": len(shared),
        }
    else:
        draw = study.config.get("prompt_draw", "first")
        md.append(
            f"No per-seed prompt draws recorded (`prompt_draw = {draw!r}`): every run trained on the first "
            f"{per_run or '`max_samples`'} rows (steps x prompts per step) of "
            f"`{study.config.get('data', 'the data')}`, "
            f"since upstream takes the first `max_samples` rows: the same {per_run or ''} prompts in every seed and "
            "arm. A seed changes their order and the sampling, not which prompts are seen."
            if draw == "first"
            else f"`prompt_draw = {draw!r}` but no `prompts/seed<k>.json` found: prompts seen unknown."
        )
        info = {
            "per_seed": None,
            "distinct_all": per_run if draw == "first" else None,
            "same_in_every_seed": draw == "first",
        }
    return md + [""], info


def heldout_table(study: Study) -> list[str]:
    names = sorted(
        {n for by in study.files.values() for f in by.values() if f.get("heldout") for n in f["heldout"]["rewards"]}
    )
    head = ["arm", "scored runs"] + names + [TOTAL, "response length", "truncated"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def row(label: str, scored: str, hs: list[dict]) -> str:
        cells = [label, scored]
        cells += [_fmt(_mean([h["rewards"].get(n, math.nan) for h in hs]), 3) for n in names]
        cells += [
            _fmt(_mean([h["total"] for h in hs]), 3),
            _fmt(_mean([h.get("mean_response_tokens", math.nan) for h in hs]), 1),
            _fmt(_mean([h.get("truncated_frac", math.nan) for h in hs]), 3, pct=True),
        ]
        return "| " + " | ".join(cells) + " |"

    base_of = study.base_short
    bases = {base_of(arm, seed) for arm, by in study.runs.items() for seed in by}
    for path in sorted(study.folder.glob("heldout_base*.json")):  # the base models before any RL
        h = _read_json(path)
        if h and "rewards" in h and "total" in h:
            lines.append(row(f"before RL (`{path.name}`)", "–", [h]))
    for arm in ARMS:
        by_base: dict[str | None, list[int]] = {}
        for seed in sorted(study.runs.get(arm, {})):
            by_base.setdefault(base_of(arm, seed) if len(bases) > 1 else None, []).append(seed)
        for base, seeds in by_base.items():
            hs = [h for seed in seeds if (h := study.file(arm, seed, "heldout"))]
            if hs:
                label = arm if len(bases) == 1 else f"{arm} (base `{base or '?'}`)"
                lines.append(row(label, f"{len(hs)}/{len(seeds)}", hs))
    setup = next(
        (f["heldout"].get("setup") for by in study.files.values() for f in by.values() if f.get("heldout")), None
    )
    if setup:
        lines += [
            "",
            f"Each final checkpoint scored on `{checkout_relative(setup.get('data'))}`: "
            f"{setup.get('prompts')} prompts x "
            f"{setup.get('samples')} samples, T={setup.get('temperature')}, {setup.get('max_new_tokens')} new tokens, "
            f"sampling seed {setup.get('seed')}, through the task's own `reward_func`.",
        ]
    return lines


def _shown(path: Path) -> str:
    """``path`` from the repository root when it lies inside it (a report names no machine's folders)."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def checkout_relative(path: str | None) -> str | None:
    """A path inside this project's checkout, from the package folder on (the runs record absolute paths, which
    name the machine and worktree they ran in, not the file)."""
    if not path:
        return path
    head, sep, tail = str(path).rpartition(f"/{PACKAGE_DIR}/")
    return f"{PACKAGE_DIR}/{tail}" if sep else path


def step_cost_section(study: Study, excluded) -> tuple[list[str], dict[str, Any]]:
    """MRTPO / GDPO step time paired within a seed (both runs on one machine, back to back) and the replay's
    share of the MRTPO step."""

    def mean_time(rows):
        return _mean([row[k] for row in rows[1:] if (k := first_key(row, *STEP_TIME_KEYS))])  # step 1: warm-up

    def load(arm, seed):
        prov = (study.file(arm, seed, "run") or {}).get("provenance") or {}
        if prov.get("loadavg"):
            return f"{prov['loadavg'][1]:.1f}"
        res = study.file(arm, seed, "result") or {}
        lo = res.get("loadavg_5min_start_end")
        return f"{lo[0]:.1f}->{lo[1]:.1f}" if lo else "–"

    def cpu(arm, seed):
        prov = (study.file(arm, seed, "run") or {}).get("provenance") or {}
        return (prov["cpu_model"], tuple(prov.get("cpu_flags") or ())) if prov.get("cpu_model") else None

    rows, ratios, other_cpus = [], [], []
    for seed in sorted(set(study.runs.get("mrtpo", {})) & set(study.runs.get("gdpo", {}))):
        if ("mrtpo", "gdpo", seed) in excluded:
            continue
        cm, cg = cpu("mrtpo", seed), cpu("gdpo", seed)
        if cm and cg and cm != cg:  # a time ratio across CPUs measures the CPUs
            other_cpus.append(
                f"seed {seed} (GDPO on {' '.join((cg[0], *cg[1]))}, MRTPO on {' '.join((cm[0], *cm[1]))})"
            )
            continue
        tm, tg = mean_time(study.runs["mrtpo"][seed]), mean_time(study.runs["gdpo"][seed])
        share = area(series(study.runs["mrtpo"][seed], "mrtpo/replay_share_of_step", study.steps))
        ratio = tm / tg if tg and not math.isnan(tm) else math.nan
        ratios.append(ratio)
        rows.append(
            f"| {seed} | {_fmt(tg, 1)} | {_fmt(tm, 1)} | {_fmt(ratio, 2)} | {_fmt(share, 3, pct=True)} | "
            f"{load('gdpo', seed)} | {load('mrtpo', seed)} |"
        )
    skipped = (
        [f"Not paired for step time (the two runs ran on other CPUs): {'; '.join(other_cpus)}.", ""]
        if other_cpus
        else []
    )
    if not rows:
        return (["## Step cost (MRTPO / GDPO, paired within a seed)", "", *skipped] if skipped else []), {}
    mean, lo, hi = t_interval(ratios)
    md = [
        "## Step cost (MRTPO / GDPO, paired within a seed)",
        "",
        "| seed | GDPO step (s) | MRTPO step (s) | MRTPO / GDPO | replay share of the MRTPO step | load GDPO | "
        "load MRTPO |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"MRTPO / GDPO step time over {len(ratios)} seed{'s' if len(ratios) > 1 else ''}: {_fmt(mean, 2)}"
        + (f" (95% t-interval {_fmt(lo, 2)} to {_fmt(hi, 2)})" if not math.isnan(lo) else "")
        + ". Step times exclude step 1 (warm-up); load: the 5-minute load average (provenance at the run's start, "
        "else `result.json`'s start -> end). A ratio of runs made at different loads says little.",
        "",
        *skipped,
    ]
    cost = {"ratio_mean": mean, "ratio_low": lo, "ratio_high": hi, "per_seed": ratios}
    return md, {**cost, "other_cpus": other_cpus} if other_cpus else cost


def _evidence(p: Paired | None, declared: bool = True) -> str:
    if p is None:
        return "not run"
    if p.n < 2:
        return f"{p.mean:+.3f} (one seed: no interval; higher in {p.wins}/{p.n})"
    holm_p = f", Holm p {_p(p.p_holm)}" if p.p_holm is not None else ""
    note = "" if declared else "; not declared: unadjusted"
    if p.incomplete:
        note = f"; {p.n} of {p.planned} planned seeds: unadjusted, not judged"
    return (
        f"{p.mean:+.3f} (95% t-CI {_interval(p.t_low, p.t_high)}, noise floor {_fmt(p.noise)}, sign-flip p "
        f"{_p(p.p_signflip)}{holm_p}, higher in {p.wins}/{p.n} seeds{note})"
    )


def _held(p: Paired | None, want: str, alpha: float, declared: bool = True) -> str:
    """A claim's verdict from its comparison; one that was not declared describes and is never judged."""
    if p is None:
        return "not tested"
    if not declared:
        return "see numbers (not declared)"
    if p.incomplete:
        return "incomplete"
    v = p.verdict(alpha)
    if v == want:
        return "held"
    if v in ("A > B", "A < B"):
        return "contradicted"
    return "too few seeds" if v == "too few seeds" else "not resolved"


def _combine(states: list[str]) -> str:
    for state in (
        "contradicted",
        "not tested",
        "incomplete",
        "see numbers (not declared)",
        "too few seeds",
        "not resolved",
    ):
        if state in states:
            return state
    return "held"


def localization_claim(study: Study) -> dict[str, str]:
    """Claim 1 against the null controls of ``study localize`` where they were run, else the training-time
    tokens-for-80% with the warning that without a null it does not show localization."""
    loc = load_null_controls(study.folder)
    if loc:
        parts = []
        for label, rewards in loc.items():
            for name, nc in sorted(rewards.items()):
                beats = [k for k, ok in nc.get("beats_null_on_span", {}).items() if ok]
                conc = nc.get("more_concentrated_than_null")
                span = "beats its null on " + ", ".join(beats) if beats else "does not beat its null on a span"
                parts.append(f"{label} {name}: {span}{', more concentrated than its null' if conc else ''}")
        verdict = "see numbers"
        evidence = "final checkpoints, reward vs null (95% intervals over responses): " + "; ".join(parts)
    else:
        tok = {
            n: _mean(
                [
                    v
                    for rows in study.runs.get("mrtpo", {}).values()
                    for r in rows
                    if isinstance(v := r.get(f"mrtpo/{n}/tokens_for_80pct"), float)
                ]
            )
            for n in study.names
        }
        measured = "; ".join(f"{n}: {_fmt(v, 3, pct=True)}" for n, v in tok.items() if not math.isnan(v))
        verdict = "no null control"
        evidence = (
            f"MRTPO arm, replayed pairs during training, tokens for 80%: {measured or 'not measured'}. No null "
            "control recorded, so this cannot be read as localization: a position-free random profile (i.i.d. "
            "exponential per token) already needs about 44% of the tokens"
        )
    return {
        "claim": "1. Localization: a reward's distance sits on the span its checker reads, beyond a null block "
        "removed the same way (paper: 80% of the distance on 26-29% of the tokens on SQL)",
        "verdict": verdict,
        "evidence": evidence,
    }


def cost_claim(study: Study, cost: dict[str, Any]) -> dict[str, str]:
    """Claim 4: the share of (response, reward) pairs replayed, and the step time paired within a seed."""
    frac = (
        _mean(list(per_seed(study.runs, "mrtpo", "mrtpo/replayed_pairs_frac", study.steps, area).values()))
        if "mrtpo" in study.runs
        else math.nan
    )
    ratio = cost.get("ratio_mean", math.nan)
    return {
        "claim": "4. Cost: 12-21% of (response, reward) pairs replayed; a step 10-20% longer than GDPO",
        "verdict": "see numbers",
        "evidence": f"replayed pairs {_fmt(frac, 3, pct=True)} (steps with beta > 0 included); "
        f"MRTPO/GDPO step time paired within a seed {_fmt(ratio, 2)}"
        + (
            f" [{_fmt(cost['ratio_low'], 2)}, {_fmt(cost['ratio_high'], 2)}]"
            if not math.isnan(cost.get("ratio_low", math.nan))
            else ""
        ),
    }


def claims(
    study: Study,
    declared: dict[tuple[str, str], Paired | None],
    primary: Endpoint,
    excluded,
    format_reward: str | None,
    threshold: float,
    alpha: float,
    cost: dict[str, Any],
) -> list[dict[str, str]]:
    """The paper's claims checked against this study, each with the numbers behind its verdict."""

    def get(a, b, ep=primary):
        if ep == primary and (a, b) in declared:
            return declared[(a, b)], True
        return compare(study, a, b, ep, excluded), False

    out = [localization_claim(study)]
    (mg, dm), (gg, dg) = get("mrtpo", "gdpo"), get("gdpo", "grpo")
    out.append(
        {
            "claim": f"2. Rewards rise faster: MRTPO > GDPO > GRPO ({primary.label()})",
            "verdict": _combine([_held(mg, "A > B", alpha, dm), _held(gg, "A > B", alpha, dg)]),
            "evidence": f"MRTPO-GDPO {_evidence(mg, dm)}; GDPO-GRPO {_evidence(gg, dg)}",
        }
    )
    if format_reward:
        key = f"reward/{format_reward}/mean"
        reach = {
            arm: [steps_to(row, threshold) for row in curves(study.runs, arm, key, study.steps)[1]]
            for arm in study.runs
        }
        txt = "; ".join(
            f"{arm}: {', '.join(str(s) if s else f'>{study.steps}' for s in v)}" for arm, v in reach.items()
        )
        out.append(
            {
                "claim": f"2b. Steps to {format_reward} >= {threshold} (3-step trailing mean), per seed (secondary)",
                "verdict": "see numbers",
                "evidence": txt,
            }
        )
    for tag, b, text in (
        ("3a", "mrtpo-shuffle", "Shuffling the weights within the response removes the gain (MRTPO > shuffle)"),
        ("3b", "mrtpo-joint", "One shared profile (joint) is weaker than per-reward placement (MRTPO > joint)"),
    ):
        p, d = get("mrtpo", b)
        out.append(
            {
                "claim": f"{tag}. {text}",
                "verdict": _held(p, "A > B", alpha, d),
                "evidence": f"MRTPO-{b.removeprefix('mrtpo-')} {_evidence(p, d)}",
            }
        )
    out.append(cost_claim(study, cost))
    ep = Endpoint("heldout" if study.has_heldout else "auc", LENGTH)
    length = compare(study, "mrtpo", "gdpo", ep, excluded)
    final = compare(study, "mrtpo", "gdpo", Endpoint("final", LENGTH), excluded)
    out.append(
        {
            "claim": f"5. Shorter responses than GDPO (MRTPO - GDPO, {ep.label()})",
            "verdict": _held(length, "A < B", alpha, declared=False),
            "evidence": f"{_evidence(length, False)}; final training step alone: {_evidence(final, False)}",
        }
    )
    return out


def caveats(study: Study, declared: dict, primary: Endpoint, exploratory: dict, alpha: float) -> list[str]:
    """What the verdicts do not show, computed from this study's numbers."""
    out = []
    ns = sorted({p.n for p in declared.values() if p is not None})
    m = len(declared)  # Holm's family: every declared comparison, run or not (see the adjustment in write_report)
    if ns:
        n = ns[-1]  # the most seeds any declared comparison has: if these cannot reject, none can
        smallest = 2 / 2**n
        if m and smallest > alpha / m:
            out.append(
                f"With {n} paired seed{'s' if n > 1 else ''} the exact sign-flip test cannot reject: its smallest "
                f"possible two-sided p is 2/2^{n} = {smallest:.3f}, above {alpha}/{m} = {alpha / m:.4f}, what Holm "
                f"asks of the best of {m} declared comparisons. No declared comparison can be *held* or "
                "*contradicted* at this size; the t-intervals are descriptive."
            )
    short = [f"{a} - {b} ({p.n} of {p.planned})" for (a, b), p in declared.items() if p is not None and p.incomplete]
    if short:
        out.append(
            "Declared comparisons short of their planned seeds are *incomplete*: " + ", ".join(short) + ". Their "
            "numbers can still move as seeds come in; none of them is judged, whatever its p."
        )
    narrow = [
        f"{label} (seed sd {_fmt(_sd(p))}, noise floor {_fmt(p.noise)})"
        for label, p in {
            **{f"{a} - {b}": p for (a, b), p in declared.items() if p},
            **{k: p for k, p in exploratory.items() if "summed reward" in k},
        }.items()
        if p.n >= 2 and not math.isnan(p.noise) and _sd(p) * 3 < p.noise
    ]
    if narrow:
        out.append(
            "Intervals narrower than the within-run noise allows (seed-to-seed sd of the difference under a third of "
            "the noise floor: the few seeds agree by chance more than the noise predicts, so the interval understates "
            "the uncertainty): " + "; ".join(narrow) + "."
        )
    by_base: dict[str, set[int]] = {}
    for arm, seeds in study.runs.items():
        for seed in seeds:
            by_base.setdefault(study.base_short(arm, seed) or "unrecorded", set()).add(seed)
    if len(by_base) > 1:
        out.append(
            "The runs started from "
            f"{len(by_base)} base models ("
            + "; ".join(
                f"`{b}`: seed{'s' if len(v) > 1 else ''} {', '.join(map(str, sorted(v)))}"
                for b, v in sorted(by_base.items())
            )
            + "). Pairs are formed within a seed and never across bases, so each difference compares arms on one base; "
            "the arm means over seeds mix the bases (the held-out table splits them)."
        )
    tested = sum(1 for p in exploratory.values() if p.n > 1)
    if tested:
        out.append(
            f"The {tested} secondary comparisons (per reward, training AUC) are not adjusted for multiplicity: at "
            f"{alpha} about {alpha * tested:.1f} of them would reject by chance alone. They describe, they do not "
            "decide."
        )
    if primary.kind == "heldout":
        out.append(
            "The held-out score is one sampling of each final checkpoint on one held-out set: it says how the "
            "checkpoints compare on prompts like the training ones, not on other tasks, models or budgets."
        )
    else:
        out.append(
            "No held-out scores: the declared comparisons use the training-curve AUC of the summed reward, measured "
            "on the training prompts during training (in-sample, on the sampled responses of each step)."
        )
    out.append("*Not resolved* means this study cannot tell, not that the arms are equal.")
    return out


def load_null_controls(folder: Path) -> dict[str, dict[str, Any]]:
    """label -> the ``null_control`` of its ``localization/<label>/summary.json`` (labels without one left out)."""
    from .localize import load_localization

    return {label: s["null_control"] for label, s in load_localization(folder).items() if s.get("null_control")}


def _ci(row: dict | None, pct: bool = True, digits: int = 3) -> str:
    if not row or row.get("mean") is None:
        return "–"
    if row.get("low") is None:
        return _fmt(row["mean"], digits, pct)
    return f"{_fmt(row['mean'], digits, pct)} [{_fmt(row['low'], digits, pct)}, {_fmt(row['high'], digits, pct)}]"


def null_control_section(folder: Path) -> list[str]:
    from .localize import load_localization

    found = load_localization(folder)
    if not found:
        return []
    without = [label for label, s in found.items() if not s.get("null_control")]
    md = [
        "### Against the null block",
        "",
        "A reward localizes when it beats its null, not when it beats uniform. The null is a neutral sentence no "
        "reward reads, put in the prompt and removed the way the reward's own block is (docs/study.md); the random "
        "profile is i.i.d. exponential per token (no position preference). Means with 95% t-intervals over responses.",
        "",
    ]
    if without:
        md += [f"No null control recorded for {', '.join(without)} (diagnosed before the null block existed).", ""]
    rows = []
    for label, summary in found.items():
        for name, nc in sorted((summary.get("null_control") or {}).items()):
            tok, ab = nc["tokens_for_80pct"], nc["tokens_for_80pct_abs"]
            spans = "; ".join(
                f"{kind}: {_ci(sp['reward'])} vs null {_ci(sp['null'])}, diff {_ci(sp['reward_minus_null'])}"
                f" ({'beats' if nc['beats_null_on_span'].get(kind) else 'does not beat'} its null)"
                for kind, sp in sorted(nc["spans"].items())
            )
            rows.append(
                f"| {label} | {name} | {nc['responses']} | {spans or '–'} | {_ci(tok['reward'])} / "
                f"{_ci(tok['null'])} / {_ci(tok['random'])} | {_ci(ab['reward'], False, 1)} / "
                f"{_ci(ab['null'], False, 1)} / {_ci(ab['random'], False, 1)} | "
                f"{'yes' if nc['more_concentrated_than_null'] else 'no'} |"
            )
    if rows:
        md += [
            "| model | reward | responses | distance share on the span its checker reads: reward vs null | tokens "
            "for 80%: reward / null / random (fraction) | the same in tokens | fewer tokens than its null |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    return md


def copy_small_files(study: Study, root: Path, out: Path, study_file: Path) -> None:
    """Copy what a results folder keeps (each run's small files, the config, the localization outputs, the prompt
    lists) from the study into ``out``, unless ``out`` is the study itself."""
    if out / "runs" != root and out != root:
        for arm, by_seed in study.runs.items():
            for seed in by_seed:
                src, dst = root / arm / f"seed{seed}", out / "runs" / arm / f"seed{seed}"
                dst.mkdir(parents=True, exist_ok=True)
                for name in SMALL_FILES:
                    if (src / name).is_file():
                        shutil.copy2(src / name, dst / name)
        if study_file.is_file() and study_file != out / "study.json":
            shutil.copy2(study_file, out / "study.json")
    if out != study.folder:
        from .localize import HEATMAP, SMALL_OUTPUTS

        for src in (study.folder / "localization").glob("*"):
            for name in (*SMALL_OUTPUTS, HEATMAP):
                if (src / name).is_file():
                    (out / "localization" / src.name).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src / name, out / "localization" / src.name / name)
        for src in sorted((study.folder / "prompts").glob("seed*.json")):
            (out / "prompts").mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out / "prompts" / src.name)


def plot_curves(study: Study, out: Path) -> None:
    lk = length_key(study.runs)
    keys = [f"reward/{n}/mean" for n in study.names] + [TOTAL] + ([lk] if lk else [])
    titles = {f"reward/{n}/mean": f"reward: {n}" for n in study.names}
    titles[TOTAL] = "summed reward"
    legend_base = lambda arm, seed: (study.base_short(arm, seed) or "")[:8] or None  # noqa: E731
    plot(study.runs, keys, study.steps, out / "curves.png", titles, legend_base)


def declared_results(
    study: Study, config: dict[str, Any], pairs: list[tuple[str, str]], primary: Endpoint, excluded
) -> dict[tuple[str, str], Paired | None]:
    """The declared comparisons on the primary endpoint, each with its planned seeds and its Holm p. The family is
    every declared comparison: one without runs yet, or without all its planned seeds, counts as p = 1, so a
    partial study is never adjusted over fewer comparisons than were preregistered."""
    declared = {(a, b): compare(study, a, b, primary, excluded) for a, b in pairs}
    for (a, b), p in declared.items():
        if p is not None and config.get("seeds"):
            p.planned = len(planned_seeds(config, a, b))
    adjusted = holm([p.p_signflip if p is not None and not p.incomplete else 1.0 for p in declared.values()])
    for p, adj in zip(declared.values(), adjusted):
        if p is not None and not p.incomplete:
            p.p_holm = adj
    return declared


def secondary_results(
    study: Study, pairs: list[tuple[str, str]], declared, primary: Endpoint, excluded
) -> dict[str, Paired]:
    """Every pair on every endpoint (held-out where scored, training AUC; per reward and summed) but the declared
    comparisons' primary one; unadjusted."""
    secondary: dict[str, Paired] = {}
    kinds = (["heldout"] if study.has_heldout else []) + ["auc"]
    for kind in kinds:
        for a, b in pairs:
            for n in study.names + [TOTAL]:
                ep = Endpoint(kind, n)
                if ep == primary and (a, b) in declared:
                    continue
                p = compare(study, a, b, ep, excluded)
                if p:
                    secondary[f"{a} - {b} | {ep.label()}"] = p
    return secondary


def status_section(study: Study, config: dict[str, Any], title: str) -> list[str]:
    """The title, the config, and which planned runs are done, missing or cut short."""
    runs, steps = study.runs, study.steps
    done = {arm: sorted(by) for arm, by in runs.items()}
    incomplete = [f"{arm} seed {s}" for arm, by in runs.items() for s, rows in by.items() if len(rows) < steps]
    md = [f"# Study: {config.get('name', title)}", ""]
    if config:
        md += ["Config: " + ", ".join(f"`{k}={v}`" for k, v in config.items() if k not in ("extra_args", "env")), ""]
    planned = [
        (a, s)
        for s in config.get("seeds", [])
        for a in config.get("arms", [])
        if s in config.get("arm_seeds", {}).get(a, config.get("seeds", []))
    ]
    missing = [f"{a} seed {s}" for a, s in planned if s not in done.get(a, [])]
    if missing:
        md += [
            f"**Partial study: {len(planned) - len(missing)} of {len(planned)} planned runs done.** Not yet run: "
            f"{', '.join(missing)}. Verdicts below use only the runs found.",
            "",
        ]
    return md + [
        "Runs found: " + "; ".join(f"{a}: seeds {s}" for a, s in done.items()) + ".",
        f"Incomplete runs (fewer than {steps} steps logged): {', '.join(incomplete) or 'none'}.",
        "",
    ]


def primary_section(study: Study, declared: dict, primary: Endpoint, source: str, alpha: float) -> list[str]:
    pairs_txt = ", ".join(f"{a} - {b}" for a, b in declared)
    md = [
        f"## Primary endpoint: {primary.label()}",
        "",
        f"Declared comparisons ({source}): {pairs_txt}. Each is A - B paired by seed: the mean, its 95% t-interval, "
        "the within-run noise floor of one seed's difference (docs/study.md), the seed-to-seed sd of the "
        f"difference, the exact two-sided sign-flip p over all 2^n sign patterns, and Holm's adjustment over the "
        f"{len(declared)} declared comparisons (one not yet run, or short of its planned seeds, counts as p = 1). "
        f"Verdict: A > B (or A < B) when the Holm p is at most {alpha}, else "
        "no difference resolved; a comparison short of its planned seeds is *incomplete*: its numbers are shown, it "
        f"is not judged. No bootstrap below {BOOTSTRAP_MIN_SEEDS} seeds.",
        "",
    ]
    if study.has_heldout:
        md += heldout_table(study) + [""]
    else:
        md += [
            "No held-out scores (`heldout.json`) in these runs: the declared comparisons use the training-curve AUC of "
            "the summed reward (a secondary endpoint) in its place.",
            "",
        ]
    return md + comparison_rows(
        {f"{a} - {b} | {primary.label()}": p for (a, b), p in declared.items() if p}, True, alpha
    )


def claims_section(verdicts: list[dict[str, str]], alpha: float) -> list[str]:
    return [
        "## The paper's claims against this study",
        "",
        f"Verdicts follow fixed rules on the declared comparisons: *held* when the Holm-adjusted sign-flip p is at "
        f"most {alpha} in the claimed direction, *contradicted* when it is in the other, *not resolved* otherwise; "
        "*incomplete* while a declared comparison has fewer seeds than planned (not judged). A claim resting on a "
        "comparison that was not declared is shown with its numbers and not judged (*see numbers*).",
        "",
        "| claim | verdict | evidence |",
        "|---|---|---|",
        *(f"| {c['claim']} | {c['verdict']} | {c['evidence']} |" for c in verdicts),
    ]


def write_report(
    root: Path,
    out: Path | None = None,
    probe_files: Sequence[Path] = (),
    format_reward: str | None = None,
    threshold: float = 0.8,
    extra_md: str = "",
    comparisons: str | None = None,
    alpha: float = ALPHA,
    config_file: Path | None = None,
) -> Path:
    """``report.md``, ``summary.json`` and ``curves.png`` of the study at ``root`` (a study folder, or a committed
    results folder with its runs under ``runs/``), written to ``out`` (default: ``root``) with copies of the small
    files. ``config_file``: the study's TOML when its plan was amended after runs began (``amended_plan``);
    default: the runs' ``study.json``."""
    root = Path(root).resolve()
    out = Path(out or root).resolve()
    study_file = root / "study.json"
    folder = root  # the study or results folder itself (localization/, prompts/ live here, not under runs/)
    if (root / "runs").is_dir() and not any((root / arm).is_dir() for arm in ARMS):
        root = root / "runs"  # a committed results folder: the runs' copies live under runs/
    config = _read_json(study_file) or {}
    amended: list[str] = []
    if config_file is not None:
        config, amended = amended_plan(Path(config_file), config)
    study = load_study(root, folder, config)
    out.mkdir(parents=True, exist_ok=True)
    copy_small_files(study, root, out, study_file)
    plot_curves(study, out)

    declared_pairs, source = declared_comparisons(config, comparisons)
    exploratory_pairs = exploratory_comparisons()
    excluded = exclusions(study, [*declared_pairs, *exploratory_pairs], config)
    for (a, b, s), why in excluded.items():
        print(f"[study] not paired: {a} / {b} seed {s}: {why}", file=sys.stderr)
    primary = primary_endpoint(study)
    declared = declared_results(study, config, declared_pairs, primary, excluded)
    all_pairs = list(dict.fromkeys([*declared_pairs, *exploratory_pairs]))
    secondary = secondary_results(study, all_pairs, declared, primary, excluded)
    cost_md, cost = step_cost_section(study, excluded)
    verdicts = claims(study, declared, primary, excluded, format_reward, threshold, alpha, cost)
    prompts_md, prompts_info = prompt_section(study)

    md = status_section(study, config, root.name)
    if amended:
        md += [
            f"Plan: `{_shown(Path(config_file))}` (`--config`), amended after runs began: "
            f"its {', '.join(f'`{k}`' for k in amended)} differ from the runs' own `study.json`, which the "
            "runner wrote; every other setting is the same.",
            "",
        ]
    if extra_md:
        md += [extra_md, ""]
    superseded = superseded_runs(folder)
    md += provenance_section(study, excluded) + superseded_lines(superseded) + prompts_md
    if probe_files:
        md += ["## What the base model can learn (probe at step 0)", ""] + probe_section(probe_files)
    md += primary_section(study, declared, primary, source, alpha)
    md += ["", "## Curves", "", "![curves](curves.png)", ""]
    md += ["## Per arm, training (mean over seeds; final = last logged step; AUC = mean over steps)", ""]
    md += arm_table(study.runs, study.names, study.steps, format_reward, threshold, study.cpu_label, study.base_short)
    md += [""]
    md += ["## Secondary comparisons (A - B paired by seed; unadjusted; they describe, no verdicts)", ""]
    md += comparison_rows(secondary, False, alpha, with_verdict=False) + [""]
    md += cost_md
    md += ["## Localization during training (replayed pairs, MRTPO arms)", ""]
    md += localization_table(study.runs, study.names, study.steps)
    md += [""] + checkpoint_localization_section(out, study.runs) + null_control_section(out) + [""]
    md += claims_section(verdicts, alpha)
    md += ["", "## What these verdicts do not show", ""] + [
        f"- {c}" for c in caveats(study, declared, primary, secondary, alpha)
    ]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    summary = {
        "steps": study.steps,
        "rewards": study.names,
        "runs": {arm: sorted(by) for arm, by in study.runs.items()},
        "primary_endpoint": primary.label(),
        "declared": {f"{a} - {b}": _paired_record(p) for (a, b), p in declared.items()},
        "declared_source": source,
        "comparisons": {k: _paired_record(p) for k, p in secondary.items()},
        "excluded": {f"{a} - {b} seed {s}": why for (a, b, s), why in excluded.items()},
        **({"superseded": superseded} if superseded else {}),
        "prompts": prompts_info,
        "step_cost": cost,
        "claims": verdicts,
    }
    (out / "summary.json").write_text(json.dumps(_finite_json(summary), indent=2) + "\n")
    return out / "report.md"


def _finite_json(x):
    """NaN -> None, so summary.json is strict JSON."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_json(v) for v in x]
    return x
