"""Scoring speed of the evaluation harness: the full BFCL AST set and 1,000 synthetic SQL predictions.

    python benchmarks/eval_speed.py [--sql-n 1000] [--workers 4]

BFCL: every AST category, each item answered with its reference call (correct) or, for every third item, a
call with a wrong function name. SQL: a Spider-layout and a BIRD-layout folder built in a temp dir from the
bundled fixture databases, with N questions cycling through the bundled gold queries; predictions alternate
between the gold query, a reordered/DISTINCT variant and a broken query. Prints examples/s per benchmark.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from mrtpo_openrlhf.evaluation import EvalConfig, Prediction, load_benchmark, score_examples, summarize
from mrtpo_openrlhf.tasks.tool.verifier import reference_calls, render_calls

SQL_DATA = Path(__file__).resolve().parents[1] / "mrtpo_openrlhf" / "data" / "sql"


def bfcl_predictions(examples) -> list[Prediction]:
    preds = []
    for i, ex in enumerate(examples):
        calls = reference_calls(ex.target["ground_truth"], ex.target["functions"])
        if i % 3 == 2 and calls:
            calls = [type(calls[0])(calls[0].name + "_x", calls[0].arguments)] + calls[1:]
        preds.append(Prediction("<think>x</think>" + render_calls(calls)))
    return preds


def build_sql_dir(root: Path, benchmark: str, n: int) -> Path:
    """A Spider- or BIRD-layout folder with ``n`` questions over the bundled fixture databases."""
    spider = benchmark == "spider"
    src_items = json.loads((SQL_DATA / ("train.json" if spider else "bird/train.json")).read_text()) + json.loads(
        (SQL_DATA / ("dev.json" if spider else "bird/dev.json")).read_text()
    )
    db_src = SQL_DATA / ("database" if spider else "bird/dev_databases")
    shutil.copytree(db_src, root / ("database" if spider else "dev_databases"))
    items = []
    for i in range(n):
        item = dict(src_items[i % len(src_items)])
        if not spider:
            item["question_id"] = i
        items.append(item)
    (root / "dev.json").write_text(json.dumps(items))
    return root


def sql_predictions(examples) -> list[Prediction]:
    preds = []
    for i, ex in enumerate(examples):
        gold = ex.target["gold"]
        variants = [
            gold,
            gold.replace("SELECT ", "SELECT DISTINCT ", 1),
            gold + " ORDER BY 1 DESC",
            "SELECT missing_column FROM " + gold.split(" FROM ", 1)[-1],
        ]
        preds.append(Prediction("", variants[i % len(variants)]))
    return preds


def timed(label: str, examples, preds, cfg: EvalConfig) -> None:
    start = time.perf_counter()
    records = score_examples(examples, preds, cfg, desc=label)
    elapsed = time.perf_counter() - start
    summary = summarize(examples[0].benchmark, records)
    print(
        f"{label}: {len(examples)} examples in {elapsed:.2f} s ({len(examples) / elapsed:,.0f}/s); "
        f"headline {summary['headline']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sql-n", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    cfg = EvalConfig(benchmarks=["bfcl"], predictions=["-"], workers=args.workers)

    start = time.perf_counter()
    bfcl = load_benchmark("bfcl")
    print(f"BFCL load: {len(bfcl)} items in {time.perf_counter() - start:.2f} s")
    timed("BFCL (all AST categories)", bfcl, bfcl_predictions(bfcl), cfg)

    with tempfile.TemporaryDirectory() as tmp:
        for bench in ("spider", "bird"):
            examples = load_benchmark(bench, build_sql_dir(Path(tmp) / bench, bench, args.sql_n))
            label = f"{bench} ({args.sql_n} predictions, {args.workers} threads)"
            timed(label, examples, sql_predictions(examples), cfg)


if __name__ == "__main__":
    main()
