#!/usr/bin/env bash
# Install everything the tests need into .venv (idempotent), lint with ruff, then run the suite.
# Default: the whole suite including slow model tests (what CI runs).
# FAST=1 skips tests marked slow. TEST_WORKERS=N: pytest-xdist workers (default 2; 1 runs in one process): the slow
# cluster tests run one at a time on one worker, the rest beside them (tests/parallel.py). Extra args go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/install.sh"
cd "$ROOT"
source "$ROOT/scripts/env.sh"
# Lint first (config in pyproject.toml): a lint error fails the run before the long test suite.
if ! "$ROOT/.venv/bin/ruff" check .; then
  echo "lint failed (errors above); \`.venv/bin/ruff check --fix .\` fixes many, the rest by hand" >&2
  exit 1
fi
if ! "$ROOT/.venv/bin/ruff" format --check .; then
  echo "format check failed: run \`.venv/bin/ruff format .\`" >&2
  exit 1
fi
MARK=()
[ "${FAST:-0}" = 1 ] && MARK=(-m "not slow")
WORKERS="${TEST_WORKERS:-2}"
case "$WORKERS" in ''|*[!0-9]*) echo "TEST_WORKERS must be a number of workers, not '$WORKERS'" >&2; exit 2 ;; esac
SPREAD=(-n "$WORKERS" --dist loadgroup)
[ "$WORKERS" -le 1 ] && SPREAD=()
for arg in "$@"; do  # the caller's own -n / --dist / -p no:xdist wins
  case "$arg" in -n|-n[0-9]*|--numprocesses*|--dist*|no:xdist) SPREAD=() ;; esac
done
set +e
"$ROOT/.venv/bin/python" -m pytest "${MARK[@]}" "${SPREAD[@]}" "$@"
rc=$?
set -e
# pytest exits 5 when nothing was collected: that is a failure for CI, not a pass.
[ $rc -eq 5 ] && echo "pytest collected no tests" >&2
exit $rc
