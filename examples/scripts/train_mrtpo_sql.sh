#!/usr/bin/env bash
# MRTPO on the sql task (train.sh; ESTIMATOR=gdpo|group_norm for the baselines).
exec env TASK=sql ESTIMATOR="${ESTIMATOR:-mrtpo}" bash "$(dirname "${BASH_SOURCE[0]}")/train.sh" "$@"
