#!/usr/bin/env bash
# The paper-scale OpenRLHF command line shared by every train_*.sh (sourced, not run directly).
# Each task script sets TASK, REWARD_FUNC, MODEL, DATA, MAX_NEW_TOKENS and ESTIMATOR; everything below can be
# overridden from the environment. Extra arguments to the task script are appended (they win).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
die() { echo "[mrtpo] $*" >&2; exit 2; }
abs_path() {  # absolute, with . and .. resolved; the path need not exist
  local path=$1 part
  local -a parts=() out=()
  [[ $path = /* ]] || path=$PWD/$path
  IFS=/ read -ra parts <<< "$path"
  for part in "${parts[@]}"; do
    case $part in '' | .) ;; ..) [ ${#out[@]} -eq 0 ] || unset 'out[${#out[@]}-1]' ;; *) out+=("$part") ;; esac
  done
  local IFS=/
  echo "/${out[*]}"
}
quoted() {  # a command line a shell takes back as it is: plain words bare, the rest in single quotes
  local arg
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then printf '%s ' "$arg"
    elif [[ $arg != *"'"* ]]; then printf "'%s' " "$arg"
    else printf '%q ' "$arg"; fi
  done
  echo
}
gcd() { local a=$1 b=$2 t; while [ "$b" -ne 0 ]; do t=$((a % b)); a=$b; b=$t; done; echo "$a"; }
job_path() {  # a local file or folder as the job sees it: inside this repo, by its path in the shipped copy
  local path
  [ -e "$1" ] || { echo "$1"; return; }  # a hub id (model, dataset) or a path only the cluster has
  path=$(abs_path "$1")
  if [ -n "${RAY_JOB_ADDRESS:-}" ]; then
    # a submitted job runs in the runtime env's copy of this repo (its working_dir), on whichever node
    case "$path" in "$ROOT"/*) path=${path#"$ROOT"/} ;; esac
  fi
  echo "$path"
}

# The Python that runs the command line here (DRY_RUN=1's pre-flight, a local run, the job's runtime env): $PYTHON,
# else this repo's .venv (scripts/install_gpu.sh makes it), else python3 on PATH. A submitted job's entrypoint runs
# the cluster's python3 (JOB_PYTHON), as OpenRLHF's own examples submit it.
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
JOB_PYTHON=${JOB_PYTHON:-python3}
need_torch() {  # before this machine runs the CLI: a Python without torch is one line, not a traceback
  "$PYTHON" -c 'import torch' >/dev/null 2>&1 ||
    die "$PYTHON has no torch: install the GPU stack (bash scripts/install_gpu.sh, docs/gpu.md) or set PYTHON to a Python that has it"
}

# SMOKE=1: the GPU smoke run (docs/gpu.md): this node's first 1-2 GPUs, STEPS (3) steps of ROLLOUT_BATCH (4) prompts
# x N_SAMPLES (4), a checkpoint after step STEPS-1 and a resumed last step, then the CPU default's checks
# (launch/smoke.py). The model and the bundled rows are set by train.sh.
SMOKE_RUN=0
if [ "${SMOKE:-0}" = 1 ]; then
  SMOKE_RUN=1
  [ -z "${RAY_JOB_ADDRESS:-}" ] || die "SMOKE=1 runs on this node's GPUs: unset RAY_JOB_ADDRESS (docs/cluster.md for a cluster)"
  found=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  NUM_NODES=${NUM_NODES:-1}
  NUM_GPUS=${NUM_GPUS:-$([ "${found:-0}" -ge 2 ] && echo 2 || echo 1)}
  ROLLOUT_BATCH=${ROLLOUT_BATCH:-4}
  N_SAMPLES=${N_SAMPLES:-4}
  STEPS=${STEPS:-3}
  MAX_LEN=${MAX_LEN:-1536}
  KEEP_CKPTS=${KEEP_CKPTS:-1}
  RUN_NAME=${RUN_NAME:-smoke-${ESTIMATOR}-${TASK}}
  [ "${STEPS}" -ge 2 ] 2>/dev/null || die "SMOKE=1: STEPS must be at least 2 (a checkpoint, then a resumed step)"
fi

# Layout: NUM_NODES nodes of NUM_GPUS GPUs each; every GPU holds an actor rank (ZeRO-3), the reference model and,
# per VLLM_TP GPUs, one vLLM engine (colocate_all).
NUM_NODES=${NUM_NODES:-1}
NUM_GPUS=${NUM_GPUS:-8}                    # GPUs per node
VLLM_TP=${VLLM_TP:-1}                      # tensor parallel size of each vLLM engine
N_SAMPLES=${N_SAMPLES:-8}                  # responses per prompt (GDPO/MRTPO normalize inside this group)
ROLLOUT_BATCH=${ROLLOUT_BATCH:-64}         # prompts per step
for var in NUM_NODES NUM_GPUS VLLM_TP N_SAMPLES ROLLOUT_BATCH ${TRAIN_BATCH:+TRAIN_BATCH} ${STEPS:+STEPS} \
  ${KEEP_CKPTS:+KEEP_CKPTS}; do
  [[ ${!var} =~ ^[1-9][0-9]*$ ]] || die "$var must be a positive whole number, got '${!var}'"
done
WORLD=$((NUM_NODES * NUM_GPUS))
RESPONSES=$((ROLLOUT_BATCH * N_SAMPLES))  # per step
TRAIN_BATCH=${TRAIN_BATCH:-$RESPONSES}     # responses per optimizer step (default: one step per rollout)
[ $((WORLD % VLLM_TP)) -eq 0 ] || die "VLLM_TP $VLLM_TP does not divide the $WORLD GPUs (NUM_NODES $NUM_NODES x NUM_GPUS $NUM_GPUS)"
[ $((RESPONSES % TRAIN_BATCH)) -eq 0 ] ||
  die "TRAIN_BATCH $TRAIN_BATCH does not divide the $RESPONSES responses of a step (ROLLOUT_BATCH $ROLLOUT_BATCH x N_SAMPLES $N_SAMPLES)"
if [ $((TRAIN_BATCH % WORLD)) -ne 0 ]; then
  if [ "$TRAIN_BATCH" -ne "$RESPONSES" ]; then
    die "$WORLD GPUs (NUM_NODES $NUM_NODES x NUM_GPUS $NUM_GPUS) do not divide TRAIN_BATCH $TRAIN_BATCH: set TRAIN_BATCH to a multiple of $WORLD"
  fi
  step=$((WORLD / $(gcd "$WORLD" "$N_SAMPLES")))
  below=$((ROLLOUT_BATCH / step * step))
  die "$WORLD GPUs (NUM_NODES $NUM_NODES x NUM_GPUS $NUM_GPUS) do not divide the $RESPONSES responses of a step" \
    "(ROLLOUT_BATCH $ROLLOUT_BATCH x N_SAMPLES $N_SAMPLES): set ROLLOUT_BATCH to a multiple of $step" \
    "(e.g. $([ "$below" -gt 0 ] && echo "$below or ")$((below + step)))"
fi
# Per GPU: TRAIN_BATCH / WORLD responses per optimizer step, in micro-batches of at most 4 (8 for the log-prob
# forwards), each a divisor of it, so that DeepSpeed's gradient accumulation comes out whole.
TRAIN_MICRO=$(gcd 4 $((TRAIN_BATCH / WORLD)))
ROLLOUT_MICRO=$(gcd 8 $((RESPONSES / WORLD)))
LR=${LR:-1e-6}
# Method settings, passed only when set: unset, the CLI's defaults apply (mrtpo_openrlhf/core/settings.py).
# BETA, WARMUP, PLACEMENT (mrtpo | shuffle | joint | uniform), RELEVANCE (js | loggap | js-contrast), REWARD_WEIGHTING (none | saw), CAP (a number | none),
# REWARD_WEIGHTS (name=w,...)
# REPLAY_LOGITS (model | fp32)
method_flags=()
[ -n "${BETA:-}" ] && method_flags+=(--algo.mrtpo.beta "$BETA")
[ -n "${WARMUP:-}" ] && method_flags+=(--algo.mrtpo.warmup_steps "$WARMUP")
[ -n "${PLACEMENT:-}" ] && method_flags+=(--algo.mrtpo.placement "$PLACEMENT")
[ -n "${RELEVANCE:-}" ] && method_flags+=(--algo.mrtpo.relevance "$RELEVANCE")
[ -n "${REWARD_WEIGHTING:-}" ] && method_flags+=(--algo.mrtpo.reward_weighting "$REWARD_WEIGHTING")
[ -n "${REWARD_WEIGHTS:-}" ] && method_flags+=(--algo.mrtpo.reward_weights "$REWARD_WEIGHTS")
[ -n "${CAP:-}" ] && method_flags+=(--algo.mrtpo.cap "$CAP")
# A relaunch after a crash resumes from the last checkpoint in $OUT/ckpt (upstream starts at step 0 where there is
# none); RESUME=0 starts at step 0 anyway (the trainer then moves the old metrics.jsonl aside).
resume_flags=()
[ "${RESUME:-1}" = 1 ] && resume_flags+=(--ckpt.load_enable)
[ -n "${REPLAY_LOGITS:-}" ] && method_flags+=(--algo.mrtpo.replay_logits "$REPLAY_LOGITS")  # model | fp32
MAX_LEN=${MAX_LEN:-$((MAX_NEW_TOKENS + 2048))}
EPISODES=${EPISODES:-1}
# STEPS: the run stops after STEPS steps: the first STEPS x ROLLOUT_BATCH prompts, one pass (as the CPU default's
# --steps); unset, every prompt, EPISODES times.
data_flags=()
if [ -n "${STEPS:-}" ]; then
  [ "$EPISODES" = 1 ] || die "STEPS $STEPS and EPISODES $EPISODES: STEPS counts the steps of one pass; set one of them"
  data_flags+=(--data.max_samples $((STEPS * ROLLOUT_BATCH)))
fi
# Attention of the actor and reference: flash_attention_2 needs flash-attn in every worker (the pre-flight and the
# doctor check it); ATTN_IMPL=sdpa runs without it (slower on long sequences).
ATTN_IMPL=${ATTN_IMPL:-flash_attention_2}
case "$ATTN_IMPL" in flash_attention_2 | flash_attention_3 | sdpa | eager) ;;
  *) die "ATTN_IMPL=$ATTN_IMPL: choose flash_attention_2, sdpa (no flash-attn needed), flash_attention_3 or eager" ;;
esac
RUN_NAME=${RUN_NAME:-${ESTIMATOR}-${TASK}-$(basename "$MODEL")}
if [ -n "${RAY_JOB_ADDRESS:-}" ] && [ -z "${OUT:-}" ]; then
  die "RAY_JOB_ADDRESS: set OUT to a folder on storage that every node and you can read (checkpoints, metrics.jsonl, tensorboard go there)"
fi
OUT=$(abs_path "${OUT:-$ROOT/runs/$RUN_NAME}")
REWARD_FUNC=$(job_path "$REWARD_FUNC")
DATA=$(job_path "$DATA")
MODEL=$(job_path "$MODEL")

cmd=("$PYTHON" -m mrtpo_openrlhf.cli.train_ppo_ray
  --actor.model_name_or_path "$MODEL"
  --reward.remote_url "$REWARD_FUNC"
  --data.prompt_dataset "$DATA" --data.input_key prompt --data.label_key label --data.apply_chat_template
  --data.max_len "$MAX_LEN" --rollout.max_new_tokens "$MAX_NEW_TOKENS" "${data_flags[@]}"
  --actor.num_nodes "$NUM_NODES" --actor.num_gpus_per_node "$NUM_GPUS"
  --ref.num_nodes "$NUM_NODES" --ref.num_gpus_per_node "$NUM_GPUS"
  --vllm.num_engines $((WORLD / VLLM_TP)) --vllm.tensor_parallel_size "$VLLM_TP" --vllm.gpu_memory_utilization 0.6
  --vllm.enable_sleep --ds.enable_sleep --train.colocate_all --vllm.enable_prefix_caching
  --ds.zero_stage 3 --ds.param_dtype bf16 --actor.gradient_checkpointing_enable
  --ds.attn_implementation "$ATTN_IMPL"
  --rollout.batch_size "$ROLLOUT_BATCH" --rollout.n_samples_per_prompt "$N_SAMPLES"
  --rollout.micro_batch_size "$ROLLOUT_MICRO" --rollout.temperature 1.0
  --train.batch_size "$TRAIN_BATCH" --train.micro_batch_size "$TRAIN_MICRO" --train.max_epochs 1
  --train.num_episodes "$EPISODES" --train.seed "${SEED:-42}"
  --actor.adam.lr "$LR" --actor.lr_warmup_ratio 0.0
  --algo.advantage.estimator "$ESTIMATOR"
  --algo.kl.use_loss --algo.kl.init_coef 0.001 --algo.kl.estimator k3
  --algo.advantage.is_correction_level token
  "${method_flags[@]}"
  --ckpt.output_dir "$OUT/model" --ckpt.path "$OUT/ckpt" --ckpt.save_steps "${SAVE_STEPS:-20}" --ckpt.save_hf
  --ckpt.max_num "${KEEP_CKPTS:-3}"
  "${resume_flags[@]}"
  --logger.logging_steps 1 --logger.tensorboard_dir "$OUT/tensorboard"
)

export MRTPO_METRICS_JSONL=$(abs_path "${MRTPO_METRICS_JSONL:-$OUT/metrics.jsonl}")
echo "[mrtpo] $RUN_NAME -> $OUT ($NUM_NODES x $NUM_GPUS GPUs; metrics: $MRTPO_METRICS_JSONL)"
[ -z "${RAY_JOB_ADDRESS:-}" ] || echo "[mrtpo] OUT and DATA must be on storage every node reads, this machine included (docs/cluster.md)"
dry_run=${DRY_RUN:-0}
[ "$dry_run" = 0 ] || [ "$dry_run" = 1 ] || [ "$dry_run" = print ] || die "DRY_RUN=$dry_run: choose 1 or print"

if [ "$SMOKE_RUN" = 1 ]; then
  # The first STEPS-1 steps with a checkpoint at the end, then the same command resumed for the last step, then the
  # checks (finite losses, the vLLM/trainer log-prob gap, per-reward metrics, steps 1..STEPS each once, the checkpoint
  # and the saved model).
  first=("${cmd[@]}" "$@" --data.max_samples $(((STEPS - 1) * ROLLOUT_BATCH)) --ckpt.save_steps $((STEPS - 1)))
  second=("${cmd[@]}" "$@" --ckpt.load_enable)
  check=("$PYTHON" -m mrtpo_openrlhf.launch.smoke --out "$OUT" --estimator "$ESTIMATOR" --steps "$STEPS")
  if [ "$dry_run" != 0 ]; then
    quoted "${first[@]}"
    quoted "${second[@]}"
    quoted "${check[@]}"
    [ "$dry_run" = print ] && exit 0
    need_torch
    exec "${first[@]}" --preflight-only >&2
  fi
  need_torch
  [ ! -e "$OUT/ckpt" ] || die "SMOKE=1: $OUT already holds a run: remove it or set OUT"
  mkdir -p "$OUT"
  t0=$SECONDS
  echo "[mrtpo] smoke run 1/3: steps 1-$((STEPS - 1)) and a checkpoint"
  "${first[@]}"
  echo "[mrtpo] smoke run 2/3: resume from $OUT/ckpt for step $STEPS"
  "${second[@]}"
  echo "[mrtpo] smoke run 3/3: checks ($((SECONDS - t0)) s so far)"
  exec "${check[@]}"
fi

if [ -n "${RAY_JOB_ADDRESS:-}" ]; then
  # Submit to a running cluster; the runtime env ships this repo (package + reward_funcs) to every worker.
  # The verifier variables set here (MRTPO_SQL_TIMEOUT_S, ...: mrtpo_openrlhf/rewards/env.py) go with it, and so does
  # MRTPO_METRICS_JSONL (the only way the trainer writes metrics.jsonl). The job's python3 is the cluster's.
  runtime_env=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m mrtpo_openrlhf.cli.job_env \
    --working-dir "$ROOT" --env "MRTPO_METRICS_JSONL=$MRTPO_METRICS_JSONL") ||
    die "$PYTHON could not build the job's runtime env (python -m mrtpo_openrlhf.cli.job_env)"
  submit=(ray job submit --address "$RAY_JOB_ADDRESS" --runtime-env-json "$runtime_env" -- "$JOB_PYTHON" "${cmd[@]:1}" "$@")
  if [ "$dry_run" != 0 ]; then
    quoted "${submit[@]}"  # the complete line: paste it to submit
    [ "$dry_run" = print ] && exit 0
    # Then only the CLI's pre-flight check of the data, labels, reward and flags, here, from the repo root (the
    # job's working_dir); it starts nothing, exit 2 on a problem.
    need_torch
    cd "$ROOT"
    exec "${cmd[@]}" "$@" --preflight-only >&2
  fi
  # ray job submit copies the repo; the run writes OUT from the cluster's nodes: made here too, so this machine must
  # mount the same shared OUT (docs/cluster.md)
  mkdir -p "$OUT"
  exec "${submit[@]}"
fi
if [ "$dry_run" != 0 ]; then
  quoted "${cmd[@]}" "$@"
  [ "$dry_run" = print ] && exit 0  # the command line alone (the study's --dry-run)
  # Then only the CLI's pre-flight check of the data, labels, reward and flags, on this machine; it starts nothing,
  # exit 2 on a problem.
  need_torch
  exec "${cmd[@]}" "$@" --preflight-only >&2
fi
need_torch
mkdir -p "$OUT"
exec "${cmd[@]}" "$@"
