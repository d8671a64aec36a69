"""The verdicts on the claims and the caveats, computed from the comparisons by fixed rules."""

from __future__ import annotations

import math
from typing import Any

from ...core.placements import PLACEMENTS
from ..config import ARMS, ablation_arms, measure_arms
from ..stats import Paired, area, steps_to
from .endpoints import LENGTH, Endpoint, compare, k_bin_differences
from .plan import planned_seeds
from .runs import Study, curves, per_seed
from .text import _fmt, _interval, _mean, _p, _sd, _signed


def _evidence(p: Paired | None, declared: bool = True) -> str:
    if p is None:
        return "not run"
    if p.n < 2:
        return f"{_signed(p.mean)} (one seed: no interval; higher in {p.wins}/{p.n})"
    holm_p = f", Holm p {_p(p.p_holm)}" if p.p_holm is not None else ""
    note = "" if declared else "; not declared: unadjusted"
    if p.incomplete:
        note = f"; {p.n} of {p.planned} planned seeds: unadjusted, not judged"
    return (
        f"{_signed(p.mean)} (95% t-CI {_interval(p.t_low, p.t_high)}, noise floor {_fmt(p.noise)}, sign-flip p "
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


def localization_claims(study: Study) -> list[dict[str, str]]:
    """Claim 1 by the plan's rule on the null controls of ``study localize`` where they were run, a row per measure
    (``localization.localization_claim``), else the training-time tokens-for-80% with the warning that without a
    null it does not show localization."""
    from .localization import localization_claim as by_rule

    judged = by_rule(study.folder, study.config.get("task"), study.config.get("localization_rule", "null_and_random"))
    if judged:
        return judged
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
    return [
        {
            "claim": "1. Localization: a reward's distance sits on the span its checker reads, beyond a null block "
            "removed the same way (paper: 80% of the distance on 26-29% of the tokens on SQL)",
            "verdict": "no null control",
            "evidence": "MRTPO arm, replayed pairs during training, tokens for 80%: "
            f"{measured or 'not measured'}. No null control recorded, so this cannot be read as localization: a "
            "position-free random profile (i.i.d. exponential per token) already needs about 44% of the tokens",
        }
    ]


def replayed_pairs_frac(study: Study) -> float:
    """The MRTPO arm's share of (response, reward) pairs replayed: each seed's mean over steps, averaged over seeds
    (NaN without an MRTPO arm). Claim 4 and the README's cost table read it."""
    if "mrtpo" not in study.runs:
        return math.nan
    return _mean(list(per_seed(study.runs, "mrtpo", "mrtpo/replayed_pairs_frac", study.steps, area).values()))


def cost_claim(study: Study, cost: dict[str, Any]) -> dict[str, str]:
    """Claim 4: the share of (response, reward) pairs replayed, and the step time paired within a seed."""
    frac = replayed_pairs_frac(study)
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

    planned = set(study.config.get("arms") or study.runs)
    unplanned = "not in this study's plan"
    out = localization_claims(study)
    parts = [("MRTPO-GDPO", "mrtpo", "gdpo"), ("GDPO-GRPO", "gdpo", "grpo")]
    states, evidence = [], []
    for name, a, b in parts:
        if not {a, b} <= planned:
            evidence.append(f"{name} {unplanned}")
            continue
        p, d = get(a, b)
        states.append(_held(p, "A > B", alpha, d))
        evidence.append(f"{name} {_evidence(p, d)}")
    out.append(
        {
            "claim": f"2. Rewards rise faster: MRTPO > GDPO > GRPO ({primary.label()})",
            "verdict": _combine(states) if states else "not tested",
            "evidence": "; ".join(evidence),
        }
    )
    claimed = {(a, b) for _, a, b in parts} | {("mrtpo", b) for b, _ in ablation_claims()}
    for a, b in [pair for pair in declared if pair not in claimed]:  # the plan's other declared comparisons
        p, d = get(a, b)
        out.append(
            {
                "claim": f"2-{a}. {a} > {b} (declared; {primary.label()})",
                "verdict": _held(p, "A > B", alpha, d),
                "evidence": f"{a}-{b} {_evidence(p, d)}",
            }
        )
    if format_reward:
        key = f"reward/{format_reward}/mean"
        rule = study.config.get("steps_to", "trailing3")
        reach = {
            arm: [steps_to(row, threshold, rule) for row in curves(study.runs, arm, key, study.steps)[1]]
            for arm in study.runs
        }
        never = f"{study.steps + 1} (never)" if rule == "first" else f">{study.steps}"
        txt = "; ".join(f"{arm}: {', '.join(str(s) if s else never for s in v)}" for arm, v in reach.items())
        how = (
            f"first reaches {threshold} (censored at {study.steps + 1})"
            if rule == "first"
            else f">= {threshold} (3-step trailing mean)"
        )
        out.append(
            {
                "claim": f"2b. Steps until the {format_reward} rate {how}, per seed (secondary)"
                if rule == "first"
                else f"2b. Steps to {format_reward} {how}, per seed (secondary)",
                "verdict": "see numbers",
                "evidence": txt,
            }
        )
    for tag, (b, text) in zip("abcdefghijklmnopqrstuvwxyz", ablation_claims()):
        p, d = get("mrtpo", b)
        out.append(
            {
                "claim": f"3{tag}. {text}",
                "verdict": _held(p, "A > B", alpha, d),
                "evidence": f"MRTPO-{b.removeprefix('mrtpo-')} "
                + (_evidence(p, d) if b in planned or p is not None else unplanned),
            }
        )
    for b in [arm for arm in measure_arms() if arm in study.runs]:  # no direction declared: numbers only
        p, d = get(b, "mrtpo")
        out.append(
            {
                "claim": f"3-{b}. The relevance measure {ARMS[b].relevance} in place of JS ({b} - MRTPO)",
                "verdict": "see numbers",
                "evidence": f"{b.removeprefix('mrtpo-')}-MRTPO {_evidence(p, d)}",
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
    return out + instruction_claims(study, excluded)


def instruction_claims(study: Study, excluded) -> list[dict[str, str]]:
    """The paper's instruction-following readings, where the plan judges on the held-out instruction level: the
    gain on constraint types unseen in training (a secondary endpoint) and the gain by the number of constraints
    per prompt (exploratory). Numbers only: the plan decides on neither."""
    from .levels import INSTRUCTION, UNSEEN

    if study.config.get("primary_endpoint") != INSTRUCTION or not study.has_heldout or "gdpo" not in study.runs:
        return []
    arms = [a for a in ("mrtpo", *measure_arms()) if a in study.runs]
    unseen = Endpoint("heldout", UNSEEN)
    by_k = []
    for arm in arms:
        diffs = k_bin_differences(study, arm, "gdpo", excluded)
        by_k.append(
            f"{arm}-GDPO: "
            + ", ".join(
                f"K {low}-{high} {_signed(p.mean)} {_interval(p.t_low, p.t_high)}" for (low, high), p in diffs.items()
            )
            + f" ({next(iter(diffs.values())).n} seeds)"
            if diffs
            else f"{arm}-GDPO not run"
        )
    return [
        {
            "claim": "6. The gain shows on constraints unseen in training (paper: IFBench, +2.4 and +3.2 "
            f"instruction-level points over GDPO; here {unseen.label()})",
            "verdict": "see numbers (secondary)",
            "evidence": "; ".join(
                f"{a}-GDPO {_evidence(compare(study, a, 'gdpo', unseen, excluded), False)}" for a in arms
            ),
        },
        {
            "claim": "7. The gain scales with the number of rewards per prompt (paper: largest with 5-13 constraints; "
            "here A - GDPO on the held-out instruction level by constraints per prompt K)",
            "verdict": "see numbers (exploratory)",
            "evidence": "; ".join(by_k),
        },
    ]


def ablation_claims() -> list[tuple[str, str]]:
    """(arm, claim) of each placement ablation arm that states a claim (``core.placements``: ``mrtpo-shuffle``,
    ``mrtpo-joint``), in registration order: the report's claims 3a, 3b, ..."""
    by_arm = {p.arm: p.claim for p in PLACEMENTS.values() if p.arm is not None}
    return [(arm, by_arm[arm]) for arm in ablation_arms() if by_arm.get(arm)]


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
    one_sided = []
    for a, b in declared:
        ran_a, ran_b = set(study.runs.get(a, {})), set(study.runs.get(b, {}))
        if not (ran_a and ran_b):
            continue  # a comparison not begun: "not run" says it elsewhere
        seeds = planned_seeds(study.config, a, b) or sorted(ran_a | ran_b)
        one_sided += [
            f"{a} - {b} seed {s} ({a if s in ran_a else b} only)" for s in seeds if (s in ran_a) != (s in ran_b)
        ]
    if one_sided:
        out.append(
            "Seeds of a begun comparison with a finished run on one side only, left out of their comparison until "
            "the other side runs: " + ", ".join(one_sided) + "."
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
