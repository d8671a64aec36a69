#!/usr/bin/env bash
# CPU branch of the train_*.sh scripts: set up .venv on a fresh machine, then run the embedded default
# (SmolLM2-135M-Instruct, bundled mini data, the real OpenRLHF path on CPU). Usage: _run_cpu.sh TASK ESTIMATOR [args]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TASK=$1 ESTIMATOR=$2
shift 2
echo "[mrtpo] no GPU found: running the CPU embedded default ($ESTIMATOR on $TASK)"
bash "$ROOT/scripts/install.sh"
source "$ROOT/scripts/env.sh"
dry_run=()  # DRY_RUN=1: print the commands and run only the pre-flight check, never train
[ "${DRY_RUN:-0}" = 1 ] || [ "${DRY_RUN:-0}" = print ] && dry_run=(--dry-run)
exec "$ROOT/.venv/bin/python" -m mrtpo_openrlhf.launch.default --task "$TASK" --estimator "$ESTIMATOR" "${dry_run[@]}" "$@"
