# Sourced by the train_*.sh scripts: which path to take. MRTPO_GPU=1 forces the GPU command line (e.g. a dry run
# on a machine without GPUs, or a cluster head without one); MRTPO_CPU=1 forces the CPU embedded default.
use_cpu() {
  [ "${MRTPO_GPU:-}" = 1 ] && return 1
  [ "${MRTPO_CPU:-}" = 1 ] && return 0
  ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1
}
