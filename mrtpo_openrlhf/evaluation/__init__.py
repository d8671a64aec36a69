"""Evaluation harness: Spider/BIRD, IFEval/IFBench/MulDimIF, BFCL, scored as the official scripts do.

Public API::

    from mrtpo_openrlhf.evaluation import EvalConfig, run_evaluation, load_benchmark, score_one, summarize
    load_benchmark("spider", data_dir)          # -> [EvalExample(id, benchmark, prompt, target, meta)]
    score_one(example, response)                # -> record dict with verdict/reason/answer
    summarize("spider", records)                # -> official aggregates (fractions, stderr) + headline
    run_evaluation(EvalConfig(["bird"], predictions=["preds.jsonl"], out="runs/eval/x"))
    read_predictions(["spider=pred.sql"], {"spider": examples})   # -> {benchmark: {id: [Prediction per sample]}}

Command line: ``python eval/run.py --benchmark bird --predictions preds.jsonl`` (docs/eval.md).
"""

from .data import BENCHMARKS, EvalDataError, EvalExample, load_benchmark
from .generation import GenerationConfig, generate
from .predictions import Prediction, read_predictions
from .runner import EvalConfig, run_evaluation, score_examples
from .scoring import score_one, summarize

__all__ = [
    "BENCHMARKS",
    "EvalConfig",
    "EvalDataError",
    "EvalExample",
    "GenerationConfig",
    "Prediction",
    "generate",
    "load_benchmark",
    "read_predictions",
    "run_evaluation",
    "score_examples",
    "score_one",
    "summarize",
]
