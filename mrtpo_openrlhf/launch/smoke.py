"""The GPU smoke run's verdict (``SMOKE=1 bash examples/scripts/train_mrtpo_sql.sh``, docs/gpu.md): after its two
phases (steps 1..STEPS-1 with a checkpoint, then a resumed last step) the run folder must show a run that really
trained: the CPU default's checks (``default.check_run``: finite losses, the vLLM/trainer log-prob gap, per-reward
metrics), every step 1..STEPS logged exactly once (the resume continued, it did not start over), the checkpoint, and
a saved model that loads its config. Prints one line per problem and exits 1, or a summary and 0.

    python -m mrtpo_openrlhf.launch.smoke --out runs/smoke-mrtpo-sql --estimator mrtpo --steps 3
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .default import check_run

REPLAY_PER_RANK = "mrtpo/replay_forwards_per_rank"


def check_smoke(out: Path, estimator: str, steps: int) -> tuple[list[str], list[str]]:
    """(problems, facts) of the smoke run in ``out``."""
    metrics = out / "metrics.jsonl"
    problems = check_run(metrics, estimator)
    facts: list[str] = []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    logged = [row.get("step") for row in rows]
    if rows and sorted(logged) != list(range(1, steps + 1)):
        problems.append(f"steps logged {logged}, expected 1..{steps} once each (the resume must continue the run)")
    ckpt = out / "ckpt"
    if not ckpt.is_dir() or not any(ckpt.iterdir()):
        problems.append(f"no checkpoint in {ckpt}")
    model = out / "model"
    if not (model / "config.json").is_file():
        problems.append(f"no saved model in {model} (config.json)")
    if rows:
        last = rows[-1]
        rewards = sorted(k for k in last if k.startswith("reward/") and k.endswith("/mean"))
        facts.append(f"{len(rows)} steps, {len(rewards)} per-reward means")
        replay = [row[REPLAY_PER_RANK] for row in rows if REPLAY_PER_RANK in row]
        if replay:
            facts.append(f"replay forwards per rank by step: {', '.join(f'{v:g}' for v in replay)}")
    return problems, facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.launch.smoke", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="the smoke run's folder (OUT)")
    ap.add_argument("--estimator", default="mrtpo")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    problems, facts = check_smoke(args.out, args.estimator, args.steps)
    for problem in problems:
        print(f"[mrtpo] smoke: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"[mrtpo] smoke: ok ({'; '.join(facts)}): the pipeline runs on this node; next, your model and data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
