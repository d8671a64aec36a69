# Sourced by the train_*.sh scripts: which path to take. A cluster submission (RAY_JOB_ADDRESS set) and MRTPO_GPU=1
# always take the GPU command line: what is submitted never depends on the submitting machine's GPUs (a login node
# or a head without any). Otherwise MRTPO_CPU=1 forces the CPU embedded default, which also runs where no GPU is found.
# MRTPO_GPU and MRTPO_CPU are read as mrtpo_openrlhf/env_flags.py reads them: 1, true, yes or on, in any case.
flag_on() {
  local value
  value=$(printf '%s' "${!1:-}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')
  case "$value" in 1 | true | yes | on) return 0 ;; *) return 1 ;; esac
}
use_cpu() {
  [ -n "${RAY_JOB_ADDRESS:-}" ] && return 1
  flag_on MRTPO_GPU && return 1
  flag_on MRTPO_CPU && return 0
  ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1
}
# A variable the scripts would silently ignore (STEPS misspelt, an MRTPO_* name the package never reads) stops here
# with one line naming the right one (mrtpo_openrlhf/script_vars.py); without any python3 the check is skipped.
if command -v "${PYTHON:-python3}" >/dev/null 2>&1; then
  PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}" \
    "${PYTHON:-python3}" -m mrtpo_openrlhf.script_vars || exit 2
fi
