"""The embedded default's recipe: the flags of MRTPO on CPU (``mrtpo_cpu_args``) and the check that a finished run
really trained (``check_run``). Its command is ``mrtpo_openrlhf.cli.default`` (``python -m
mrtpo_openrlhf.launch.default`` still runs it); the study's CPU backend uses the same two functions.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..core.estimators import ADVANTAGE_ESTIMATORS
from ..core.settings import DEFAULT_REPLAY_MICRO_BATCH_SIZE, RUN_SETTINGS
from ..cpu import dtype as cpu_dtype
from ..cpu.sync_record import check_rounds
from ..tasks import get_task
from .recipes import cpu_grpo_args

# Mean |vllm_kl| over a run's steps above which vLLM and the trainer do not hold the same policy (another model,
# dtype or tokenizer, or weights far out of date). bf16 rounding alone gave a median of 2.0e-3 and at most 9.6e-3 per
# step over 705 logged SmolLM2 steps (docs/cpu.md), step 1 included. A dropped sync at the default's lr (2e-6) stays
# far below that, so the weight-sync record (cpu/sync_record.py) is what proves that each update reached vLLM.
VLLM_KL_TOLERANCE = 2e-2
RUN = RUN_SETTINGS["cpu"]
ESTIMATORS = (*ADVANTAGE_ESTIMATORS, "group_norm")  # ours, and upstream's GRPO


def mrtpo_cpu_args(
    task: str,
    estimator: str,
    model: Path,
    out: Path,
    steps: int,
    prompts_per_step: int,
    samples_per_prompt: int,
    max_new_tokens: int | None,
    beta: float,
    warmup_steps: int,
    data: Path | None = None,
    lr: float = RUN.lr,
    temperature: float = RUN.temperature,
    seed: int = 42,
) -> list[str]:
    """Upstream flags known to run on CPU (``cpu_grpo_args``) plus the MRTPO flags; the task's data, reward file and
    default max new tokens come from its registry entry (``mrtpo_openrlhf.tasks``). Micro-batches of
    ``RUN.micro_batch_size`` sequences in bf16, half as many in fp32 (``$MRTPO_CPU_DTYPE``, resolved here as the
    launcher resolves it)."""
    spec = get_task(task)
    args = cpu_grpo_args(
        model,
        data or spec.cpu_train_data_path(),
        spec.reward_path(),
        out / "model",
        num_prompts=steps * prompts_per_step,
        prompts_per_step=prompts_per_step,
        samples_per_prompt=samples_per_prompt,
        max_new_tokens=max_new_tokens or spec.cpu_max_new_tokens,
        max_len=640,
        lr=lr,
        estimator=estimator,
        seed=seed,
        micro_batch_size=RUN.micro_batch_for(cpu_dtype.resolve().bytes),
        gradient_checkpointing=RUN.gradient_checkpointing,
    )
    # one checkpoint kept (upstream keeps 3): with --ckpt.save_steps N each is ~1.5 GB of ZeRO-3 state on SmolLM2
    args += ["--rollout.temperature", str(temperature), "--ckpt.path", str(out / "ckpt"), "--ckpt.max_num", "1"]
    # only what the estimator reads (gdpo none of these; the CLI warns about flags without effect)
    reads = ADVANTAGE_ESTIMATORS[estimator].reads if estimator in ADVANTAGE_ESTIMATORS else frozenset()
    for name, value in (
        ("beta", beta),
        ("warmup_steps", warmup_steps),
        ("replay_micro_batch_size", DEFAULT_REPLAY_MICRO_BATCH_SIZE),
    ):
        if name in reads:
            args += [f"--algo.mrtpo.{name}", str(value)]
    return args


def resume_note(out: Path, flags: list[str]) -> str | None:
    """The line to print when a run asks to resume (``--ckpt.load_enable``, ``RESUME=1``) from a run folder that
    holds no checkpoint: the default saves none (upstream's ``--ckpt.save_steps`` is -1), so it starts at step 0."""
    if "--ckpt.load_enable" not in flags:
        return None
    actor = out / "ckpt" / "_actor"
    if actor.is_dir() and any(actor.iterdir()):
        return None
    return (
        f"[mrtpo] resume asked, but {actor} holds no checkpoint: this run starts at step 0. A run saves one with "
        "SAVE_STEPS=N (--ckpt.save_steps N) and the same OUT; RESUME=1 then continues from the newest"
    )


def check_run(metrics_path: Path, estimator: str, sync_path: Path | None = None) -> list[str]:
    """What is wrong with a finished run (empty list: it really trained). An exit code of 0 proves nothing.
    ``sync_path``: the vLLM worker's weight-sync record (``RunResult.sync_path``), checked when given."""
    if not metrics_path.exists():
        return [f"no metrics were written ({metrics_path})"]
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    if not rows:
        return ["the metrics file is empty"]
    problems = []
    for row in rows:
        for key in ("policy_loss", "vllm_kl"):
            if key in row and not math.isfinite(row[key]):
                problems.append(f"step {row['step']}: {key} is {row[key]}")
    last = rows[-1]
    gaps = [abs(row["vllm_kl"]) for row in rows if math.isfinite(row.get("vllm_kl", math.nan))]
    if gaps and sum(gaps) / len(gaps) > VLLM_KL_TOLERANCE:
        problems.append(
            f"mean |vllm_kl| {sum(gaps) / len(gaps):.3g} over {len(gaps)} steps (bf16 noise stays below "
            f"{VLLM_KL_TOLERANCE:g}): vLLM does not sample from the policy being trained"
        )
    if sync_path is not None:
        problems += check_rounds(sync_path, len(rows))
    if estimator in ADVANTAGE_ESTIMATORS and not any(k.startswith("reward/") for k in last):
        problems.append("per-reward metrics (reward/<name>/mean) are missing")
    return problems


if __name__ == "__main__":
    from ..cli.default import main

    sys.exit(main())
