"""Command line of ``python -m mrtpo_openrlhf.cli.diagnose`` (also ``python -m mrtpo_openrlhf.diagnose``; see
docs/diagnostics.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from mrtpo_openrlhf.tasks import TASKS

from ..core.relevance import RELEVANCE, relevance_help
from ..core.settings import DEFAULT_RELEVANCE
from ..diagnostics.runner import DiagnoseError, run


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mrtpo_openrlhf.cli.diagnose",
        description="Replay every (response, reward) pair and write a relevance heatmap page, "
        "relevance.jsonl and summary.json with the paper's localization statistics.",
    )
    p.add_argument("--model", required=True, help="HF model folder, or 'smollm2' (the embedded SmolLM2-135M-Instruct)")
    p.add_argument(
        "--data",
        default=None,
        help=f"JSONL with prompt/label rows, or a task name ({', '.join(TASKS)}) for its bundled mini "
        "set; optional with --responses",
    )
    p.add_argument(
        "--task",
        default=None,
        choices=list(TASKS),
        help="reward family (default: from --data's name or the label's shape)",
    )
    p.add_argument("--out", required=True, help="output folder (index.html, relevance.jsonl, summary.json)")
    p.add_argument(
        "--responses",
        default=None,
        help="JSONL with prompt/response/label rows (optional response_ids) to diagnose instead of sampling",
    )
    p.add_argument("--limit", type=int, default=None, help="number of prompts to use")
    p.add_argument("--samples-per-prompt", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="sampling temperature, also applied in the replay (0 = greedy, replayed at 1)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--micro-batch-size", type=int, default=4, help="contexts per replay forward")
    p.add_argument(
        "--null",
        default=None,
        help="the null block: a neutral sentence no reward reads, replayed like one more reward on every response "
        "(the control a reward's localization is measured against); default: the task's (Task.null_text, "
        "core/null_block.py); '' switches it off",
    )
    p.add_argument(
        "--relevance",
        default=DEFAULT_RELEVANCE,
        choices=list(RELEVANCE),
        help="the relevance measure of the heatmap and statistics (the null's rows too): "
        + "; ".join(f"{name}: {text}" for name, text in relevance_help().items()).replace("%", "%%"),
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        paths = run(
            args.model,
            args.data,
            args.out,
            responses=args.responses,
            task=args.task,
            limit=args.limit,
            samples_per_prompt=args.samples_per_prompt,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            micro_batch_size=args.micro_batch_size,
            null_text=args.null,
            relevance=args.relevance,
        )
    except DiagnoseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
