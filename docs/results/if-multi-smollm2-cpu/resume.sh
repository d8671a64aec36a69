#!/usr/bin/env bash
# Run the multi-constraint instruction study's next seeds in this sitting (plan.md: a seed's four arms back to back on
# one machine, one dtype, from the worktree pinned at the plan's commit; a seed only when its four runs fit).
#
#   bash docs/results/if-multi-smollm2-cpu/resume.sh --until 23:30 [--run-minutes 45]   # start what fits, then stop
#   bash docs/results/if-multi-smollm2-cpu/resume.sh --check                              # only say what is there
#
# Run from main's checkout (STUDY_WORKTREE=DIR: another folder than ../wt-if-study). Finished runs are copied into
# main's docs/results/if-multi-smollm2-cpu/runs/ as they finish: commit each one there.
set -euo pipefail
PIN=98c10a1
MAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
WT="${STUDY_WORKTREE:-$(dirname "$MAIN")/wt-if-study}"
RESULTS="$MAIN/docs/results/if-multi-smollm2-cpu"
LOG="$(dirname "$MAIN")/if-study.log"
CONFIG=examples/study/if_multi_smollm2_cpu.toml
CHECK=0 UNTIL="" MINUTES=45  # minutes a run takes here: the pilot's ran ~40 on a loaded 2-core Xeon (bf16)
while [ $# -gt 0 ]; do
  case "$1" in
    --check) CHECK=1 ;;
    --until) UNTIL="$2"; shift ;;
    --run-minutes) MINUTES="$2"; shift ;;
    *) echo "[resume] unknown argument $1 (--check, --until HH:MM, --run-minutes M)" >&2; exit 2 ;;
  esac
  shift
done
say() { echo "[resume] $*"; }
do_or_say() { if [ $CHECK = 1 ]; then say "would run: $*"; else say "running: $*"; "$@"; fi; }
if [ $CHECK = 0 ] && [ -z "$UNTIL" ]; then
  say "give --until HH:MM (UTC): the end of this sitting, so that no seed is started that cannot finish"; exit 2
fi
if pgrep -f "mrtpo_openrlhf.study run $CONFIG" >/dev/null; then
  say "a study run is already going; tail $LOG"; exit 0
fi
if [ -d "$WT" ]; then
  have=$(git -C "$WT" rev-parse --short=7 HEAD)
  [ "$have" = "$PIN" ] || { say "$WT is at $have, not the pinned $PIN: move it aside and run again"; exit 1; }
  [ -z "$(git -C "$WT" status --porcelain --untracked-files=no)" ] || { say "$WT has changes to tracked files; stop"; exit 1; }
  say "worktree $WT at $PIN: kept"
else
  do_or_say git -C "$MAIN" worktree add --detach "$WT" "$PIN"
fi
if [ -x "$WT/.venv/bin/python" ]; then say "worktree venv: kept"; else do_or_say bash "$WT/scripts/install.sh"; fi
say "$(find "$RESULTS/runs" -name result.json 2>/dev/null | wc -l) of 40 runs committed under $RESULTS/runs"
[ $CHECK = 1 ] && exit 0
cd "$WT"
source scripts/env.sh
RAY_memory_usage_threshold=0.98 nohup .venv/bin/python -m mrtpo_openrlhf.study run "$CONFIG" --results "$RESULTS" \
  --until "$UNTIL" --run-minutes "$MINUTES" >"$LOG" 2>&1 &
say "study started (pid $!); log: $LOG"
