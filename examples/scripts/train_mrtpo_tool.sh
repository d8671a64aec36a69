#!/usr/bin/env bash
# MRTPO on tool calling: rewards format, correctness (reward_funcs/tool.py).
#   GPUs: Qwen2.5-7B-Instruct by default (MODEL=... for the other models).
#   No GPU (or MRTPO_CPU=1): SmolLM2-135M-Instruct on the bundled mini tool set through the CPU path.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TASK=tool
ESTIMATOR=${ESTIMATOR:-mrtpo}
source "$HERE/_platform.sh"
if use_cpu; then
  exec bash "$HERE/_run_cpu.sh" "$TASK" "$ESTIMATOR" "$@"
fi
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
DATA=${DATA:?set DATA to a training JSONL made by: python -m mrtpo_openrlhf.rewards.tool convert --input tool_train.jsonl --out tool_train_rows.jsonl}
REWARD_FUNC=${REWARD_FUNC:-$HERE/../../reward_funcs/tool.py}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-1024}
source "$HERE/_launch_gpu.sh"
