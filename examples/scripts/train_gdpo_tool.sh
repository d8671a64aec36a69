#!/usr/bin/env bash
# Baseline: GDPO on the same task and settings as train_mrtpo_tool.sh.
exec env TASK=tool ESTIMATOR=gdpo bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
