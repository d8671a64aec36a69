"""``MRTPO_CPU`` and ``MRTPO_GPU``, read one way everywhere (the CPU layer's ``sitecustomize``, the training CLI).

Both are switches: ``1``, ``true``, ``yes`` or ``on`` (any case, surrounding blanks ignored) turn one on; anything
else, or unset, leaves it off. Standard library only: ``sitecustomize`` imports this in every process.
"""

from __future__ import annotations

import os

CPU_FLAG = "MRTPO_CPU"  # the CPU compatibility layer (mrtpo_openrlhf/cpu)
GPU_FLAG = "MRTPO_GPU"  # the GPU command line, never the CPU fallback
ON = ("1", "true", "yes", "on")


def flag_on(name: str, environ=None, default: bool = False) -> bool:
    """Whether the switch ``name`` is on in ``environ`` (default: this process's environment); ``default`` while it
    is unset (a switch that is on unless turned off)."""
    value = (os.environ if environ is None else environ).get(name)
    return default if value is None else value.strip().lower() in ON


def cpu_layer_on(environ=None) -> bool:
    return flag_on(CPU_FLAG, environ)


def gpu_forced(environ=None) -> bool:
    return flag_on(GPU_FLAG, environ)
