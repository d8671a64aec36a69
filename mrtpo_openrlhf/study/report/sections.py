"""The report's markdown sections and tables."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence

from mrtpo_openrlhf.metrics import first_key

from ..config import ARMS, method_arm
from ..stats import AUC_RULES, Paired, area, detectable_effect, steps_to, t_interval
from .endpoints import Endpoint
from .runs import (
    STEP_TIME_KEYS,
    TOTAL,
    Study,
    _last,
    _read_json,
    checkout_relative,
    curves,
    length_key,
    per_seed,
    replaying_arms,
    series,
)
from .text import _fmt, _interval, _mean, _p, _sd, _signed


def comparison_rows(
    results: dict[str, Paired], with_holm: bool, alpha: float, with_verdict: bool = True, family: int = 0
) -> list[str]:
    """A markdown table of paired comparisons; ``with_verdict`` False for secondary ones, which describe and
    never decide (no verdict column). ``with_holm``: the declared family of ``family`` comparisons, with the
    detectable effect (``stats.detectable_effect``) at ``alpha`` and at Holm's first threshold ``alpha / family``.
    No bootstrap column: the plan rules it out."""
    head = ["A - B", "endpoint", "seeds", "mean", "95% t-interval", "noise floor", "seed sd", "sign-flip p"]
    head += ["Holm p", f"detectable at {alpha} / {alpha}/{family} (80% power)"] if with_holm else []
    head += ["A higher in"] + (["verdict"] if with_verdict else [])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, p in results.items():
        pair, ep = label.split(" | ")
        t_ci = _interval(p.t_low, p.t_high) if p.n > 1 else "–"
        cells = [pair, ep, str(p.n), _signed(p.mean), t_ci, _fmt(p.noise), _fmt(_sd(p)), _p(p.p_signflip)]
        if with_holm:
            sd = _sd(p)
            first = detectable_effect(sd, p.n, alpha / max(1, family))
            cells += [_p(p.p_holm), f"{_fmt(detectable_effect(sd, p.n, alpha))} / {_fmt(first)}"]
        cells += [f"{p.wins}/{p.n}"] + ([p.verdict(alpha)] if with_verdict else [])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def arm_table(
    runs,
    names: list[str],
    steps: int,
    format_reward: str | None,
    threshold: float,
    cpu_of=lambda arm, seed: None,
    base_of=lambda arm, seed: None,
    auc: str = "mean",
    steps_rule: str = "trailing3",
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
        cells.append(_fmt(_mean(list(per_seed(runs, arm, TOTAL, steps, AUC_RULES[auc]).values())), 3))
        if format_reward:
            reach = [
                steps_to(r, threshold, steps_rule) for r in curves(runs, arm, f"reward/{format_reward}/mean", steps)[1]
            ]
            got = [r for r in reach if r]
            if steps_rule == "first":  # the plan's: a run that never reaches it is censored at T + 1
                cells.append(f"{_mean([r or steps + 1 for r in reach]):.1f} ({len(got)}/{len(reach)} reached)")
            else:
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
    from ..localize import parse_label

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
    from ..localize import HEATMAP, load_localization

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
    from ..probe import format_table

    out = []
    for path in probe_files:
        out += [format_table(json.loads(Path(path).read_text())), ""]
    return out


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
            f"sampling seed {setup.get('seed')}, through the task's own `reward_func`."
            + heldout_composition(checkout_relative(setup.get("data")), setup.get("prompts"), study.config.get("data")),
        ]
    return lines


def _categories(path: Path, limit: int | None = None) -> dict[str, int]:
    """Rows per ``category`` of the labels of a JSONL task file (its first ``limit`` rows); {} when none say."""
    from collections import Counter

    counts: Counter = Counter()
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            label = json.loads(line).get("label")
            label = json.loads(label) if isinstance(label, str) and label.startswith("{") else label
            if isinstance(label, dict) and label.get("category"):
                counts[label["category"]] += 1
    return dict(counts)


def heldout_composition(heldout: str | None, prompts: int | None, train: str | None) -> str:
    """What the scored held-out prompts are, by category, against the training pool's categories."""
    from .runs import repo_path

    held_path, train_path = repo_path(heldout), repo_path(checkout_relative(train))
    if held_path is None or not prompts:
        return ""
    held = _categories(held_path, int(prompts))
    if not held:
        return ""
    text = (
        " The scored prompts (the file's first "
        + f"{prompts}): "
        + ", ".join(f"{n} `{c}`" for c, n in sorted(held.items()))
    )
    pool = _categories(train_path) if train_path else {}
    absent = {c: n for c, n in pool.items() if c not in held}
    if absent:
        text += "; none of " + ", ".join(f"`{c}` (the training pool has {n})" for c, n in sorted(absent.items()))
    return text + "."


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

    rows, ratios, other_cpus, apart = [], [], [], []
    for seed in sorted(set(study.runs.get("mrtpo", {})) & set(study.runs.get("gdpo", {}))):
        if ("mrtpo", "gdpo", seed) in excluded:
            continue
        cm, cg = cpu("mrtpo", seed), cpu("gdpo", seed)
        if cm and cg and cm != cg:  # a time ratio across CPUs measures the CPUs
            other_cpus.append(
                f"seed {seed} (GDPO on {' '.join((cg[0], *cg[1]))}, MRTPO on {' '.join((cm[0], *cm[1]))})"
            )
            continue
        gap = hours_apart(study, ("gdpo", seed), ("mrtpo", seed))
        if gap is not None and gap > BACK_TO_BACK_HOURS:  # another sitting: another machine, whatever its CPU name
            tm, tg = mean_time(study.runs["mrtpo"][seed]), mean_time(study.runs["gdpo"][seed])
            apart.append(f"seed {seed} ({gap:.1f} h apart; MRTPO / GDPO {_fmt(tm / tg if tg else math.nan, 2)})")
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
    if apart:
        skipped += [
            f"Not paired for step time (the two runs did not run back to back: more than {BACK_TO_BACK_HOURS} h "
            "between one's end and the other's start, so in other sittings, each on a fresh machine; the CPU name "
            f"does not tell the machines apart): {'; '.join(apart)}.",
            "",
        ]
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
    cost.update({k: v for k, v in (("other_cpus", other_cpus), ("not_back_to_back", apart)) if v})
    return md, cost


BACK_TO_BACK_HOURS = 6.0  # runs of one seed further apart than this ran in other sittings (fresh machines)


def run_window(study: Study, arm: str, seed: int) -> tuple[datetime, datetime] | None:
    """(start, end) of a run from its ``result.json`` (``finished`` and ``seconds``); None when not recorded."""
    res = study.file(arm, seed, "result") or {}
    if not res.get("finished") or res.get("seconds") is None:
        return None
    end = datetime.fromisoformat(str(res["finished"]))
    return end - timedelta(seconds=float(res["seconds"])), end


def hours_apart(study: Study, one: tuple[str, int], other: tuple[str, int]) -> float | None:
    """Hours between the earlier run's end and the later run's start (0 when they overlap); None if unknown."""
    a, b = run_window(study, *one), run_window(study, *other)
    if a is None or b is None:
        return None
    first, second = sorted((a, b))
    return max(0.0, (second[0] - first[1]).total_seconds() / 3600)


def planned_runs(config: dict[str, Any]) -> list[tuple[str, int]]:
    """(arm, seed) of every run the config plans, seed by seed (``arm_seeds`` narrows an arm's seeds)."""
    seeds = config.get("seeds", [])
    return [(a, s) for s in seeds for a in config.get("arms", []) if s in config.get("arm_seeds", {}).get(a, seeds)]


def status_section(study: Study, config: dict[str, Any], title: str) -> list[str]:
    """The title, the config, and which planned runs are done, missing or cut short."""
    runs, steps = study.runs, study.steps
    done = {arm: sorted(by) for arm, by in runs.items()}
    incomplete = [f"{arm} seed {s}" for arm, by in runs.items() for s, rows in by.items() if len(rows) < steps]
    md = [f"# Study: {config.get('name', title)}", ""]
    if config:
        md += ["Config: " + ", ".join(f"`{k}={v}`" for k, v in config.items() if k not in ("extra_args", "env")), ""]
    planned = planned_runs(config)
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
        "is not judged. No bootstrap (the plan rules it out). The detectable effect is the true difference a "
        "two-sided paired t-test on these seeds would find with 80% power at the observed seed sd (the plan: the "
        "report states the observed sd and the detectable effect it implies), at the plain level and at Holm's "
        "first threshold.",
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
    md += comparison_rows(
        {f"{a} - {b} | {primary.label()}": p for (a, b), p in declared.items() if p}, True, alpha, family=len(declared)
    )
    return md + detectable_lines(study, declared, primary, alpha)


def pre_rl_totals(study: Study) -> dict[str, float]:
    """Held-out total of each base model before any RL, by the base's short weights sha: ``heldout_base_<sha
    prefix>.json`` is that base's; a plain ``heldout_base.json`` is the one base no named file claims."""
    bases = {study.base_short(arm, seed) for arm, by in study.runs.items() for seed in by} - {None}
    out, plain = {}, None
    for path in sorted(study.folder.glob("heldout_base*.json")):
        h = _read_json(path) or {}
        if "total" not in h:
            continue
        tag = path.stem.removeprefix("heldout_base").lstrip("_")
        if not tag:
            plain = float(h["total"])
        for base in bases:
            if tag and base.startswith(tag):
                out[base] = float(h["total"])
    rest = bases - set(out)
    if plain is not None and len(rest) == 1:
        out[rest.pop()] = plain
    return out


def detectable_lines(study: Study, declared: dict, primary: Endpoint, alpha: float) -> list[str]:
    """The detectable effect of each declared comparison as a share of what RL itself gained: B's held-out total
    minus its base's before RL (``pre_rl_totals``), averaged over the comparison's seeds."""
    if primary.kind != "heldout":
        return []
    from .endpoints import endpoint_values

    before = pre_rl_totals(study)
    out = []
    for (a, b), p in declared.items():
        if p is None or p.n < 2:
            continue
        values = endpoint_values(study, b, primary)
        gains = [values[s] - before[base] for s in p.seeds if (base := study.base_short(b, s)) in before]
        if len(gains) != len(p.seeds):
            continue
        gain = _mean(gains)
        sd = _sd(p)
        d, d_first = detectable_effect(sd, p.n, alpha), detectable_effect(sd, p.n, alpha / len(declared))
        out.append(
            f"{a} - {b}: at the observed seed sd {_fmt(sd)} over {p.n} seeds, 80% power needs a true difference of "
            f"{_fmt(d)} ({_fmt(d / gain, 3, pct=True)} of the {_fmt(gain)} that RL gained over the base for {b}) at "
            f"{alpha}, {_fmt(d_first)} ({_fmt(d_first / gain, 3, pct=True)}) at Holm's first threshold "
            f"{alpha}/{len(declared)}."
        )
    return ["", "Detectable effects: " + " ".join(out)] if out else []


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


def k_breakdown_section(study: Study, baseline: str, excluded) -> list[str]:
    """Exploratory, when the plan judges on the instruction level: each other arm - ``baseline`` on the held-out
    instruction level within each bin of constraints per prompt (``levels.K_BINS``), paired by seed (the paper's
    "the gain scales with the number of rewards"). No verdicts."""
    from .endpoints import k_bin_differences
    from .levels import INSTRUCTION, K_BINS

    if study.config.get("primary_endpoint") != INSTRUCTION or baseline not in study.runs or not study.has_heldout:
        return []
    lines = [
        f"## Exploratory: A - {baseline} by constraints per held-out prompt (instruction level; no verdicts)",
        "",
        "| A | " + " | ".join(f"K {low}-{high}" for low, high in K_BINS) + " |",
        "|---|" + "---|" * len(K_BINS),
    ]
    for arm in study.runs:
        if arm == baseline:
            continue
        diffs = k_bin_differences(study, arm, baseline, excluded)
        if not diffs:
            continue
        cells = [
            f"{_signed(p.mean)} {_interval(p.t_low, p.t_high)} ({p.n} seeds)" if p.n else "–" for p in diffs.values()
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return lines + [""]
