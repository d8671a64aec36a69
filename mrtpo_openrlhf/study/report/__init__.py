"""``study report DIR``: a markdown report with plots from a study folder's runs.

Reads ``<arm>/seed<k>/metrics.jsonl`` (and ``config.json``/``result.json``) under DIR, writes ``report.md``,
``curves.png`` and ``summary.json`` into ``--out`` (default DIR) and, when ``--out`` differs from DIR, copies each
run's small files (metrics, config, command, result) beside the report so the report can be regenerated from them.
The conclusion is computed from the numbers by fixed rules (``claims``), never written by hand.

The stages, one module each: ``runs`` (the run files of a study folder), ``plan`` (what the config declares and
which runs may be paired), ``endpoints`` (what is compared, paired by seed), ``claims`` (verdicts and caveats by
fixed rules), ``sections`` (the markdown), ``plots``, ``text`` (number formatting); ``write_report`` below puts them
together.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Sequence

from ..config import ARMS
from ..stats import ALPHA
from .claims import caveats, claims
from .endpoints import _paired_record, declared_results, primary_endpoint, secondary_results
from .localization import null_control_section
from .plan import amended_plan, declared_comparisons, exclusions, exploratory_comparisons
from .plots import plot_curves
from .runs import ReportError, _read_json, _shown, copy_small_files, load_study, superseded_runs
from .sections import (
    arm_table,
    checkpoint_localization_section,
    claims_section,
    comparison_rows,
    k_breakdown_section,
    localization_table,
    planned_runs,
    primary_section,
    probe_section,
    prompt_section,
    provenance_section,
    status_section,
    step_cost_section,
    superseded_lines,
)

__all__ = ["ReportError", "write_report"]


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
    md += per_arm_heading(study.steps, config, format_reward, threshold)
    md += arm_table(
        study.runs,
        study.names,
        study.steps,
        format_reward,
        threshold,
        study.cpu_label,
        study.base_short,
        config.get("auc", "mean"),
        config.get("steps_to", "trailing3"),
    )
    md += [""]
    md += ["## Secondary comparisons (A - B paired by seed; unadjusted; they describe, no verdicts)", ""]
    md += comparison_rows(secondary, False, alpha, with_verdict=False) + [""]
    md += k_breakdown_section(study, "gdpo", excluded)
    md += cost_md
    md += ["## Localization during training (replayed pairs, MRTPO arms)", ""]
    md += localization_table(study.runs, study.names, study.steps)
    md += (
        [""]
        + checkpoint_localization_section(out, study.runs)
        + null_control_section(out, config.get("task"), config.get("localization_rule", "null_and_random"))
        + [""]
    )
    md += claims_section(verdicts, alpha)
    md += ["", "## What these verdicts do not show", ""] + [
        f"- {c}" for c in caveats(study, declared, primary, secondary, alpha)
    ]
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    planned = planned_runs(config)
    summary = {
        "name": config.get("name", root.name),
        "steps": study.steps,
        "rewards": study.names,
        "runs": {arm: sorted(by) for arm, by in study.runs.items()},
        "planned_runs": len(planned),
        "missing_runs": [f"{a} seed {s}" for a, s in planned if s not in study.runs.get(a, {})],
        "primary_endpoint": primary.label(),
        "declared": {f"{a} - {b}": _declared_record(p, alpha) for (a, b), p in declared.items()},
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


def per_arm_heading(steps: int, config: dict, format_reward: str | None, threshold: float) -> list[str]:
    """The per-arm table's heading: how its AUC and steps-to-threshold are computed (the config's ``auc`` and
    ``steps_to``; a preregistered plan may define them)."""
    if config.get("auc", "mean") == "mean" and config.get("steps_to", "trailing3") == "trailing3":
        return ["## Per arm, training (mean over seeds; final = last logged step; AUC = mean over steps)", ""]
    auc = {"mean": "the mean over steps", "trapezoid": f"the trapezoid over steps 1-{steps} divided by {steps}"}
    reach = {
        "trailing3": "the first step whose 3-step trailing mean reaches it",
        "first": f"the first step whose training pass rate reaches it, a run that never does counted as {steps + 1} "
        "(censored) in the mean",
    }
    return [
        "## Per arm, training (mean over seeds; final = last logged step)",
        "",
        f"As the config defines them (`auc = {config.get('auc', 'mean')!r}`, `steps_to = "
        f"{config.get('steps_to', 'trailing3')!r}`, the plan's definitions): AUC = {auc[config.get('auc', 'mean')]}"
        + (
            f"; steps to {format_reward} >= {threshold} = {reach[config.get('steps_to', 'trailing3')]}"
            if format_reward
            else ""
        )
        + ".",
        "",
    ]


def _declared_record(p, alpha: float) -> dict | None:
    """A declared comparison's summary record, with its verdict by the plan's rule."""
    record = _paired_record(p)
    return None if record is None else {**record, "verdict": p.verdict(alpha)}


def _finite_json(x):
    """NaN -> None, so summary.json is strict JSON."""
    if isinstance(x, float):
        return None if math.isnan(x) or math.isinf(x) else x
    if isinstance(x, dict):
        return {str(k): _finite_json(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite_json(v) for v in x]
    return x
