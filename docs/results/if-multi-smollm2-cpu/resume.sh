#!/usr/bin/env bash
# Run the multi-constraint instruction study's next runs in this sitting: one run at a time, in the order the plan
# drew, each started only when it fits before --until (plan.md, amendments 1-2: a seed may go on in a later sitting,
# in the same dtype, from the worktree pinned at the plan's commit; a seed begun in another dtype is passed over; the
# CPU of every run goes to machines.jsonl).
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
if [ "${_IF_STUDY_LOOP:-0}" = 0 ]; then  # the loop below goes on in the background, past this shell
  flock -n "$LOG.lock" true 2>/dev/null || { say "a resume loop is going; tail $LOG"; exit 0; }
  _IF_STUDY_LOOP=1 nohup bash "${BASH_SOURCE[0]}" --until "$UNTIL" --run-minutes "$MINUTES" >"$LOG" 2>&1 &
  say "study started (pid $!): one run at a time while one fits before $UNTIL; log: $LOG"
  exit 0
fi
exec 9>"$LOG.lock"
flock -n 9 || { say "another resume loop holds $LOG.lock; stop"; exit 0; }
cd "$WT"
source scripts/env.sh
PY=.venv/bin/python
next_run() {  # the first run of the drawn order not yet committed, passing over seeds begun in another dtype
  "$PY" - "$RESULTS" "$CONFIG" "$here_dtype" <<'PYTHON'
import json, pathlib, sys
from mrtpo_openrlhf.study.config import load_config
runs, cfg, here = pathlib.Path(sys.argv[1]) / "runs", load_config(sys.argv[2]), sys.argv[3]
done = lambda a, s: (runs / a / f"seed{s}" / "result.json").is_file()
dtype = lambda a, s: json.loads((runs / a / f"seed{s}" / "run.json").read_text()).get("cpu_dtype", "?")
passed = set()
for arm, seed in cfg.runs():
    if done(arm, seed) or seed in passed:
        continue
    begun = {dtype(a, s) for a, s in cfg.runs() if s == seed and done(a, s)}
    if begun and begun != {here}:
        passed.add(seed)
        print(f"[resume] seed {seed} began in {', '.join(sorted(begun))}, this CPU trains in {here}: passed over "
              "(its runs go on on a CPU of that dtype)", file=sys.stderr)
        continue
    print(arm, seed)
    break
PYTHON
}
here_dtype=$("$PY" -c "from mrtpo_openrlhf.cpu.dtype import resolve; print(resolve().dtype)")
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
while true; do
  ARM="" SEED=""
  read -r ARM SEED <<<"$(next_run)"
  [ -n "$ARM" ] || { say "no run left for a CPU that trains in $here_dtype"; break; }
  started=$(date -u +%FT%TZ)
  RAY_memory_usage_threshold=0.98 "$PY" -m mrtpo_openrlhf.study run "$CONFIG" --results "$RESULTS" --arms "$ARM" \
    --seeds "$SEED" --until "$UNTIL" --run-minutes "$MINUTES" || { say "$ARM seed $SEED failed (exit $?); stop"; break; }
  [ -f "$RESULTS/runs/$ARM/seed$SEED/result.json" ] || { say "$ARM seed $SEED not started: it does not fit"; break; }
  printf '{"arm": "%s", "seed": %s, "dtype": "%s", "cpu": "%s", "cores": %s, "host": "%s", "started": "%s", "finished": "%s"}\n' \
    "$ARM" "$SEED" "$here_dtype" "$cpu_model" "$(nproc)" "$(hostname)" "$started" "$(date -u +%FT%TZ)" \
    >>"$RESULTS/machines.jsonl"
  say "$ARM seed $SEED done: commit $RESULTS/runs/$ARM/seed$SEED and machines.jsonl"
done
