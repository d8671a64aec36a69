"""The evaluation run: load benchmarks, get responses (model or predictions files), score, write the outputs.

Prediction formats: ``predictions.py``. Several predictions of one id are samples: each is scored, weighted
1/n_samples in the benchmark's aggregates (so they are mean accuracies over samples), and ``pass@k`` is reported.
Ids that the benchmark does not have are an error naming the first of them; examples without a prediction count as
wrong (``reason = "no prediction"``, ``n_missing``), and the headline states the coverage of a partial run. BFCL
categories with no prediction at all are left out (not run), as with ``--bfcl-category``.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from mrtpo_openrlhf.data.jsonl import write_jsonl
from mrtpo_openrlhf.verifiers.tool import AST_CATEGORIES

from .data import SQL_BENCHMARKS, EvalExample, load_benchmark
from .generation import GenerationConfig, generate
from .predictions import Prediction, read_predictions
from .scoring import BIRD_TIMEOUT_S, NO_PREDICTION, SPIDER_TIMEOUT_S, pass_at_k, score_one, summarize

logger = logging.getLogger(__name__)


@dataclass
class EvalConfig:
    benchmarks: Sequence[str]
    model: str | None = None
    predictions: Sequence[str] = ()
    data_dirs: dict[str, str] = field(default_factory=dict)
    out: str | None = None
    limit: int | None = None
    generation: GenerationConfig = GenerationConfig()
    bfcl_categories: Sequence[str] = AST_CATEGORIES
    spider_timeout_s: float = SPIDER_TIMEOUT_S
    bird_timeout_s: float = BIRD_TIMEOUT_S
    keep_distinct: bool = False
    workers: int = 4  # SQL scoring threads (SQLite releases the GIL)


def limit_examples(examples: Sequence[EvalExample], limit: int) -> list[EvalExample]:
    """The first ``limit`` examples; for BFCL the first ``limit`` of each category."""
    taken: dict[str, int] = {}
    out = []
    for ex in examples:
        group = ex.meta.get("category", "") if ex.benchmark == "bfcl" else ""
        if taken.get(group, 0) < limit:
            taken[group] = taken.get(group, 0) + 1
            out.append(ex)
    return out


def score_examples(
    examples: Sequence[EvalExample],
    responses: Sequence[Prediction | Sequence[Prediction] | None],
    cfg: EvalConfig,
    desc: str = "scoring",
) -> list[dict[str, Any]]:
    """Records in example order: one per sample (a Prediction, a list of samples, or None = no prediction).

    With several samples each record carries ``sample`` (its index) and ``weight`` = 1/n_samples, so every example
    weighs 1 in the aggregates. SQL benchmarks are scored on ``cfg.workers`` threads.
    """

    def one(job: tuple[EvalExample, Prediction | None, int, int]) -> dict[str, Any]:
        ex, pred, index, n = job
        options: dict[str, Any] = {}
        if ex.benchmark == "spider":
            options = {"timeout_s": cfg.spider_timeout_s, "keep_distinct": cfg.keep_distinct}
        elif ex.benchmark == "bird":
            options = {"timeout_s": cfg.bird_timeout_s}
        if pred is None:
            record = {**score_one(ex, "", None, **options), "verdict": False, "reason": NO_PREDICTION}
            if "unsupported" in record:  # nothing was scored, so nothing was unsupported
                record["unsupported"] = []
                record.pop("supported")
        else:
            record = score_one(ex, pred.response, pred.answer, **options)
        return {**record, "sample": index, "weight": 1.0 / n} if n > 1 else record

    jobs = []
    for ex, given in zip(examples, responses):
        samples = [given] if given is None or isinstance(given, Prediction) else list(given)
        jobs += [(ex, pred, i, len(samples)) for i, pred in enumerate(samples)]
    threaded = cfg.workers > 1 and any(ex.benchmark in SQL_BENCHMARKS for ex in examples)
    records = []
    with tqdm(total=len(jobs), desc=desc, unit="ex", disable=len(jobs) < 20) as bar:
        if threaded:
            with ThreadPoolExecutor(cfg.workers) as pool:
                for record in pool.map(one, jobs):
                    records.append(record)
                    bar.update(1)
        else:
            for job in jobs:
                records.append(one(job))
                bar.update(1)
    return records


def headline_note(summary: dict[str, Any], column: str) -> str:
    """What a headline cell must say besides its number: the coverage of a partial predictions run
    (" (120/3,641 predicted)") and unsupported-offline decisions counted as failed, with the value without them."""
    notes = []
    n, predicted = summary["n"], summary.get("n_predicted", summary["n"])
    if predicted < n:
        notes.append(f"{predicted:,}/{n:,} predicted")
    if summary.get("n_unsupported"):
        without = summary.get("headline_without_unsupported", {}).get(column)
        notes.append(f"{summary['n_unsupported']} unsupported as failed; without: {_fmt(without)}")
    return f" ({'; '.join(notes)})" if notes else ""


def _fmt(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def combined_table(summaries: dict[str, dict[str, Any]], label: str) -> tuple[str, float | None]:
    """One markdown row of every benchmark's headline columns plus their unweighted average (paper style)."""
    columns = [(name, value) for bench in summaries for name, value in summaries[bench]["headline"].items()]
    values = [v for _, v in columns if v is not None]
    average = sum(values) / len(values) if values and len(values) == len(columns) else None
    header = "| Model | " + " | ".join(name for name, _ in columns) + " | Avg |"
    rule = "|---|" + "---:|" * (len(columns) + 1)
    notes = [headline_note(summaries[bench], name) for bench in summaries for name in summaries[bench]["headline"]]
    row = f"| {label} | " + " | ".join(_fmt(v) + note for (_, v), note in zip(columns, notes)) + f" | {_fmt(average)} |"
    return "\n".join([header, rule, row]), average


def _details(bench: str, summary: dict[str, Any]) -> list[str]:
    lines = [f"\n### {bench} (n = {summary['n']})"]
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    scalars.update({k: v for k, v in summary.items() if v is None})
    lines.append(", ".join(f"{k} = {_fmt(v) if isinstance(v, float) or v is None else v}" for k, v in scalars.items()))
    for key in ("by_difficulty", "by_category", "by_subcategory"):
        groups = summary.get(key) or {}
        if groups:
            lines += [f"\n| {key[3:]} | accuracy | count |", "|---|---:|---:|"]
            lines += [f"| {name} | {_fmt(g['accuracy'])} | {g['count']} |" for name, g in groups.items()]
    for key, title in (("without_unsupported", "without the unsupported-offline decisions"), ("samples", "samples")):
        part = summary.get(key)
        if part:
            flat = {**{k: v for k, v in part.items() if k != "pass_at_k"}, **part.get("pass_at_k", {})}
            lines.append(
                f"\n{title}: "
                + ", ".join(f"{k} = {_fmt(v) if isinstance(v, float) or v is None else v}" for k, v in flat.items())
            )
    return lines


def write_outputs(
    out_dir: Path, records: dict[str, list[dict]], summaries: dict[str, dict], label: str, meta: dict[str, Any]
) -> dict[str, Path]:
    """``<bench>.records.jsonl`` per benchmark, ``summary.json`` and ``results.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for bench, recs in records.items():
        paths[bench] = out_dir / f"{bench}.records.jsonl"
        write_jsonl(paths[bench], recs)
    table, average = combined_table(summaries, label)
    paths["summary"] = out_dir / "summary.json"
    paths["summary"].write_text(
        json.dumps({"meta": meta, "average": average, "benchmarks": summaries}, indent=2, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    lines = ["# Evaluation results", "", table, "", "Average = unweighted mean of the columns shown."]
    for bench, summary in summaries.items():
        lines += _details(bench, summary)
    paths["markdown"] = out_dir / "results.md"
    paths["markdown"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def run_evaluation(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate ``cfg.benchmarks``; returns {"summaries", "records", "paths", "average", "table"}."""
    if not cfg.benchmarks:
        raise ValueError("no benchmark requested")
    if (cfg.model is None) == (not cfg.predictions):
        raise ValueError("give exactly one of a model (--model) or predictions (--predictions)")
    benchmarks = list(dict.fromkeys(cfg.benchmarks))
    examples = {b: load_benchmark(b, cfg.data_dirs.get(b), tuple(cfg.bfcl_categories)) for b in benchmarks}
    predictions = read_predictions(cfg.predictions, examples) if cfg.predictions else None
    if cfg.limit is not None:
        examples = {b: limit_examples(exs, cfg.limit) for b, exs in examples.items()}

    records: dict[str, list[dict]] = {}
    summaries: dict[str, dict] = {}
    for bench in benchmarks:
        exs = examples[bench]
        if predictions is not None:
            given = predictions[bench]
            if bench == "bfcl":  # a category without any prediction was not run
                ran = {ex.meta["category"] for ex in exs if ex.id in given}
                exs = [ex for ex in exs if ex.meta["category"] in ran]
            responses = [given.get(ex.id) for ex in exs]
            n_total = len(examples[bench])
            predicted = sum(r is not None for r in responses)
            if predicted < n_total:
                logger.warning(
                    "%s: %d of %d examples have a prediction (the others count as wrong; BFCL categories "
                    "without any are left out)",
                    bench,
                    predicted,
                    n_total,
                )
        else:
            texts = generate(cfg.model, [ex.prompt for ex in exs], cfg.generation)
            responses = [Prediction(t) for t in texts]
            n_total = predicted = len(exs)
        records[bench] = score_examples(exs, responses, cfg, desc=f"scoring {bench}")
        summary = summarize(bench, records[bench])
        summaries[bench] = {
            **summary,
            "n": n_total,
            "n_scored": summary["n"],
            "n_predicted": predicted,
            "n_missing": len(exs) - predicted,
            **pass_at_k(records[bench]),
        }

    label = Path(cfg.model).name if cfg.model else "predictions"
    out_dir = Path(cfg.out) if cfg.out else Path("runs/eval") / time.strftime("%Y%m%d-%H%M%S")
    meta = {
        "model": cfg.model,
        "predictions": list(cfg.predictions),
        "limit": cfg.limit,
        "data_dirs": cfg.data_dirs,
        "generation": vars(cfg.generation) if cfg.model else None,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    paths = write_outputs(out_dir, records, summaries, label, meta)
    table, average = combined_table(summaries, label)
    return {"summaries": summaries, "records": records, "paths": paths, "average": average, "table": table}
