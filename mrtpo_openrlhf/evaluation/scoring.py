"""Score and summarize through the benchmark registry, and the statistics every benchmark's summary uses.

Each benchmark's scorer (``mrtpo_openrlhf.tasks.<task>.benchmarks``; registered as ``Benchmark.scorer``) returns
one record dict per response with at least ``verdict`` (bool: the benchmark's headline per-example decision),
``reason`` ("" when it passed) and ``answer`` (what was extracted from the response); its summarizer turns records
into the official aggregate numbers: fractions in [0, 1] (as lm-evaluation-harness and BFCL write them), with a
standard error ``<key>_stderr`` where the number is a mean over independent examples (docs/eval.md, "Result
files"). The official rules each reproduces are in its module's docstring.
"""

from __future__ import annotations

import math
from collections import defaultdict
from math import comb
from typing import Any, Callable, Iterable, Sequence

from mrtpo_openrlhf.tasks import get_benchmark

from .data import EvalExample

NO_PREDICTION = "no prediction"  # the reason of an example a predictions file does not cover


# ----------------------------------------------------------------------------------------------- summaries
# Every score is a fraction in [0, 1]. A mean over independent examples (prompt-level accuracy, a per-category
# accuracy) carries ``<key>_stderr``; a mean over instructions or constraints does not (several per prompt are
# not independent draws). With samples an example's score is its mean over them, and the error is over examples.
def _w(record: dict) -> float:
    """A record's weight: 1, or 1/n_samples when its example has several samples (each example weighs 1)."""
    return record.get("weight", 1.0)


def _n_examples(records: Iterable[dict]) -> int:
    return round(sum(_w(r) for r in records))


def mean_stderr(values: Sequence[float]) -> float | None:
    """Standard error of a mean over independent examples: the sample standard deviation (n - 1 in the
    denominator) over sqrt(n), as lm-evaluation-harness's ``mean_stderr``; for 0/1 scores that is
    sqrt(p (1 - p) / (n - 1)). None for fewer than 2 examples."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _decisions(records: Iterable[dict], value: Callable[[dict], Any] = lambda r: r["verdict"]) -> list:
    """(example id, weight, 0/1 decision) of each record; a record without an id is an example of its own."""
    return [(r.get("id", f"#{i}"), _w(r), float(bool(value(r)))) for i, r in enumerate(records)]


def _per_example(decisions: Iterable[tuple[Any, float, float]]) -> list[float]:
    """Each example's score: the weighted mean of its samples' decisions."""
    sums: dict[Any, list[float]] = {}
    for key, w, x in decisions:
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += w * x
        acc[1] += w
    return [s / w for s, w in sums.values() if w]


def _count(x: float) -> int | float:
    """A number of correct examples: an int, or a float (the expected count) when samples make it fractional."""
    return int(round(x)) if abs(x - round(x)) < 1e-9 else round(x, 6)


def rate(decisions: Iterable[tuple[Any, float, float]]) -> dict[str, Any]:
    """``{"accuracy", "stderr", "correct", "count"}`` of one 0/1 decision per example (over examples)."""
    scores = _per_example(decisions)
    return {
        "accuracy": sum(scores) / len(scores) if scores else None,
        "stderr": mean_stderr(scores),
        "correct": _count(sum(scores)),
        "count": len(scores),
    }


def _flat(name: str, stats: dict[str, Any]) -> dict[str, Any]:
    return {name: stats["accuracy"], f"{name}_stderr": stats["stderr"]}


def _wmean(pairs: Iterable[tuple[float, float]]) -> float | None:
    """Weighted mean of (weight, value) pairs: decisions that are not one per example (instructions, constraints)."""
    pairs = list(pairs)
    total = sum(w for w, _ in pairs)
    return sum(w * v for w, v in pairs) / total if total else None


def _accuracy_by(records: Iterable[dict], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r.get(key) is not None:
            groups[str(r[key])].append(r)
    return {k: rate(_decisions(v)) for k, v in sorted(groups.items())}


def pass_at_k(records: list[dict]) -> dict[str, Any]:
    """``{"samples": {...}}`` when some example has several samples, else {}: mean accuracy over samples and the
    unbiased pass@k (Chen et al. 2021: 1 - C(n-c, k) / C(n, k) per example, averaged, with its standard error over
    examples) for k = 1, 2, 4, ... up to the smallest sample count of a predicted example (and that count). An
    example without a prediction counts 0."""
    if not any("sample" in r for r in records):
        return {}
    per_example: dict[str, list[bool]] = defaultdict(list)
    predicted: set[str] = set()
    for r in records:
        per_example[r["id"]].append(bool(r["verdict"]))
        if r.get("reason") != NO_PREDICTION:
            predicted.add(r["id"])
    counts = [len(per_example[k]) for k in predicted]
    n_min = min(counts)
    ks = sorted({k for k in (2**i for i in range(n_min.bit_length())) if k <= n_min} | {n_min})

    def one(verdicts: list[bool], k: int) -> float:
        n, c = len(verdicts), sum(verdicts)
        if c == 0:
            return 0.0
        return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)

    values = list(per_example.values())
    per_k = {f"pass@{k}": [one(v, k) for v in values] for k in ks}
    means = [sum(v) / len(v) for v in values]
    return {
        "samples": {
            "n_min": n_min,
            "n_max": max(counts),
            "mean_accuracy": sum(means) / len(means),
            "mean_accuracy_stderr": mean_stderr(means),
            "pass_at_k": {k: sum(v) / len(v) for k, v in per_k.items()},
            "pass_at_k_stderr": {k: mean_stderr(v) for k, v in per_k.items()},
        }
    }


def _supported(record: dict) -> list[bool]:
    """Which decisions of a record could be made here (a record without a prediction has none unsupported)."""
    n = len(record.get("follow_instruction_list_strict", record.get("constraint_results", [])))
    return record.get("supported") or [True] * n


def _n_unsupported(records: list[dict]) -> int:
    """Unsupported decisions among the scored records (each example once, whatever its number of samples)."""
    return round(sum(_w(r) * _supported(r).count(False) for r in records))


def combine(parts: Sequence[tuple[float, dict[str, Any]]]) -> tuple[float, float | None]:
    """``sum_c w_c acc_c`` over categories and its standard error ``sqrt(sum_c w_c^2 se_c^2)`` (the categories are
    independent strata); the error is None when one member has none (a category of one example)."""
    value = sum(w * stats["accuracy"] for w, stats in parts)
    errors = [stats["stderr"] for _, stats in parts]
    if any(e is None for e in errors):
        return value, None
    return value, math.sqrt(sum((w * e) ** 2 for (w, _), e in zip(parts, errors)))


def headline_columns(benchmark: str, summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The (column name, summary key) pairs a benchmark contributes to the combined table (and its average)."""
    return get_benchmark(benchmark).function("columns")(summary)


def summarize(benchmark: str, records: list[dict]) -> dict[str, Any]:
    """Official aggregate numbers of one benchmark (fractions) plus its ``headline`` columns, their
    ``headline_stderr`` (None where the column is not a mean over examples) and, where some decisions were
    unsupported offline, ``headline_without_unsupported``."""
    summary = get_benchmark(benchmark).function("summarizer")(records)
    columns = headline_columns(benchmark, summary)
    summary["headline"] = {name: summary[key] for name, key in columns}
    summary["headline_stderr"] = {name: summary.get(f"{key}_stderr") for name, key in columns}
    if summary.get("n_unsupported"):
        without = {**summary, **summary["without_unsupported"]}
        summary["headline_without_unsupported"] = {name: without[key] for name, key in columns}
    return summary


def score_one(example: EvalExample, response: str, answer: Any = None, **options: Any) -> dict[str, Any]:
    """Score one response; the record carries id, prompt, response, meta fields and the scorer's fields."""
    entry = get_benchmark(example.benchmark)
    opts = options if entry.options is not None else {}  # a scorer without options takes none
    result = entry.function("scorer")(example, response, answer, **opts)
    return {
        "id": example.id,
        "benchmark": example.benchmark,
        **example.meta,
        "prompt": example.prompt,
        "response": response,
        **result,
    }
