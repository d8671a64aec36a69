"""The evaluation run: load benchmarks, get responses (model or predictions file), score, write the outputs.

Predictions file (``--predictions [BENCHMARK=]FILE``, JSONL, one object per line)::

    {"id": "<example id>", "response": "<model output text>", "benchmark": "spider"}

- ``id``: the example id the harness uses (records of a model run show them): Spider = position in dev.json,
  BIRD = ``question_id`` (its position), IFEval/IFBench = ``key``, MulDimIF = ``id`` (else position), BFCL = ``id``.
- ``response``: the full model output, scored exactly like a generated one (SQL is extracted from the last
  ```sql block, tool calls from the ``<tool_call>`` block). For Spider/BIRD a row may give ``"sql"`` instead: the
  bare query, used as the extracted answer (the official scripts' one-query-per-line format).
- ``benchmark``: needed only when one file holds several benchmarks; ``BENCHMARK=FILE`` sets it for a whole file,
  and a single requested benchmark needs neither.
Ids that the benchmark does not have are an error; examples without a prediction count as wrong
(``reason = "no prediction"``) and are reported as ``n_missing``.
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

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl, write_jsonl
from mrtpo_openrlhf.verifiers.tool import AST_CATEGORIES

from .data import BENCHMARKS, SQL_BENCHMARKS, EvalExample, load_benchmark
from .generation import GenerationConfig, generate
from .scoring import BIRD_TIMEOUT_S, SPIDER_TIMEOUT_S, score_one, summarize

logger = logging.getLogger(__name__)
NO_PREDICTION = "no prediction"


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


@dataclass(frozen=True)
class Prediction:
    response: str
    answer: str | None = None  # a bare SQL query given instead of a response


def read_predictions(specs: Sequence[str], benchmarks: Sequence[str]) -> dict[str, dict[str, Prediction]]:
    """``[BENCHMARK=]FILE`` specs -> {benchmark: {id: Prediction}}; DatasetError names file:line on bad rows."""
    out: dict[str, dict[str, Prediction]] = {b: {} for b in benchmarks}
    for spec in specs:
        bench_of_file, _, path = spec.rpartition("=") if "=" in spec and spec.split("=", 1)[0] in BENCHMARKS \
            else ("", "", spec)
        if not Path(path).is_file():
            raise DatasetError(f"predictions file {path} not found")
        for lineno, row in enumerate(iter_jsonl(path), 1):
            where = f"{path}: row {lineno}"
            bench = row.get("benchmark") or bench_of_file or (benchmarks[0] if len(benchmarks) == 1 else None)
            if bench is None:
                raise DatasetError(f"{where}: no 'benchmark' field, and several benchmarks were requested "
                                   "(add the field or pass BENCHMARK=FILE)")
            if bench not in out:
                raise DatasetError(f"{where}: benchmark {bench!r} was not requested ({', '.join(benchmarks)})")
            if "id" not in row or not isinstance(row["id"], (str, int)):
                raise DatasetError(f"{where}: missing 'id' (string or integer)")
            sql = row.get("sql")
            if sql is not None and (bench not in SQL_BENCHMARKS or not isinstance(sql, str)):
                raise DatasetError(f"{where}: 'sql' is allowed only for spider/bird and must be a string")
            response = row.get("response", "" if sql is not None else None)
            if not isinstance(response, str):
                raise DatasetError(f"{where}: 'response' must be a string" + (" (or give 'sql')" if bench in SQL_BENCHMARKS else ""))
            key = str(row["id"])
            if key in out[bench]:
                raise DatasetError(f"{where}: duplicate prediction for {bench} id {key!r}")
            out[bench][key] = Prediction(response, sql)
    return out


def check_prediction_ids(benchmark: str, examples: Sequence[EvalExample], predictions: dict[str, Prediction]) -> None:
    """Raise DatasetError listing ids the benchmark does not have."""
    known = {ex.id for ex in examples}
    unknown = sorted(set(predictions) - known)
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:5])
        raise DatasetError(f"{benchmark}: {len(unknown)} prediction id(s) are not in the benchmark data: {shown}"
                           f"{' ...' if len(unknown) > 5 else ''} (example ids look like {next(iter(known), '?')!r})")


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


def score_examples(examples: Sequence[EvalExample], responses: Sequence[Prediction | None], cfg: EvalConfig,
                   desc: str = "scoring") -> list[dict[str, Any]]:
    """One record per example, in order; SQL benchmarks are scored on ``cfg.workers`` threads."""
    def one(pair: tuple[EvalExample, Prediction | None]) -> dict[str, Any]:
        ex, pred = pair
        options: dict[str, Any] = {}
        if ex.benchmark == "spider":
            options = {"timeout_s": cfg.spider_timeout_s, "keep_distinct": cfg.keep_distinct}
        elif ex.benchmark == "bird":
            options = {"timeout_s": cfg.bird_timeout_s}
        if pred is None:
            record = score_one(ex, "", None, **options)
            return {**record, "verdict": False, "reason": NO_PREDICTION}
        return score_one(ex, pred.response, pred.answer, **options)

    pairs = list(zip(examples, responses))
    threaded = cfg.workers > 1 and any(ex.benchmark in SQL_BENCHMARKS for ex in examples)
    with tqdm(total=len(pairs), desc=desc, unit="ex", disable=len(pairs) < 20) as bar:
        if threaded:
            with ThreadPoolExecutor(cfg.workers) as pool:
                records = []
                for record in pool.map(one, pairs):
                    records.append(record)
                    bar.update(1)
                return records
        records = []
        for pair in pairs:
            records.append(one(pair))
            bar.update(1)
        return records


def _fmt(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.2f}"


def combined_table(summaries: dict[str, dict[str, Any]], label: str) -> tuple[str, float | None]:
    """One markdown row of every benchmark's headline columns plus their unweighted average (paper style)."""
    columns = [(name, value) for bench in summaries for name, value in summaries[bench]["headline"].items()]
    values = [v for _, v in columns if v is not None]
    average = sum(values) / len(values) if values and len(values) == len(columns) else None
    header = "| Model | " + " | ".join(name for name, _ in columns) + " | Avg |"
    rule = "|---|" + "---:|" * (len(columns) + 1)
    row = f"| {label} | " + " | ".join(_fmt(v) for _, v in columns) + f" | {_fmt(average)} |"
    return "\n".join([header, rule, row]), average


def _details(bench: str, summary: dict[str, Any]) -> list[str]:
    lines = [f"\n### {bench} (n = {summary['n']})"]
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    scalars.update({k: v for k, v in summary.items() if v is None})
    lines.append(", ".join(f"{k} = {_fmt(v) if isinstance(v, float) or v is None else v}" for k, v in scalars.items()))
    for key in ("by_difficulty", "by_category"):
        groups = summary.get(key) or {}
        if groups:
            lines += [f"\n| {key[3:]} | accuracy | count |", "|---|---:|---:|"]
            lines += [f"| {name} | {_fmt(g['accuracy'])} | {g['count']} |" for name, g in groups.items()]
    return lines


def write_outputs(out_dir: Path, records: dict[str, list[dict]], summaries: dict[str, dict], label: str,
                  meta: dict[str, Any]) -> dict[str, Path]:
    """``<bench>.records.jsonl`` per benchmark, ``summary.json`` and ``results.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for bench, recs in records.items():
        paths[bench] = out_dir / f"{bench}.records.jsonl"
        write_jsonl(paths[bench], recs)
    table, average = combined_table(summaries, label)
    paths["summary"] = out_dir / "summary.json"
    paths["summary"].write_text(json.dumps({"meta": meta, "average": average, "benchmarks": summaries},
                                           indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
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
    predictions = read_predictions(cfg.predictions, benchmarks) if cfg.predictions else None
    if predictions is not None:
        for bench in benchmarks:
            check_prediction_ids(bench, examples[bench], predictions[bench])
    if cfg.limit is not None:
        examples = {b: limit_examples(exs, cfg.limit) for b, exs in examples.items()}

    records: dict[str, list[dict]] = {}
    summaries: dict[str, dict] = {}
    for bench in benchmarks:
        exs = examples[bench]
        if predictions is not None:
            responses = [predictions[bench].get(ex.id) for ex in exs]
            missing = sum(r is None for r in responses)
            if missing:
                logger.warning("%s: %d of %d examples have no prediction (scored as wrong)", bench, missing, len(exs))
        else:
            texts = generate(cfg.model, [ex.prompt for ex in exs], cfg.generation)
            responses = [Prediction(t) for t in texts]
            missing = 0
        records[bench] = score_examples(exs, responses, cfg, desc=f"scoring {bench}")
        summaries[bench] = {**summarize(bench, records[bench]), "n_missing": missing}

    label = Path(cfg.model).name if cfg.model else "predictions"
    out_dir = Path(cfg.out) if cfg.out else Path("runs/eval") / time.strftime("%Y%m%d-%H%M%S")
    meta = {"model": cfg.model, "predictions": list(cfg.predictions), "limit": cfg.limit,
            "data_dirs": cfg.data_dirs, "generation": vars(cfg.generation) if cfg.model else None,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    paths = write_outputs(out_dir, records, summaries, label, meta)
    table, average = combined_table(summaries, label)
    return {"summaries": summaries, "records": records, "paths": paths, "average": average, "table": table}
