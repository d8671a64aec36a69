#!/usr/bin/env python
"""Evaluation entry point: ``python eval/run.py --benchmark bird --model smollm2`` (see docs/eval.md)."""

import sys

from mrtpo_openrlhf.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main())
