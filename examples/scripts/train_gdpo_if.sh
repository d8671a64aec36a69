#!/usr/bin/env bash
# Baseline: GDPO on the same task and settings as train_mrtpo_if.sh.
exec env TASK=instruction ESTIMATOR=gdpo bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
