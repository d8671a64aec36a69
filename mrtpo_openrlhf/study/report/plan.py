"""What the study config declares (the comparisons and their seeds, an amended plan) and which runs pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..config import ARMS, ablation_arms, method_arm
from .runs import ReportError, Study


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
# how the report computes an endpoint the plan defines (never how a run trains): a config may state them for runs
# whose study.json predates the keys
REPORT_KEYS = ("auc", "steps_to", "primary_endpoint", "localization_rule")


def amended_plan(config_file: Path, as_run: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The study config at ``config_file`` (TOML, validated) and the plan keys in which it differs from
    ``as_run`` (the runs' ``study.json``); any other difference is an error, since its runs would not be the
    runs the config describes."""
    from ..config import ConfigError, StudyConfig, load_config

    try:
        plan = load_config(config_file).to_dict()
    except ConfigError as exc:
        raise ReportError(f"--config: {exc}") from None
    if not as_run:
        raise ReportError(f"--config {config_file}: the study folder has no study.json to check it against")
    defaults = {k: f.default for k, f in StudyConfig.__dataclass_fields__.items()}
    for key in REPORT_KEYS:  # a key newer than the runs, left at its default, is not an amendment
        if key not in as_run and plan.get(key) == defaults[key]:
            plan.pop(key, None)
    free = (*PLAN_KEYS, *REPORT_KEYS)
    other = sorted(k for k in set(plan) | set(as_run) if k not in free and plan.get(k) != as_run.get(k))
    if other:
        shown = "; ".join(f"{k}: {plan.get(k)!r} vs {as_run.get(k)!r} as run" for k in other)
        raise ReportError(
            f"--config {config_file} differs from the runs' study.json beyond the plan keys {', '.join(PLAN_KEYS)}: "
            f"{shown}"
        )
    return plan, [k for k in free if plan.get(k, {}) != as_run.get(k, {})]


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
