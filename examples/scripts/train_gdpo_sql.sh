#!/usr/bin/env bash
# Baseline: GDPO on the same task and settings as train_mrtpo_sql.sh.
exec env TASK=sql ESTIMATOR=gdpo bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
