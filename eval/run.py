#!/usr/bin/env python
"""Evaluation entry point: ``python eval/run.py --benchmark bird --model smollm2`` (see docs/eval.md)."""

import sys
from pathlib import Path

# The code of this checkout, not whichever copy of the package is installed (summary.json records its commit).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mrtpo_openrlhf.cli.evaluate import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
