#!/usr/bin/env bash
# Baseline: GRPO on the same task and settings as train_mrtpo_if.sh.
exec env TASK=instruction ESTIMATOR=group_norm bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
