#!/usr/bin/env bash
# Resume the tool study in a new sitting (steps 1-3 of README.md), reusing what survived from the last one.
#
#   bash docs/results/tool-smollm2-cpu/resume.sh          # check and rebuild what is missing, then start the runs
#   bash docs/results/tool-smollm2-cpu/resume.sh --check  # only say what is there and what would be done
#
# Run from main's checkout (STUDY_WORKTREE=DIR: another worktree folder than ../wt-study). The worktree goes to
# ../wt-study at the pinned commit of the study's phase: 08ea7ed until all 30 primary runs are committed, then
# b771232 (amendment 3: the secondary arms and gdpo/mrtpo seeds 11-12; the same training path). The base model must
# have the rebuilt base's weights hash (amendment 1), else it stops: another hash is a new base and needs an amendment.
set -euo pipefail
PIN_PRIMARY=08ea7ed
PIN_SECONDARY=b771232
BASE_SHA=978024dcce103cd8ab869de72784ee241c6a509c009ad82b37c0daf64d4d0d45
MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
WT="${STUDY_WORKTREE:-$(dirname "$MAIN")/wt-study}"
RESULTS="$MAIN/docs/results/tool-smollm2-cpu"
LOG="$(dirname "$MAIN")/study.log"
CHECK=0
[ "${1:-}" = "--check" ] && CHECK=1
say() { echo "[resume] $*"; }
do_or_say() { if [ $CHECK = 1 ]; then say "would run: $*"; else say "running: $*"; "$@"; fi; }

primary_done=0
for arm in gdpo mrtpo mrtpo-shuffle; do
  for seed in 1 2 3 4 5 6 7 8 9 10; do
    [ -f "$RESULTS/runs/$arm/seed$seed/result.json" ] && primary_done=$((primary_done + 1))
  done
done
if [ $primary_done -lt 30 ]; then
  PIN=$PIN_PRIMARY ARMS="gdpo mrtpo mrtpo-shuffle"
  say "phase 1: $primary_done of 30 primary runs committed"
else
  PIN=$PIN_SECONDARY ARMS="grpo mrtpo-joint gdpo mrtpo"
  say "phase 2 (amendment 3): all 30 primary runs committed"
fi

# the plan trains in bf16 (plan.md, Training): without bf16 instructions PyTorch emulates it (about 40x slower
# matmuls on an AVX2 EPYC), and a run in fp32 is not paired; stop before anything is built
CPUINFO="${MRTPO_CPUINFO:-/proc/cpuinfo}"
if ! grep -E '^flags' "$CPUINFO" 2>/dev/null | grep -qwE 'avx512_bf16|amx_bf16'; then
  say "this CPU has no bf16 instructions (no avx512_bf16 or amx_bf16 in $CPUINFO): the plan trains in bf16, emulated"
  say "here (a run would take many times longer) and a run in fp32 is not paired; stop: run the study on a CPU with them"
  exit 1
fi
# the base seed 12 needs (978024dc...) was built on a 2-core AMD EPYC with avx512_bf16 and no AMX; the same cold
# start gave the original base (2a1fa1b4...) on Xeons with AMX three times out of three (notes.md, last section):
# consistent with bf16 kernels that round differently with AMX, not proven. ANY_CPU=1 tries anyway.
if grep -E '^flags' "$CPUINFO" 2>/dev/null | grep -qw amx_bf16 && [ "${ANY_CPU:-0}" != 1 ]; then
  say "this CPU has AMX (amx_bf16): the cold start has given the original base 2a1fa1b4... on every CPU with AMX, and"
  say "seed 12 needs the rebuilt 978024dc... (built on an AMD EPYC with avx512_bf16, no AMX); stop (ANY_CPU=1 tries)"
  exit 1
fi
if [ -n "${MRTPO_CPU_DTYPE:-}" ] && [ "${MRTPO_CPU_DTYPE,,}" != "bf16" ] && [ "${MRTPO_CPU_DTYPE,,}" != "auto" ]; then
  say "MRTPO_CPU_DTYPE=$MRTPO_CPU_DTYPE: the plan trains in bf16; unset it; stop"
  exit 1
fi

RUNNING=0
if pgrep -f "mrtpo_openrlhf.study run" >/dev/null; then
  RUNNING=1
  say "a study run is already going (pgrep -f 'mrtpo_openrlhf.study run'); tail $LOG"
  [ $CHECK = 1 ] || exit 0
fi
if [ -d "$WT" ]; then
  have=$(git -C "$WT" rev-parse --short=7 HEAD)
  if [ -n "$(git -C "$WT" status --porcelain --untracked-files=no)" ]; then
    say "$WT has uncommitted changes to tracked files: the runs would record a dirty tree; stop"
    exit 1
  fi
  if [ "$have" = "$PIN_PRIMARY" ] && [ "$PIN" = "$PIN_SECONDARY" ]; then
    do_or_say git -C "$WT" checkout --quiet --detach "$PIN"  # venv, base model and runs/ are untracked: kept
  elif [ "$have" != "$PIN" ]; then
    say "$WT is at $have, not the pinned $PIN: move it aside and run again"
    exit 1
  else
    say "worktree $WT at $PIN: kept"
  fi
else
  do_or_say git -C "$MAIN" worktree add "$WT" "$PIN"
fi
if [ -x "$WT/.venv/bin/python" ]; then
  say "worktree venv: kept"
else
  do_or_say bash "$WT/scripts/install.sh"
fi
MODEL="$WT/runs/coldstart/tool-sft10"
# the study's weights hash (study/cold_start.py weights_sha256): sha256 over the hex sha256 of each safetensors file
weights_sha() {
  python3 - "$1" <<'PY'
import hashlib, pathlib, sys
files = sorted(pathlib.Path(sys.argv[1]).glob("*.safetensors"))
digest = lambda f: hashlib.sha256(f.read_bytes()).hexdigest()
print(hashlib.sha256("".join(digest(f) for f in files).encode()).hexdigest() if files else "")
PY
}
sha=$(weights_sha "$MODEL")
if [ -z "$sha" ]; then
  if [ $CHECK = 1 ]; then
    say "would rebuild the base model (about 5 minutes) into $MODEL"
  else
    (cd "$WT" && source scripts/env.sh && .venv/bin/python -m mrtpo_openrlhf.study coldstart --out runs/coldstart/tool-sft10 \
      --steps 10 --lr 3e-5 --exclude mrtpo_openrlhf/data/tool/study/provenance.json)
    sha=$(weights_sha "$MODEL")
  fi
fi
if [ -n "$sha" ] && [ "$sha" != "$BASE_SHA" ]; then
  say "base model $MODEL has weights sha256 ${sha:0:12}, not ${BASE_SHA:0:12}: a new base; stop (the plan needs an amendment)"
  exit 1
fi
[ -n "$sha" ] && say "base model: weights sha256 ${sha:0:12}, the rebuilt base"
done_runs=$(find "$RESULTS/runs" -name result.json | wc -l)
say "$done_runs runs committed under $RESULTS/runs"
if [ $CHECK = 1 ]; then
  [ $RUNNING = 1 ] && exit 0
  say "would start: study run --arms $ARMS (log: $LOG)"
  exit 0
fi
cd "$WT"
source scripts/env.sh
# shellcheck disable=SC2086  # ARMS is a list of arm names
RAY_memory_usage_threshold=0.98 nohup .venv/bin/python -m mrtpo_openrlhf.study run examples/study/tool_smollm2_cpu.toml \
  --arms $ARMS --results "$RESULTS" >"$LOG" 2>&1 &
say "study started (pid $!); log: $LOG"
