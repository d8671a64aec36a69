# Sourced by the train_*.sh scripts: which path to take. A cluster submission (RAY_JOB_ADDRESS set) and MRTPO_GPU=1
# always take the GPU command line: what is submitted never depends on the submitting machine's GPUs (a login node
# or a head without any). Otherwise MRTPO_CPU=1 forces the CPU embedded default, which also runs where no GPU is found.
use_cpu() {
  [ -n "${RAY_JOB_ADDRESS:-}" ] && return 1
  [ "${MRTPO_GPU:-}" = 1 ] && return 1
  [ "${MRTPO_CPU:-}" = 1 ] && return 0
  ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1
}
