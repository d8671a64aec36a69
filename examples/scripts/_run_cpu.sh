#!/usr/bin/env bash
# CPU branch of the train_*.sh scripts: set up .venv on a fresh machine, then run the embedded default
# (SmolLM2-135M-Instruct, bundled mini data, the real OpenRLHF path on CPU). Usage: _run_cpu.sh TASK ESTIMATOR [args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TASK=$1 ESTIMATOR=$2
shift 2
# The variables of the GPU command line (_launch_gpu.sh): each one with a meaning here becomes a flag of the embedded
# default or of the training CLI (before the script's own arguments: those win); the others stop with one line.
for var in NUM_NODES NUM_GPUS VLLM_TP TRAIN_BATCH RUN_NAME SMOKE ATTN_IMPL JOB_PYTHON; do
  if [ -n "${!var:-}" ]; then
    echo "[mrtpo] $var does not apply to the CPU embedded default (one actor rank, one vLLM-cpu engine, run folder" \
      "OUT): unset it, or set MRTPO_GPU=1 for the GPU command line" >&2
    exit 2
  fi
done
flags=()
[ -n "${MODEL:-}" ] && flags+=(--model "$MODEL")
[ -n "${DATA:-}" ] && flags+=(--data "$DATA")
[ -n "${OUT:-}" ] && flags+=(--out "$OUT")
[ -n "${BETA:-}" ] && flags+=(--algo.mrtpo.beta "$BETA")  # as on the GPU branch: warned about under gdpo
[ -n "${WARMUP:-}" ] && flags+=(--algo.mrtpo.warmup_steps "$WARMUP")
[ -n "${N_SAMPLES:-}" ] && flags+=(--samples-per-prompt "$N_SAMPLES")
[ -n "${ROLLOUT_BATCH:-}" ] && flags+=(--prompts-per-step "$ROLLOUT_BATCH")
[ -n "${MAX_NEW_TOKENS:-}" ] && flags+=(--max-new-tokens "$MAX_NEW_TOKENS")
[ -n "${PLACEMENT:-}" ] && flags+=(--algo.mrtpo.placement "$PLACEMENT")
[ -n "${RELEVANCE:-}" ] && flags+=(--algo.mrtpo.relevance "$RELEVANCE")
[ -n "${REWARD_WEIGHTING:-}" ] && flags+=(--algo.mrtpo.reward_weighting "$REWARD_WEIGHTING")
[ -n "${REWARD_WEIGHTS:-}" ] && flags+=(--algo.mrtpo.reward_weights "$REWARD_WEIGHTS")
[ -n "${CAP:-}" ] && flags+=(--algo.mrtpo.cap "$CAP")
[ -n "${LR:-}" ] && flags+=(--actor.adam.lr "$LR")
[ -n "${SEED:-}" ] && flags+=(--train.seed "$SEED")
[ -n "${MAX_LEN:-}" ] && flags+=(--data.max_len "$MAX_LEN")
[ -n "${EPISODES:-}" ] && flags+=(--train.num_episodes "$EPISODES")
[ -n "${STEPS:-}" ] && flags+=(--steps "$STEPS")
[ -n "${KEEP_CKPTS:-}" ] && flags+=(--ckpt.max_num "$KEEP_CKPTS")
[ -n "${SAVE_STEPS:-}" ] && flags+=(--ckpt.save_steps "$SAVE_STEPS")
[ -n "${REWARD_FUNC:-}" ] && flags+=(--reward.remote_url "$REWARD_FUNC")
[ "${RESUME:-0}" = 1 ] && flags+=(--ckpt.load_enable)  # the CPU demo starts afresh by default
echo "[mrtpo] no GPU found: running the CPU embedded default ($ESTIMATOR on $TASK)"
bash "$ROOT/scripts/install.sh"
source "$ROOT/scripts/env.sh"
dry_run=()  # DRY_RUN=1: print the commands and run only the pre-flight check, never train
[ "${DRY_RUN:-0}" = 1 ] || [ "${DRY_RUN:-0}" = print ] && dry_run=(--dry-run)
exec "$ROOT/.venv/bin/python" -m mrtpo_openrlhf.cli.default --task "$TASK" --estimator "$ESTIMATOR" \
  "${dry_run[@]}" "${flags[@]}" "$@"
