#!/usr/bin/env bash
# MRTPO on multi-constraint instruction following: one reward per constraint (reward_funcs/instruction.py).
#   GPUs: the paper's setting (Qwen3-4B-Instruct-2507; MODEL=Qwen/Qwen2.5-7B-Instruct for the other runs).
#   No GPU (or MRTPO_CPU=1): SmolLM2-135M-Instruct on the bundled mini instruction set through the CPU path.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TASK=instruction
ESTIMATOR=${ESTIMATOR:-mrtpo}
source "$HERE/_platform.sh"
if use_cpu; then
  exec bash "$HERE/_run_cpu.sh" "$TASK" "$ESTIMATOR" "$@"
fi
MODEL=${MODEL:-Qwen/Qwen3-4B-Instruct-2507}
DATA=${DATA:?set DATA to a training JSONL made by: python -m mrtpo_openrlhf.rewards.instruction convert --format hir16k --input HIR-16K.jsonl --out if_train.jsonl}
REWARD_FUNC=${REWARD_FUNC:-$HERE/../../reward_funcs/instruction.py}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-2048}
source "$HERE/_launch_gpu.sh"
