#!/usr/bin/env bash
# Baseline: GRPO on the same task and settings as train_mrtpo_sql.sh.
exec env TASK=sql ESTIMATOR=group_norm bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
