"""Claim 1 judged by the plan's localization rule, from the ``study localize`` summaries.

The rule (the tool study's plan, "Localization (claim 1) with a null control"): a reward localizes when its distance
share on the span its checker reads exceeds the null block's share on the same span, and its tokens for 80% of the
distance are below the null's and a position-free random profile's. Each part is read off a 95% interval of the
paired difference: reward - null share above 0; reward - null and reward - random tokens for 80% below 0.

Intervals: a summary written with per-response values (``per_response`` in its ``null_control``, with each
response's prompt) is recomputed here cluster-robust over prompts (``stats.cluster_interval``). Older summaries
carry only their intervals over responses, computed with the old quantile table (``stats.legacy_t975``: 1.960 at
31 df): those are rescaled to Student's t, and the worst case any within-prompt correlation could give is bounded
(``stats.cluster_widening_bound``), since the cluster-robust interval itself cannot be computed from them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..stats import cluster_interval, cluster_widening_bound, legacy_t975, t975
from .text import _ci

RULE = (
    "a reward localizes when its distance share on the span its checker reads exceeds the null's share on the same "
    "span (95% interval of reward - null above 0) *and* its tokens for 80% of the distance are below the null's and "
    "a position-free random profile's (95% intervals of reward - null and reward - random below 0)"
)
# the rule a study's plan states (config ``localization_rule``): the tool study's asks both token comparisons, the
# multi-constraint study's the null's alone (the random profile's reported beside it)
RULES = {
    "null_and_random": RULE,
    "null": (
        "a reward localizes when its share of q on the span its checker reads exceeds the null's share on the same "
        "span (95% interval of reward - null above 0) *and* its tokens for 80% of q are below the null's (95% "
        "interval of reward - null below 0); the random profile's comparison is reported, not judged; a reward "
        "whose span is located on fewer than 3 prompts of a model is untested there"
    ),
}
# per rule, the fewest prompts of a model on which a reward's span must be located for the rule to judge it (the
# multi-constraint plan: a title is not always written, a satisfied no_comma has no comma to point at)
MIN_PROMPTS = {"null_and_random": 1, "null": 3}
PASSES, FAILS, UNTESTED = "passes", "fails", "untested"


def checker_spans(task: str | None) -> dict[str, str]:
    """reward -> the span kind its checker reads, from the task's registry entry ({} when none declared; ``"*"``:
    every reward's, as for one reward per constraint)."""
    from mrtpo_openrlhf.tasks import TASKS

    return dict(TASKS[task].checker_spans) if task in TASKS else {}


def span_of(spans: dict[str, str], reward: str) -> str | None:
    return spans.get(reward, spans.get("*"))


def exact_t(iv: dict | None) -> dict | None:
    """A legacy interval over responses rescaled from the quantile it was computed with to Student's t."""
    if not iv or iv.get("low") is None or iv.get("n", 0) < 2:
        return iv
    half = (iv["high"] - iv["low"]) / 2 * t975(iv["n"] - 1) / legacy_t975(iv["n"] - 1)
    return {**iv, "low": iv["mean"] - half, "high": iv["mean"] + half}


def worst_case(iv: dict | None, per_cluster: int | None) -> dict | None:
    """A legacy interval over responses widened to the largest cluster-robust interval any within-prompt
    correlation could give (no prompt holding more than ``per_cluster`` of its values)."""
    if not iv or iv.get("low") is None or not per_cluster:
        return None
    widen = cluster_widening_bound(iv["n"], per_cluster, legacy_t975(iv["n"] - 1))
    if math.isnan(widen):
        return None
    half = (iv["high"] - iv["low"]) / 2 * widen
    return {**iv, "low": iv["mean"] - half, "high": iv["mean"] + half}


def _above(iv: dict | None) -> bool | None:
    return None if not iv or iv.get("low") is None else iv["low"] > 0


def _below(iv: dict | None) -> bool | None:
    return None if not iv or iv.get("high") is None else iv["high"] < 0


def rule_verdict(
    span_diff: dict | None, tok_null: dict | None, tok_random: dict | None, rule: str = "null_and_random"
) -> str:
    """The plan's rule (``RULES``) on three intervals: ``untested`` when the checker's span was not measured."""
    if span_diff is None:
        return UNTESTED
    random_ok = _below(tok_random) if rule == "null_and_random" else True
    return PASSES if _above(span_diff) and _below(tok_null) and random_ok else FAILS


@dataclass
class Judged:
    """One (model, reward) under the rule. ``clustered``: intervals over prompts (else over responses, legacy);
    ``worst``: the legacy intervals widened to the worst clustering (None when clustered or not boundable)."""

    label: str
    reward: str
    span: str | None
    span_diff: dict | None
    tok_null: dict | None
    tok_random: dict | None
    clustered: bool
    worst: tuple[dict | None, dict | None, dict | None] | None = None
    measured: tuple[str, ...] = ()  # the span kinds its summary measured
    rule: str = "null_and_random"  # RULES
    located_prompts: int | None = None  # prompts with the span located in a response (per-response summaries)

    @property
    def too_few_prompts(self) -> bool:
        """The span was measured but located on fewer prompts than the rule needs to judge it."""
        return self.located_prompts is not None and 0 < self.located_prompts < MIN_PROMPTS[self.rule]

    @property
    def verdict(self) -> str:
        if self.too_few_prompts:
            return UNTESTED
        return rule_verdict(self.span_diff, self.tok_null, self.tok_random, self.rule)

    @property
    def worst_verdict(self) -> str | None:
        return None if self.worst is None else rule_verdict(*self.worst, self.rule)


def judge(label: str, nc: dict[str, Any], reward: str, span: str | None, per_cluster: int | None) -> Judged:
    """The rule's intervals for one reward's ``null_control`` record."""
    rows = nc.get("per_response")
    if rows is not None:  # recompute cluster-robust over prompts

        def over_prompts(pairs: list[tuple[float | None, Any]]) -> dict:
            return cluster_interval([v for v, _ in pairs], [c for _, c in pairs])

        def tok(key: str) -> dict:
            return over_prompts(
                [
                    (None if t["reward"] is None or t[key] is None else t["reward"] - t[key], r["prompt"])
                    for r in rows
                    for t in [r["tokens_for_80pct"]]
                ]
            )

        measured = span is not None and any(span in r["spans"] for r in rows)
        shares = [(r["spans"][span], r["prompt"]) for r in rows if measured and span in r["spans"]]
        span_diff = over_prompts([(s["reward"] - s["null"], p) for s, p in shares]) if measured else None
        kinds = tuple(sorted({k for r in rows for k in r["spans"]}))
        located = len({p for _, p in shares}) if measured else None
        return Judged(
            label, reward, span, span_diff, tok("null"), tok("random"), True, measured=kinds, located_prompts=located
        )
    tok = nc.get("tokens_for_80pct", {})
    raw = ((nc.get("spans") or {}).get(span) or {}).get("reward_minus_null") if span else None
    legacy = (raw, tok.get("reward_minus_null"), tok.get("reward_minus_random"))
    worst = tuple(worst_case(iv, per_cluster) for iv in legacy)
    return Judged(
        label,
        reward,
        span,
        *(exact_t(iv) for iv in legacy),
        clustered=False,
        worst=None if any(w is None for w in worst[1:]) else worst,
        measured=tuple(sorted(nc.get("spans") or {})),
    )


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def judge_all(
    folder: Path, task: str | None, measure: str | None = None, rule: str = "null_and_random"
) -> tuple[list[Judged], dict[str, dict], dict[str, dict]]:
    """Every (model, reward) of ``folder/localization`` under the rule; also each label's summary and probe.
    ``measure``: another relevance measure's summaries (``<label>/<measure>/``; default: the default measure's)."""
    from ..localize import load_localization

    summaries = load_localization(folder, measure)
    probes = {label: _read(folder / "localization" / label / "probe.json") for label in summaries}
    spans = checker_spans(task)
    judged = []
    for label, summary in summaries.items():
        per_cluster = (probes[label].get("setup") or {}).get("samples")
        for reward, nc in sorted((summary.get("null_control") or {}).items()):
            j = judge(label, nc, reward, span_of(spans, reward), per_cluster)
            j.rule = rule
            judged.append(j)
    return judged, summaries, probes


def other_measures(folder: Path) -> list[str]:
    """The relevance measures besides the default with summaries under ``folder/localization/<label>/<measure>/``."""
    from mrtpo_openrlhf.core.relevance import RELEVANCE

    found = {p.parent.name for p in (folder / "localization").glob("*/*/summary.json")}
    return [m for m in RELEVANCE if m in found]


def counts(judged: list[Judged], worst: bool = False) -> dict[str, dict[str, int]]:
    """reward -> {verdict: models}; ``worst``: under the worst-case clustering (legacy summaries only)."""
    out: dict[str, dict[str, int]] = {}
    for j in judged:
        v = j.worst_verdict if worst else j.verdict
        if v is not None:
            out.setdefault(j.reward, {}).setdefault(v, 0)
            out[j.reward][v] += 1
    return out


def rule_summary(judged: list[Judged], worst: bool = False) -> str:
    """'correctness 0 of 7, format 5 of 7; function untested': in how many models each reward localizes by the
    rule (``worst``: under the worst-case clustering)."""
    tested, untested = [], []
    for reward, c in counts(judged, worst).items():
        total = sum(c.values())
        if c.get(UNTESTED) == total:
            untested.append(reward)
        else:
            extra = f" ({c[UNTESTED]} untested)" if c.get(UNTESTED) else ""
            tested.append(f"{reward} {c.get(PASSES, 0)} of {total}{extra}")
    return ", ".join(tested) + (f"; {', '.join(untested)} untested" if untested else "")


def same_prompts_line(summaries: dict[str, dict], probes: dict[str, dict]) -> str:
    """Whether every model was localized on the same prompts with the same null sentence, in words."""
    setups = {
        (Path(str(s.get("data", "?"))).name, s.get("prompts"), s.get("samples"), s.get("seed"))
        for p in probes.values()
        if (s := p.get("setup"))
    }
    nulls = {(s.get("run") or {}).get("null block") for s in summaries.values()}
    if len(setups) != 1 or len(nulls) != 1 or not all(p.get("setup") for p in probes.values()):
        return "The models were not all localized on the same prompts with one null sentence (see each probe.json)."
    data, prompts, samples, seed = next(iter(setups))
    return (
        f"All {len(summaries)} models were localized on the same {prompts} prompts (the first {prompts} rows of "
        f"`{data}`), {samples} sampled responses each (sampling seed {seed}), with one null sentence "
        f'("{next(iter(nulls))}"): a model\'s {prompts * samples} responses are {prompts} clusters of {samples}, '
        f"and the {len(summaries)} models share those prompts, so they are not independent draws of prompts either."
    )


def commit_line(summaries: dict[str, dict]) -> str:
    """The code commit (and base model) each localization ran from, as its summary's run record says (the plan's
    amendment 2); a summary written before ``study localize`` recorded it says where it was added instead."""
    parts = []
    for label, s in summaries.items():
        run = s.get("run") or {}
        commit = run.get("commit")
        if commit and commit != "not recorded":
            text = f"`{commit[:10]}`" + (" (dirty)" if run.get("dirty") else "")
        else:
            text = "not recorded" + (f" (file added in `{run['added_in'][:7]}`" if run.get("added_in") else " (")
            claimed = run.get("commit_claimed")
            text += (f"; that commit's message names `{claimed[:7]}`, not checkable" if claimed else "") + ")"
            text = text.replace(" ()", "")
        base = run.get("base_model_sha256")
        parts.append(f"{label}: {text}" + (f", base `{base[:12]}`" if base else ""))
    return "Code commit each localization ran from (`run.commit` of its summary.json): " + "; ".join(parts) + "."


def null_control_section(folder: Path, task: str | None, rule: str = "null_and_random") -> list[str]:
    """The reward-vs-null tables, the plan's rule per (model, reward), and what the intervals can support; then the
    rule's table for each other relevance measure localized (``study localize --relevance``)."""
    md = _null_control_section(folder, task, None, rule)
    others = other_measures(folder)
    if others and md:  # several measures: name the default one too, so no table is read as another's
        from ...core.settings import DEFAULT_RELEVANCE

        md[0] += f" (relevance measure `{DEFAULT_RELEVANCE}`, the default)"
    for measure in others:
        judged, _, _ = judge_all(folder, task, measure, rule)
        if judged:
            md += [f"### Relevance measure `{measure}`", ""] + rule_section(judged)
    return md


def _null_control_section(folder: Path, task: str | None, measure: str | None, rule: str) -> list[str]:
    judged, summaries, probes = judge_all(folder, task, measure, rule)
    if not summaries:
        return []
    without = [label for label, s in summaries.items() if not s.get("null_control")]
    legacy = sorted({j.label for j in judged if not j.clustered})
    if not judged:  # no null control anywhere: nothing to judge by the rule
        return [
            "### Against the null block",
            "",
            "A reward localizes when it beats its null, not when it beats uniform. The null is a neutral sentence no "
            "reward reads, put in the prompt and removed the way the reward's own block is (docs/study.md); the "
            "random profile is i.i.d. exponential per token (no position preference). Means with 95% t-intervals "
            "over responses.",
            "",
            f"No null control recorded for {', '.join(without)} (diagnosed before the null block existed).",
            "",
        ]
    md = [
        "### Against the null block",
        "",
        "A reward localizes when it beats its null, not when it beats uniform. The null is a neutral sentence no "
        "reward reads, put in the prompt and removed the way the reward's own block is (docs/study.md); the random "
        "profile is i.i.d. exponential per token (no position preference). "
        + (
            "Means with 95% t-intervals over responses (Student's t: these summaries were written with a normal "
            "1.960 beyond 30 df, rescaled here to 2.040 at 31 df), for the summaries without per-response values: "
            + ", ".join(legacy)
            + "; cluster-robust intervals over prompts for the others."
            if legacy
            else "Means with 95% cluster-robust intervals over prompts (CR1, t with prompts - 1 df)."
        ),
        "",
        same_prompts_line(summaries, probes),
        "",
        commit_line(summaries),
        "",
    ]
    if without:
        md += [f"No null control recorded for {', '.join(without)} (diagnosed before the null block existed).", ""]
    rows = []
    for label, summary in summaries.items():
        fix = (lambda iv: iv) if any(j.clustered for j in judged if j.label == label) else exact_t
        for name, nc in sorted((summary.get("null_control") or {}).items()):
            tok, ab = nc.get("tokens_for_80pct") or {}, nc.get("tokens_for_80pct_abs") or {}
            spans = "; ".join(
                f"{kind}: {_ci(fix(sp.get('reward')))} vs null {_ci(fix(sp.get('null')))}, diff "
                f"{_ci(fix(sp.get('reward_minus_null')))}"
                for kind, sp in sorted((nc.get("spans") or {}).items())
            )
            fractions = " / ".join(_ci(fix(tok.get(k))) for k in ("reward", "null", "random"))
            tokens = " / ".join(_ci(fix(ab.get(k)), False, 1) for k in ("reward", "null", "random"))
            rows.append(f"| {label} | {name} | {nc.get('responses', '–')} | {spans or '–'} | {fractions} | {tokens} |")
    if rows:
        md += [
            "| model | reward | responses | distance share per span: reward vs null | tokens for 80%: reward / null / "
            "random (fraction) | the same in tokens |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    md += rule_section(judged)
    return md


def rule_section(judged: list[Judged]) -> list[str]:
    if not judged:
        return []
    any_worst = any(j.worst is not None for j in judged)
    head = [
        "model",
        "reward",
        "span its checker reads",
        "span share: reward - null",
        "tokens for 80%: reward - null",
        "reward - random",
        "the plan's rule",
    ] + (["worst-case clustering"] if any_worst else [])
    md = [
        "### Claim 1 by the plan's rule",
        "",
        f"The plan's rule, as written: {RULES[judged[0].rule]}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for j in judged:
        cells = [
            j.label,
            j.reward,
            f"`{j.span}`" if j.span else "none declared",
            _span_cell(j),
            _ci(j.tok_null),
            _ci(j.tok_random),
            j.verdict,
        ]
        if any_worst:
            cells.append(j.worst_verdict or "–")
        md.append("| " + " | ".join(cells) + " |")
    md += ["", "Models in which each reward localizes by the rule: " + rule_summary(judged) + "."]
    md += [f"- {line}" for line in rule_notes(judged)]
    return md + [""]


def _span_cell(j: Judged) -> str:
    if j.too_few_prompts:
        return f"located on {j.located_prompts} prompt{'s' if j.located_prompts != 1 else ''} (< {MIN_PROMPTS[j.rule]})"
    return _ci(j.span_diff) if j.span_diff else "not measured"


def rule_notes(judged: list[Judged]) -> list[str]:
    """What the rule's table means, computed from it: why each reward fails, what is untested, what the committed
    intervals can and cannot support, and the relaxed reading (exploratory)."""
    notes = []
    by: dict[str, list[Judged]] = {}
    for j in judged:
        by.setdefault(j.reward, []).append(j)
    for reward, js in by.items():
        n = len(js)
        untested = [j for j in js if j.verdict == UNTESTED]
        few = [j for j in untested if j.too_few_prompts]
        if few or (untested and len(untested) < n):
            tested = [j for j in js if j.verdict != UNTESTED]
            why = []
            if few:
                why.append(
                    f"its span located on fewer than {MIN_PROMPTS[few[0].rule]} prompts in {len(few)} (the plan's "
                    "rule: untested there, not negative)"
                )
            if len(untested) > len(few):
                why.append(f"its span not measured in {len(untested) - len(few)}")
            notes.append(
                f"{reward}: untested in {len(untested)} of {n} models ({'; '.join(why)}); of the {len(tested)} "
                f"tested, span share above its null's in {sum(bool(_above(j.span_diff)) for j in tested)}, tokens "
                f"for 80% below its null's in {sum(bool(_below(j.tok_null)) for j in tested)}, both (the rule) in "
                f"{sum(j.verdict == PASSES for j in tested)}."
            )
            continue
        if untested:
            fewer = sum(bool(_below(j.tok_null)) for j in js)
            notes.append(
                f"{reward}: untested, not negative: the span its checker reads (`{js[0].span or 'none declared'}`) "
                f"was not measured in {len(untested)} of {n} models (they measured "
                f"{' and '.join(f'`{k}`' for k in sorted({k for j in untested for k in j.measured})) or 'no span'}"
                "); its tokens-for-80% part alone holds in "
                f"{fewer} of {n}. Measuring it needs the checkpoints again (`study localize` now records this span)."
            )
            continue
        span_ok = sum(bool(_above(j.span_diff)) for j in js)
        tok_ok = sum(bool(_below(j.tok_null)) for j in js)
        notes.append(
            f"{reward}: span share above its null's in {span_ok} of {n} models; tokens for 80% below its null's in "
            f"{tok_ok} of {n}; both (the rule) in {sum(j.verdict == PASSES for j in js)} of {n}."
        )
    relaxed = {r: sum(bool(_above(j.span_diff)) for j in js) for r, js in by.items() if any(j.span_diff for j in js)}
    notes += (
        []
        if not relaxed
        else [
            "Exploratory, not the plan's rule: reading the span part alone (the reward's share on its span beats the "
            "null's), "
            + ", ".join(f"{r} holds in {k} of {len(by[r])}" for r, k in relaxed.items())
            + ' ("claim 1 holds for two of three rewards" is this relaxed reading, not the rule).'
        ]
    )
    legacy = [j for j in judged if not j.clustered]
    if legacy:
        notes.append(
            "Clustering: the responses of a prompt are not independent, but these summaries keep no per-response "
            "values or prompt ids, so cluster-robust intervals over prompts cannot be computed from what is "
            "committed (the replay records stayed beside the checkpoints, which are gone). What they can support: "
            "the worst case, the widest cluster-robust interval any within-prompt correlation could give (CR1 "
            "variance at most G m (n - 1) / ((G - 1) n) times the one over responses, m = samples per prompt, t with "
            "G - 1 df). Under it, models in which each reward localizes: "
            + rule_summary(legacy, worst=True)
            + (
                f" ({', '.join(f'{j.reward} in {j.label}' for j in legacy if j.worst_verdict == PASSES)})"
                if any(j.worst_verdict == PASSES for j in legacy)
                else ""
            )
            + ". The truth lies between that and the rule's count over responses; new localizations record the "
            "per-response values and are judged cluster-robust over prompts."
        )
    return notes


def localization_claim(folder: Path, task: str | None, rule: str = "null_and_random") -> list[dict[str, str]]:
    """Claim 1's rows, one per relevance measure localized (the default's first): the rule's count per reward as
    the verdict; [] without null controls."""
    rows = []
    for measure in [None, *other_measures(folder)]:
        judged, summaries, _ = judge_all(folder, task, measure, rule)
        if not judged:
            continue
        clustered = all(j.clustered for j in judged)
        intervals = "cluster-robust over prompts" if clustered else "95% t-intervals over responses"
        evidence = (
            f"the plan's rule ({intervals}) on {len(summaries)} models (base and final checkpoints): "
            + "; ".join(note.rstrip(".") for note in rule_notes(judged)).replace("|", "/")
        )
        claim = (
            "1. Localization: a reward's distance sits on the span its checker reads, beyond a null block removed the "
            "same way (paper: 80% of the distance on 26-29% of the tokens on SQL)"
        )
        rows.append(
            {
                "claim": claim if measure is None else f"1-{measure}. The same under the relevance measure {measure}",
                "verdict": "by the plan's rule: " + rule_summary(judged),
                "evidence": evidence,
            }
        )
    return rows
