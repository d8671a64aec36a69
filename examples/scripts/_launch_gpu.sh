#!/usr/bin/env bash
# The paper-scale OpenRLHF command line shared by every train_*.sh (sourced, not run directly).
# Each task script sets TASK, REWARD_FUNC, MODEL, DATA, MAX_NEW_TOKENS and ESTIMATOR; everything below can be
# overridden from the environment. Extra arguments to the task script are appended (they win).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

NUM_GPUS=${NUM_GPUS:-8}
N_SAMPLES=${N_SAMPLES:-8}                  # responses per prompt (GDPO/MRTPO normalize inside this group)
ROLLOUT_BATCH=${ROLLOUT_BATCH:-64}         # prompts per step
TRAIN_BATCH=${TRAIN_BATCH:-$((ROLLOUT_BATCH * N_SAMPLES))}
LR=${LR:-1e-6}
# Method settings, passed only when set: unset, the CLI's defaults apply (mrtpo_openrlhf/core/settings.py).
# BETA, WARMUP, PLACEMENT (mrtpo | shuffle | joint | uniform), REWARD_WEIGHTING (none | saw), CAP (a number | none),
# REPLAY_LOGITS (model | fp32)
method_flags=()
[ -n "${BETA:-}" ] && method_flags+=(--algo.mrtpo.beta "$BETA")
[ -n "${WARMUP:-}" ] && method_flags+=(--algo.mrtpo.warmup_steps "$WARMUP")
[ -n "${PLACEMENT:-}" ] && method_flags+=(--algo.mrtpo.placement "$PLACEMENT")
[ -n "${REWARD_WEIGHTING:-}" ] && method_flags+=(--algo.mrtpo.reward_weighting "$REWARD_WEIGHTING")
[ -n "${CAP:-}" ] && method_flags+=(--algo.mrtpo.cap "$CAP")
[ -n "${REPLAY_LOGITS:-}" ] && method_flags+=(--algo.mrtpo.replay_logits "$REPLAY_LOGITS")  # model | fp32
MAX_LEN=${MAX_LEN:-$((MAX_NEW_TOKENS + 2048))}
EPISODES=${EPISODES:-1}
RUN_NAME=${RUN_NAME:-${ESTIMATOR}-${TASK}-$(basename "$MODEL")}
if [ -n "${RAY_JOB_ADDRESS:-}" ] && [ -f "$REWARD_FUNC" ]; then
  # A submitted job runs in the shipped copy of this repo (the runtime env's working_dir), on whichever node:
  # name a reward file of the repo by its path inside it.
  reward_abs="$(cd "$(dirname "$REWARD_FUNC")" && pwd)/$(basename "$REWARD_FUNC")"
  case "$reward_abs" in "$ROOT"/*) REWARD_FUNC=${reward_abs#"$ROOT"/} ;; esac
fi
OUT=${OUT:-$ROOT/runs/$RUN_NAME}

cmd=(python -m mrtpo_openrlhf.cli.train_ppo_ray
  --actor.model_name_or_path "$MODEL"
  --reward.remote_url "$REWARD_FUNC"
  --data.prompt_dataset "$DATA" --data.input_key prompt --data.label_key label --data.apply_chat_template
  --data.max_len "$MAX_LEN" --rollout.max_new_tokens "$MAX_NEW_TOKENS"
  --actor.num_nodes 1 --actor.num_gpus_per_node "$NUM_GPUS"
  --ref.num_nodes 1 --ref.num_gpus_per_node "$NUM_GPUS"
  --vllm.num_engines "$NUM_GPUS" --vllm.tensor_parallel_size 1 --vllm.gpu_memory_utilization 0.6
  --vllm.enable_sleep --ds.enable_sleep --train.colocate_all --vllm.enable_prefix_caching
  --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
  --ds.attn_implementation flash_attention_2
  --rollout.batch_size "$ROLLOUT_BATCH" --rollout.n_samples_per_prompt "$N_SAMPLES"
  --rollout.micro_batch_size 8 --rollout.temperature 1.0
  --train.batch_size "$TRAIN_BATCH" --train.micro_batch_size 4 --train.max_epochs 1
  --train.num_episodes "$EPISODES" --train.seed "${SEED:-42}"
  --actor.adam.lr "$LR" --actor.lr_warmup_ratio 0.0
  --algo.advantage.estimator "$ESTIMATOR"
  --algo.kl.use_loss --algo.kl.init_coef 0.001 --algo.kl.estimator k3
  --algo.advantage.is_correction_level token
  "${method_flags[@]}"
  --ckpt.output_dir "$OUT/model" --ckpt.path "$OUT/ckpt" --ckpt.save_steps "${SAVE_STEPS:-20}" --ckpt.save_hf
  --logger.logging_steps 1 --logger.tensorboard_dir "$OUT/tensorboard"
)

export MRTPO_METRICS_JSONL=${MRTPO_METRICS_JSONL:-$OUT/metrics.jsonl}
echo "[mrtpo] $RUN_NAME -> $OUT"
if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%q ' "${cmd[@]}" "$@"; echo
  exit 0
fi
mkdir -p "$OUT"
if [ -n "${RAY_JOB_ADDRESS:-}" ]; then
  # Submit to a running cluster; the runtime env ships this repo (package + reward_funcs) to every worker.
  # The verifier variables set here (MRTPO_SQL_TIMEOUT_S, ...: mrtpo_openrlhf/rewards/env.py) go with it.
  runtime_env=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python}" -m mrtpo_openrlhf.rewards.env \
    --working-dir "$ROOT" --env "MRTPO_METRICS_JSONL=$MRTPO_METRICS_JSONL")
  exec ray job submit --address "$RAY_JOB_ADDRESS" --runtime-env-json "$runtime_env" -- "${cmd[@]}" "$@"
fi
"${cmd[@]}" "$@"
