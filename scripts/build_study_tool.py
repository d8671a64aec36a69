"""Build the tool-calling study's prompt pools from BFCL v4 (the ``bfcl-eval`` package's data files, Apache-2.0).

Provenance: nothing downloaded; every row comes from ``bfcl_eval/data/BFCL_v4_<category>.json`` and its
``possible_answer`` file as installed by ``scripts/install.sh`` (``bfcl-eval``, ``--no-deps``), converted by the tool
task's own ``to_row`` (function docs, the request, ``TOOL_FORMAT_BLOCK``). The items of the chosen categories are
shuffled with ``--split-seed`` and cut into two disjoint pools by BFCL id: ``train`` (each study seed draws its
prompts from it) and ``heldout`` (the primary endpoint's unseen prompts). ``--shots 1`` adds one worked example of
the layout to every prompt, written here for a function that is in no BFCL category, so it leaks no answer.

    python scripts/build_study_tool.py --out-dir mrtpo_openrlhf/data/tool/study --shots 1

Writes ``train.jsonl``, ``heldout.jsonl`` and ``provenance.json`` (ids per pool, categories, seed, command).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from mrtpo_openrlhf.data.jsonl import write_jsonl
from mrtpo_openrlhf.tasks.tool.reward import TOOL_REWARD_SETS, to_row
from mrtpo_openrlhf.tasks.tool.verifier import load_bfcl

EXAMPLE = (
    "Example (a different request and function):\n"
    'Functions: {"name": "weather.get_forecast", "parameters": {"type": "dict", "properties": {"city": '
    '{"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}\n'
    "Request: What will the weather be in Lyon over the next 3 days?\n"
    "Answer:\n"
    "<think>\nThe user wants a 3-day forecast for Lyon, so I call weather.get_forecast with city Lyon and days 3.\n"
    "</think>\n"
    '<tool_call>\n{"name": "weather.get_forecast", "arguments": {"city": "Lyon", "days": 3}}\n</tool_call>'
)


def rows_for(categories: list[str], shots: int, example_first: bool = True, rewards: str = "paper") -> list[dict]:
    rows = []
    for category in categories:
        for item in load_bfcl(category):
            row = to_row(item.id, category, item.messages, item.functions, item.ground_truth)
            if rewards != "paper":
                row["label"] = json.dumps({**json.loads(row["label"]), "rewards": rewards}, ensure_ascii=False)
            if shots:  # first: the small model copies an example that comes last instead of answering
                row["prompt"] = f"{EXAMPLE}\n\n{row['prompt']}" if example_first else f"{row['prompt']}\n\n{EXAMPLE}"
            row["id"] = item.id
            rows.append(row)
    return rows


def prompt_tokens(prompt: str, _tok: list = []) -> int:  # noqa: B006 - the tokenizer, loaded once
    """Length of the prompt as training sees it: one user turn through SmolLM2's chat template."""
    if not _tok:
        from transformers import AutoTokenizer

        from mrtpo_openrlhf.models import ensure_smollm2

        _tok.append(AutoTokenizer.from_pretrained(str(ensure_smollm2())))
    tok = _tok[0]
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    return len(tok(text, add_special_tokens=False)["input_ids"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--categories", nargs="+", default=["simple_python", "multiple"])
    ap.add_argument("--shots", type=int, choices=[0, 1], default=1)
    ap.add_argument(
        "--rewards", choices=sorted(TOOL_REWARD_SETS), default="paper", help="the tool task's reward set (label)"
    )
    ap.add_argument("--example-last", action="store_true", help="put the example after the format block")
    ap.add_argument(
        "--max-prompt-tokens",
        type=int,
        default=None,
        help="keep items whose chat-templated prompt is at most this many SmolLM2 tokens (the CPU study's budget)",
    )
    ap.add_argument("--heldout", type=int, default=128, help="items kept out of training (the primary endpoint)")
    ap.add_argument("--split-seed", type=int, default=20261201)
    args = ap.parse_args(argv)
    rows = rows_for(args.categories, args.shots, not args.example_last, args.rewards)
    total = len(rows)
    if args.max_prompt_tokens:
        rows = [r for r in rows if prompt_tokens(r["prompt"]) <= args.max_prompt_tokens]
    random.Random(args.split_seed).shuffle(rows)
    if args.heldout >= len(rows):
        ap.error(f"--heldout {args.heldout}: only {len(rows)} items in {args.categories}")
    heldout, train = rows[: args.heldout], rows[args.heldout :]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out_dir / "train.jsonl", train)
    write_jsonl(args.out_dir / "heldout.jsonl", heldout)
    provenance = {
        "source": "bfcl-eval (data files only): bfcl_eval/data/BFCL_v4_<category>.json + possible_answer/",
        "categories": args.categories,
        "items": total,
        "max_prompt_tokens": args.max_prompt_tokens,
        "kept": len(rows),
        "rewards": args.rewards,
        "shots": args.shots,
        "example": ("last" if args.example_last else "first") if args.shots else None,
        "split_seed": args.split_seed,
        "train_ids": [r["id"] for r in train],
        "heldout_ids": [r["id"] for r in heldout],
        "command": "python scripts/build_study_tool.py " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    (args.out_dir / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    print(f"{len(train)} train + {len(heldout)} held-out rows -> {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
