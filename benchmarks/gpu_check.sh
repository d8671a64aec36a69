#!/usr/bin/env bash
# One-GPU check (< 8 minutes, PyTorch + transformers only, no downloads), random Qwen2.5-Coder-7B: compiled JS vs
# fp64 (no recompiles, no eager fallback), the paper-shape replay memory vs colocate_all's headroom, shared vs
# unshared replay in fp32 at a trained model's logit spread, replay / GDPO actor work. Exits 1 when a check fails.
#   bash benchmarks/gpu_check.sh                       # on a GPU machine
#   bash benchmarks/gpu_check.sh --tiny --device cpu   # smoke run (tests/benchmarks/test_gpu_check.py)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PY="${PYTHON:-python}"
# Hard stop at 8 minutes: the table rows measured so far are not lost with it, the run just fails.
exec timeout "${GPU_CHECK_TIMEOUT:-480}" "$PY" "$ROOT/benchmarks/gpu_check.py" "$@"
