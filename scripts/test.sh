#!/usr/bin/env bash
# Install everything the tests need into .venv (idempotent), lint with ruff, then run the suite.
# Default: the whole suite including slow model tests (what CI runs).
# FAST=1 skips tests marked slow. Extra args go to pytest.
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
set +e
"$ROOT/.venv/bin/python" -m pytest "${MARK[@]}" "$@"
rc=$?
set -e
# pytest exits 5 when nothing was collected: that is a failure for CI, not a pass.
[ $rc -eq 5 ] && echo "pytest collected no tests" >&2
exit $rc
