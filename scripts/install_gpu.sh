#!/usr/bin/env bash
# The GPU stack, in upstream's order (docs/gpu.md: requirements, times, what is not verified on a GPU yet):
#   1. out: packages of CUDA images that clash with the pinned torch (flash_attn, transformer_engine, pynvml)
#   2. vllm 0.29.0 with the torch it pins (2.13.0, a CUDA 13 build: NVIDIA driver >= 580)
#   3. OpenRLHF 0.11.2's requirements, DeepSpeed 0.19.6 with FusedAdam prebuilt where nvcc matches torch's CUDA
#      (else DeepSpeed builds it at the actors' start, which needs nvcc then: the doctor says which), then OpenRLHF
#      itself without dependencies (its own pins would replace vLLM's torch)
#   4. flash-attn 2.8.3, built against the installed torch (--no-build-isolation: pip's isolated build has no torch),
#      only where nvcc matches torch's CUDA; elsewhere skipped with the alternative (ATTN_IMPL=sdpa)
#   5. this project's own requirements, then the project without dependencies; then the doctor's table
# Where: $PYTHON if set, else the active virtualenv or conda env, else this repo's .venv (made here; the launch
# scripts run .venv's python). Usage: bash scripts/install_gpu.sh   (SKIP_FLASH_ATTN=1: no flash-attn build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { echo "[install_gpu] $*"; }

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -n "${VIRTUAL_ENV:-}" ] || [ -n "${CONDA_PREFIX:-}" ]; then
  PY=python3
else
  [ -x "$ROOT/.venv/bin/python" ] || python3 -m venv "$ROOT/.venv"
  PY=$ROOT/.venv/bin/python
fi
"$PY" -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 10) <= v <= (3, 13) else 1)' ||
  { say "$PY is Python $("$PY" -c 'import platform; print(platform.python_version())'): use 3.10-3.13"; exit 2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1
PIP=("$PY" -m pip install)
nvcc_release() {  # "13.0", or nothing without nvcc (CUDA_HOME's first)
  local nvcc=nvcc
  [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ] && nvcc=$CUDA_HOME/bin/nvcc
  command -v "$nvcc" >/dev/null 2>&1 || return 0
  "$nvcc" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -1
}

say "1/5 removing what CUDA images ship and the pinned torch conflicts with"
"$PY" -m pip uninstall -y -q flash-attn flash_attn transformer-engine transformer_engine pynvml 2>/dev/null || true

say "2/5 vllm 0.29.0 and torch 2.13.0 (CUDA 13)"
"${PIP[@]}" vllm==0.29.0 torch==2.13.0
torch_cuda=$("$PY" -c 'import torch; print(torch.version.cuda or "")')
nvcc=$(nvcc_release)
[ -n "$torch_cuda" ] || say "warning: the installed torch is a CPU build (a local wheel index?): the doctor will say so"
builds=0  # nvcc of torch's CUDA major: the CUDA extensions can be built here
[ -n "$nvcc" ] && [ -n "$torch_cuda" ] && [ "${nvcc%%.*}" = "${torch_cuda%%.*}" ] && builds=1

say "3/5 OpenRLHF 0.11.2's requirements, DeepSpeed 0.19.6, then OpenRLHF without dependencies"
"${PIP[@]}" transformers==5.15.0 'ray[default]==2.55.0' datasets accelerate peft bitsandbytes \
  isort jsonlines loralib optimum optree pylatexenc nvidia-ml-py tensorboard torchdata torchmetrics \
  transformers-stream-generator wandb einops ninja packaging
if [ "$builds" = 1 ]; then
  # FusedAdam compiled now (upstream's optimizer config picks it), not minutes into the actors' start
  DS_BUILD_FUSED_ADAM=1 "${PIP[@]}" --no-build-isolation --no-cache-dir deepspeed==0.19.6
else
  say "nvcc ${nvcc:-not found} for torch's CUDA ${torch_cuda:-none}: DeepSpeed's FusedAdam is not prebuilt; the" \
    "actors build it at start, which needs a CUDA ${torch_cuda:-13} toolkit (CUDA_HOME) there (the doctor checks)"
  "${PIP[@]}" deepspeed==0.19.6
fi
"${PIP[@]}" --no-deps openrlhf==0.11.2

say "4/5 flash-attn 2.8.3"
if [ "${SKIP_FLASH_ATTN:-0}" = 1 ]; then
  say "skipped (SKIP_FLASH_ATTN=1): run with ATTN_IMPL=sdpa"
elif [ "$builds" = 1 ]; then
  # no CUDA 13 wheel of 2.8.3 exists: a source build against the installed torch (MAX_JOBS bounds its memory)
  MAX_JOBS=${MAX_JOBS:-8} "${PIP[@]}" --no-build-isolation flash-attn==2.8.3
else
  say "skipped: nvcc ${nvcc:-not found} for torch's CUDA ${torch_cuda:-none}. Install the CUDA ${torch_cuda:-13}" \
    "toolkit (set CUDA_HOME) and rerun, or run with ATTN_IMPL=sdpa"
fi

say "5/5 this project's requirements, then the project without dependencies"
"${PIP[@]}" datasets tqdm langdetect nltk immutabledict emoji==2.16.0 syllapy==0.8.0 zhconv==1.4.3 \
  'uvicorn>=0.30' starlette
"${PIP[@]}" --no-deps -e "$ROOT"
say "done ($PY); the doctor's table:"
"$PY" -m mrtpo_openrlhf.cli.doctor || say "fix the first FAIL above, then rerun: $PY -m mrtpo_openrlhf.cli.doctor"
