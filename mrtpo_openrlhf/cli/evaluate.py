"""Command line of the evaluation harness: ``python eval/run.py ...`` or ``python -m mrtpo_openrlhf.cli.evaluate
...`` (docs/eval.md). The benchmarks are the registry's (``mrtpo_openrlhf.tasks.BENCHMARKS``)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from mrtpo_openrlhf.data.jsonl import DatasetError
from mrtpo_openrlhf.evaluation.generation import DTYPES, GenerationConfig
from mrtpo_openrlhf.evaluation.runner import EvalConfig, run_evaluation
from mrtpo_openrlhf.tasks import BENCHMARKS, benchmark_options


def parse_data_dirs(specs: Sequence[str], benchmarks: Sequence[str]) -> dict[str, str]:
    """``[BENCHMARK=]PATH`` specs -> {benchmark: path}; a bare PATH needs exactly one requested benchmark."""
    out: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if sep and name in BENCHMARKS:
            out[name] = path
        elif len(benchmarks) == 1:
            out[benchmarks[0]] = spec
        else:
            raise ValueError(f"--data-dir {spec!r}: with several benchmarks write BENCHMARK=PATH")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python eval/run.py",
        description="Evaluate a model or predictions on "
        "Spider, BIRD, IFEval, IFBench, MulDimIF and BFCL with the official scoring rules.",
    )
    p.add_argument(
        "--benchmark",
        action="append",
        required=True,
        choices=list(BENCHMARKS),
        help="repeat for several benchmarks (one combined table)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--model",
        help="HF model folder, a Hugging Face hub id (where the hub can be reached, or in the HF cache), "
        "or the alias 'smollm2' (the embedded SmolLM2-135M-Instruct)",
    )
    src.add_argument(
        "--predictions",
        action="append",
        metavar="[BENCHMARK=]FILE",
        help="JSONL of {id, response[, benchmark]} to score without a model (repeatable)",
    )
    p.add_argument(
        "--data-dir",
        action="append",
        default=[],
        metavar="[BENCHMARK=]PATH",
        help="benchmark data folder in its official layout (default: the bundled mini fixtures)",
    )
    p.add_argument("--out", help="output folder (default runs/eval/<timestamp>); one that holds files is refused")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --out folder that holds results (the files its summary.json lists are removed first)",
    )
    p.add_argument("--limit", type=int, help="first N examples of each benchmark (of each category for BFCL)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "vllm", "transformers"),
        help="auto = vLLM when installed and a GPU is available, else transformers",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=DTYPES,
        help="model dtype; auto = bf16 on a GPU (fp16 where it has no bf16), fp32 on the CPU",
    )
    p.add_argument("--workers", type=int, default=4, help="threads for SQL scoring")
    add_benchmark_options(p)
    return p


def add_benchmark_options(p: argparse.ArgumentParser) -> None:
    """Each registered benchmark's own flags (``Benchmark.options``), in a help section per benchmark; a flag that
    several benchmarks share appears once. Not given, a flag stays None (its declared default applies later)."""
    added: set[str] = set()
    for bench in BENCHMARKS.values():
        options = [o for o in bench.options if o.flag not in added]
        if not options:
            continue
        group = p.add_argument_group(f"{bench.name} options")
        for option in options:
            kwargs: dict = {"dest": option.dest, "default": None}
            if option.action == "store_true":
                kwargs["action"] = "store_true"
            else:
                kwargs.update(action=option.action or "store", type=option.type, choices=option.choices)
            shown = "all" if option.choices and option.default == option.choices else option.default
            help_text = f"{option.help} (default: {shown})" if option.action != "store_true" else option.help
            try:
                group.add_argument(option.flag, help=help_text, **kwargs)
            except argparse.ArgumentError as exc:
                raise ValueError(f"benchmark {bench.name!r}: option {option.flag} clashes with eval's own") from exc
            added.add(option.flag)


def benchmark_option_values(args: argparse.Namespace) -> dict:
    """The benchmark flags the user gave ({dest: value}); the others keep their declared defaults."""
    return {dest: getattr(args, dest) for dest in benchmark_options() if getattr(args, dest, None) is not None}


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.limit is not None and args.limit <= 0:
        print("error: --limit must be positive", file=sys.stderr)
        return 2
    try:
        cfg = EvalConfig(
            benchmarks=args.benchmark,
            model=args.model,
            predictions=args.predictions or (),
            data_dirs=parse_data_dirs(args.data_dir, list(dict.fromkeys(args.benchmark))),
            out=args.out,
            limit=args.limit,
            generation=GenerationConfig(
                max_new_tokens=args.max_new_tokens,
                batch_size=args.batch_size,
                temperature=args.temperature,
                top_p=args.top_p,
                seed=args.seed,
                backend=args.backend,
                dtype=args.dtype,
            ),
            options=benchmark_option_values(args),
            workers=args.workers,
            overwrite=args.overwrite,
        )
        result = run_evaluation(cfg)
    except (DatasetError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result["table"])
    for name, path in result["paths"].items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
