"""The variables ``examples/scripts/train*.sh`` read, and the check that stops on one they would silently ignore.

A script sees its environment, not which variables the user typed on its command line, so the rule is: a variable
from ``MISSPELLINGS`` (names people type for ours: ``STEPS`` was ignored where the CPU default has ``--steps``), or
an ``MRTPO_*`` variable the package never reads, stops the script with one line naming the right variable. Names
outside both lists pass (the environment holds many unrelated ones). Standard library only: the scripts run it with
whatever ``python3`` is on PATH, before any install (``python3 -m mrtpo_openrlhf.script_vars``).
"""

from __future__ import annotations

import difflib
import os
import sys
from typing import Mapping

# What the scripts read (docs/gpu.md lists them with their defaults); each with its meaning.
SCRIPT_VARS = {
    "TASK": "sql | instruction | tool (set by the train_<estimator>_<task>.sh scripts)",
    "ESTIMATOR": "mrtpo | gdpo | group_norm",
    "MODEL": "a hub id or a local folder",
    "DATA": "the training rows (JSONL from a task's converter)",
    "OUT": "the run folder: checkpoints, model, metrics.jsonl, tensorboard (shared storage on a cluster)",
    "NUM_NODES": "nodes (GPU command line)",
    "NUM_GPUS": "GPUs per node (GPU command line)",
    "VLLM_TP": "tensor parallel size of each vLLM engine",
    "N_SAMPLES": "responses per prompt",
    "ROLLOUT_BATCH": "prompts per step",
    "TRAIN_BATCH": "responses per optimizer step",
    "STEPS": "stop after this many steps (the first STEPS x ROLLOUT_BATCH prompts, one episode)",
    "EPISODES": "passes over the data",
    "LR": "actor learning rate",
    "SEED": "the run's seed",
    "MAX_LEN": "prompt + response tokens",
    "MAX_NEW_TOKENS": "response tokens",
    "BETA": "MRTPO's beta",
    "WARMUP": "MRTPO's warmup steps",
    "PLACEMENT": "mrtpo | shuffle | joint | uniform",
    "RELEVANCE": "js | loggap | js-contrast",
    "REWARD_WEIGHTING": "none | saw",
    "REWARD_WEIGHTS": "name=w,...",
    "CAP": "a number | none",
    "REPLAY_LOGITS": "model | fp32",
    "REWARD_FUNC": "the reward file or URL (default: reward_funcs/<task>.py)",
    "SAVE_STEPS": "checkpoint every N steps",
    "KEEP_CKPTS": "checkpoints kept (--ckpt.max_num; each 7B one is ~106 GB)",
    "RESUME": "1 (default on GPUs): continue from OUT/ckpt; 0: start at step 0",
    "RUN_NAME": "the default OUT's name",
    "ATTN_IMPL": "flash_attention_2 (default) | sdpa",
    "SMOKE": "1: the GPU smoke run (0.5B model, bundled rows, 3 steps, a checkpoint and a resume)",
    "DRY_RUN": "print: the command line only; 1: it and the pre-flight",
    "RAY_JOB_ADDRESS": "submit to this Ray cluster (ray job submit)",
    "PYTHON": "the Python that runs the GPU command line here (default: .venv's, else python3)",
    "JOB_PYTHON": "the Python a submitted job's entrypoint runs on the cluster (default: python3)",
    "MRTPO_GPU": "1: the GPU command line even without nvidia-smi here",
    "MRTPO_CPU": "1: the CPU embedded default even with GPUs",
}
# Names people type for the variables above (and what to set instead).
MISSPELLINGS = {
    "NUM_STEPS": "STEPS",
    "MAX_STEPS": "STEPS",
    "TOTAL_STEPS": "STEPS",
    "NUM_GPU": "NUM_GPUS",
    "GPUS": "NUM_GPUS",
    "N_GPUS": "NUM_GPUS",
    "NGPUS": "NUM_GPUS",
    "GPUS_PER_NODE": "NUM_GPUS",
    "NUM_GPUS_PER_NODE": "NUM_GPUS",
    "NODES": "NUM_NODES",
    "NUM_NODE": "NUM_NODES",
    "NNODES": "NUM_NODES",
    "TP": "VLLM_TP",
    "TP_SIZE": "VLLM_TP",
    "VLLM_TP_SIZE": "VLLM_TP",
    "BATCH_SIZE": "ROLLOUT_BATCH",
    "ROLLOUT_BATCH_SIZE": "ROLLOUT_BATCH",
    "PROMPTS_PER_STEP": "ROLLOUT_BATCH",
    "TRAIN_BATCH_SIZE": "TRAIN_BATCH",
    "N_SAMPLE": "N_SAMPLES",
    "NUM_SAMPLES": "N_SAMPLES",
    "SAMPLES": "N_SAMPLES",
    "SAMPLES_PER_PROMPT": "N_SAMPLES",
    "EPOCHS": "EPISODES",
    "NUM_EPISODES": "EPISODES",
    "EPISODE": "EPISODES",
    "LEARNING_RATE": "LR",
    "MAX_TOKENS": "MAX_NEW_TOKENS",
    "MAX_NEW_TOKEN": "MAX_NEW_TOKENS",
    "MODEL_PATH": "MODEL",
    "MODEL_NAME": "MODEL",
    "DATA_PATH": "DATA",
    "DATASET": "DATA",
    "OUTPUT": "OUT",
    "OUT_DIR": "OUT",
    "OUTPUT_DIR": "OUT",
    "SAVE_STEP": "SAVE_STEPS",
    "MAX_CKPTS": "KEEP_CKPTS",
    "WARMUP_STEPS": "WARMUP",
    "ATTN": "ATTN_IMPL",
    "ATTN_IMPLEMENTATION": "ATTN_IMPL",
    "DRYRUN": "DRY_RUN",
    "SMOKE_TEST": "SMOKE",
    "RAY_ADDRESS_JOB": "RAY_JOB_ADDRESS",
}
# Every MRTPO_* variable the package reads (tests/launch/test_script_vars.py greps the sources for them).
MRTPO_VARS = frozenset(
    {
        "MRTPO_CPU",
        "MRTPO_GPU",
        "MRTPO_CACHE",
        "MRTPO_METRICS_JSONL",
        "MRTPO_SQL_DB_ROOT",
        "MRTPO_SQL_WORKERS",
        "MRTPO_SQL_TIMEOUT_S",
        "MRTPO_SQL_MAX_ROWS",
        "MRTPO_MAX_RESPONSE_CHARS",
        "MRTPO_INJECT_REPLAY_FAILURE",
        "MRTPO_SKIP_MEMORY_CHECK",
        "MRTPO_SKIP_GPU_CHECK",
        "MRTPO_DUMP_ADVANTAGES",
        "MRTPO_PREFIX",
        "MRTPO_KEYS",
        "MRTPO_CPU_DTYPE",
        "MRTPO_CPU_KV_CACHE_MB",
        "MRTPO_CPU_PEAK_STACKS",
        "MRTPO_CPU_PEAK_STACKS_MS",
        "MRTPO_CPU_VLLM_CORE_IN_ACTOR",
        "MRTPO_CPU_TRAINER_IN_DRIVER",
        "MRTPO_CPU_SKIP_WEIGHT_SYNC",
        "MRTPO_CPU_WEIGHT_SYNC_JSONL",
        "MRTPO_CPU_VLLM_TRIM",
        "MRTPO_CPU_ZERO3_PERSISTENCE",
        "MRTPO_CPU_VLLM_RELEASE_WEIGHTS",
        "MRTPO_CPU_DEBUG",
        "MRTPO_CPU_ACTOR_TRIM",
        "MRTPO_CPU_VLLM_MP",
        "MRTPO_CPU_TORCH_ADAM",
        "MRTPO_CPU_SHM_OP",
        "MRTPO_CPUINFO",
    }
)


def problems(environ: Mapping[str, str]) -> list[str]:
    """One line per variable the scripts would ignore although it looks meant for them."""
    found = []
    for name in sorted(environ):
        if name in MISSPELLINGS:
            right = MISSPELLINGS[name]
            found.append(f"{name} is not read by the scripts: set {right} ({SCRIPT_VARS[right]})")
        elif name.startswith("MRTPO_") and name not in MRTPO_VARS:
            near = difflib.get_close_matches(name, sorted(MRTPO_VARS), n=1)
            hint = f": did you mean {near[0]}?" if near else " (docs/gpu.md lists the variables)"
            found.append(f"{name} is not a variable mrtpo-openrlhf reads{hint}")
    return found


def main() -> int:
    lines = problems(os.environ)
    for line in lines:
        print(f"[mrtpo] {line}; unset it to go on", file=sys.stderr)
    return 2 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
