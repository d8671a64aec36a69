"""What is compared (an ``Endpoint``: held-out, training AUC or final step) and the paired comparisons."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from mrtpo_openrlhf.paths import REPO_ROOT

from ..stats import AUC_RULES, Paired, heldout_noise, holm, noise_floor, paired
from .levels import INSTRUCTION, LEVELS, PROMPT, UNSEEN, heldout_rows, mean_level, per_prompt_levels
from .plan import planned_seeds
from .runs import TOTAL, Study, _last, length_key, per_seed, series


def _paired_record(p: Paired | None) -> dict[str, Any] | None:
    """``summary.json``'s record of a comparison (``planned`` only where the config says it)."""
    if p is None:
        return None
    record = asdict(p)
    if record["planned"] is None:
        record.pop("planned")
    return record


@dataclass(frozen=True)
class Endpoint:
    """What is compared: ``heldout`` (the final checkpoint on unseen prompts), ``auc`` (over training steps, as the
    config's ``auc`` says: ``auc_rule``) or ``final`` (the last training step), of ``name`` (a reward, ``total``, or
    ``length``)."""

    kind: str
    name: str

    def label(self) -> str:
        what = {
            TOTAL: "summed reward",
            LENGTH: "response length (tokens)",
            INSTRUCTION: "instruction-level pass rate",
            PROMPT: "prompt-level pass rate",
            UNSEEN: "instruction-level pass rate on unseen constraint types",
        }.get(self.name, self.name)
        return {"heldout": f"held-out {what}", "auc": f"{what}, training AUC", "final": f"{what}, final step"}[
            self.kind
        ]


LENGTH = "length"
BATCH_INSTRUCTION_LEVEL = "constraints_satisfied_frac"  # the training batch's instruction level (tasks/instruction)


def _metric_key(study: Study, name: str) -> str | None:
    if name == LENGTH:
        return length_key(study.runs)
    if name == INSTRUCTION:
        return BATCH_INSTRUCTION_LEVEL
    return TOTAL if name == TOTAL else f"reward/{name}/mean"


def _levels(study: Study, heldout: dict, name: str) -> list[float | None]:
    """Per held-out prompt, ``name``'s level (``levels``) of one checkpoint's scores."""
    rows = heldout_rows(study.config, REPO_ROOT) if name == UNSEEN else None
    return per_prompt_levels(heldout, name, rows)


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
            elif ep.name in LEVELS:
                out[seed] = mean_level(_levels(study, h, ep.name))
            elif ep.name == LENGTH:
                out[seed] = float(h.get("mean_response_tokens", math.nan))
            else:
                out[seed] = float(h.get("rewards", {}).get(ep.name, math.nan))
        return out
    key = _metric_key(study, ep.name)
    if key is None:
        return {}
    return per_seed(study.runs, arm, key, study.steps, auc_rule(study) if ep.kind == "auc" else _last)


def auc_rule(study: Study):
    """The training-curve AUC the study's config names (``auc``: the mean over steps by default)."""
    return AUC_RULES[study.config.get("auc", "mean")]


def _seed_noise(study: Study, a: str, b: str, seeds: Sequence[int], ep: Endpoint) -> float:
    """The within-run noise floor of one seed's A - B (``stats.noise_floor`` / ``stats.heldout_noise``)."""
    if ep.kind in ("auc", "final"):
        key = _metric_key(study, ep.name)
        ca = [series(study.runs[a][s], key, study.steps) for s in seeds]
        cb = [series(study.runs[b][s], key, study.steps) for s in seeds]
        return noise_floor(ca, cb, ep.kind, study.config.get("auc", "mean"))
    per = []
    for s in seeds:
        ha, hb = study.file(a, s, "heldout"), study.file(b, s, "heldout")
        if ep.name == TOTAL:
            per.append(heldout_noise(ha.get("per_prompt_total", []), hb.get("per_prompt_total", [])))
        elif ep.name in LEVELS:
            per.append(heldout_noise(_levels(study, ha, ep.name), _levels(study, hb, ep.name)))
        elif ep.name != LENGTH:  # a 0/1 reward: the binomial standard error over the scored responses
            va, vb = (h.get("rewards", {}).get(ep.name, math.nan) for h in (ha, hb))
            na, nb = scored_responses(ha, ep.name), scored_responses(hb, ep.name)
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
    p.seeds = seeds
    return p


def primary_endpoint(study: Study) -> Endpoint:
    """The config's ``primary_endpoint`` (the summed reward unless the plan names the instruction level) on the
    held-out scores, or on the training curve's AUC when no run was scored held out."""
    return Endpoint("heldout" if study.has_heldout else "auc", study.config.get("primary_endpoint", TOTAL))


def scored_responses(heldout: dict[str, Any], name: str) -> int:
    """How many held-out responses scored reward ``name``: those whose prompt carries it (``names_by_prompt``), or
    every response where prompts carry the same rewards."""
    names = heldout.get("names_by_prompt")
    if names:
        n = sum(name in names[i] for i, _ in heldout.get("per_response") or [] if i < len(names))
        if n:
            return n
    return max(1, heldout.get("responses", 1))


def level_names(study: Study, kind: str) -> list[str]:
    """The levels reported beside the per-reward endpoints when the plan judges on the instruction level (and, held
    out, the response length, one of that plan's secondary endpoints)."""
    if study.config.get("primary_endpoint", TOTAL) != INSTRUCTION:
        return []
    return [*LEVELS, LENGTH] if kind == "heldout" else [INSTRUCTION]


def reward_names(study: Study, kind: str) -> list[str]:
    """The per-reward endpoints: the training rewards, and held out also the rewards scored only there (the types
    a multi-constraint study keeps unseen in training), sorted."""
    if kind != "heldout":
        return list(study.names)
    scored = {
        n
        for by in study.files.values()
        for f in by.values()
        for n in ((f or {}).get("heldout") or {}).get("rewards") or {}
    }
    return list(study.names) + sorted(scored - set(study.names))


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
            for n in reward_names(study, kind) + [TOTAL] + level_names(study, kind):
                ep = Endpoint(kind, n)
                if ep == primary and (a, b) in declared:
                    continue
                p = compare(study, a, b, ep, excluded)
                if p:
                    secondary[f"{a} - {b} | {ep.label()}"] = p
    return secondary


def k_bin_differences(study: Study, arm: str, baseline: str, excluded=None) -> dict[tuple[int, int], Paired]:
    """``arm`` - ``baseline`` on the held-out instruction level within each bin of constraints per prompt
    (``levels.K_BINS``), paired by seed over the seeds both have scored ({} when none)."""
    from .levels import K_BINS, by_k

    if arm not in study.runs or baseline not in study.runs:
        return {}
    seeds = [
        s
        for s in sorted(set(study.runs[arm]) & set(study.runs[baseline]))
        if (arm, baseline, s) not in (excluded or {})
        and study.file(arm, s, "heldout")
        and study.file(baseline, s, "heldout")
    ]
    if not seeds:
        return {}
    out = {}
    for k_bin in K_BINS:
        a = np.array([by_k(study.file(arm, s, "heldout"))[k_bin] for s in seeds])
        b = np.array([by_k(study.file(baseline, s, "heldout"))[k_bin] for s in seeds])
        out[k_bin] = paired(a, b)
    return out
