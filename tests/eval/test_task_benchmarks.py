"""Eval's benchmarks are the ones the task registry names, each with a loader, scorer and summary, and eval's
prompts are the training prompts of the task (its registry ``prompt_builder``)."""

from pathlib import Path

from mrtpo_openrlhf.cli.evaluate import build_parser
from mrtpo_openrlhf.data.jsonl import read_jsonl
from mrtpo_openrlhf.evaluation.data import load_benchmark
from mrtpo_openrlhf.tasks import BENCHMARKS, TASKS

DATA = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data"


def test_benchmarks_come_from_the_registry():
    assert tuple(BENCHMARKS) == ("spider", "bird", "ifeval", "ifbench", "muldimif", "bfcl")
    assert {b.name: t.name for t in TASKS.values() for b in t.benchmarks} == {
        "spider": "sql",
        "bird": "sql",
        "ifeval": "instruction",
        "ifbench": "instruction",
        "muldimif": "instruction",
        "bfcl": "tool",
    }
    for name, bench in BENCHMARKS.items():
        assert bench in TASKS[bench.task].benchmarks  # the entry eval reads is the one its task declared
        assert all(callable(bench.function(f)) for f in ("loader", "scorer", "summarizer", "columns"))
        assert build_parser().parse_args(["--benchmark", name, "--predictions", "p.jsonl"]).benchmark == [name]


def test_spider_prompts_are_the_training_prompts():
    # the bundled dev rows were written by the SQL converter (scripts/build_sql_fixtures.py), not by eval
    training = {row["prompt"] for row in read_jsonl(DATA / "sql" / "dev_mini.jsonl")}
    examples = load_benchmark("spider")
    assert examples and all(ex.prompt in training for ex in examples)
