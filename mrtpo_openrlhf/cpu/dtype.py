"""The training dtype of CPU mode: bf16 where the CPU has bf16 instructions, fp32 everywhere else.

Without AVX512-BF16 or AMX, PyTorch's bf16 matmul is emulated: on an AVX2 EPYC the lm_head gradient of the
embedded default ran at 0.7 GFLOP/s against 49.8 in fp32 (a first step of 18 min). ``MRTPO_CPU_DTYPE`` picks:

    auto (default)  bf16 iff /proc/cpuinfo lists avx512_bf16 or amx_bf16, else fp32
    bf16 / fp32     forced (fp32 on a bf16 machine is how the fp32 path is tested)

The launcher resolves ``auto`` once and hands the concrete value to every process through the environment;
the CPU patches (``patches.fp32_*``) read it with ``train_dtype()``. See docs/cpu.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Tuple

ENV_VAR = "MRTPO_CPU_DTYPE"
CHOICES = ("auto", "bf16", "fp32")
BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 flags under which PyTorch runs bf16 matmuls natively
CPUINFO = "/proc/cpuinfo"


def cpu_flags(cpuinfo_text: str) -> set:
    """The feature flags of the ``flags`` lines of /proc/cpuinfo text (union over processors)."""
    flags = set()
    for line in cpuinfo_text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            flags.update(value.split())
    return flags


def bf16_flags(cpuinfo_text: str) -> Tuple[str, ...]:
    """Which of ``BF16_FLAGS`` the CPU has (empty: bf16 would be emulated, i.e. slow)."""
    present = cpu_flags(cpuinfo_text)
    return tuple(flag for flag in BF16_FLAGS if flag in present)


def detect_dtype(cpuinfo_text: str) -> str:
    """``"bf16"`` when the cpuinfo text lists a bf16 instruction flag, else ``"fp32"``."""
    return "bf16" if bf16_flags(cpuinfo_text) else "fp32"


def read_cpuinfo(path: str = CPUINFO) -> str:
    """The text of /proc/cpuinfo, or "" where there is none (then ``auto`` means fp32, the safe choice)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # "bf16" or "fp32": what the run trains and samples in
    requested: str  # the MRTPO_CPU_DTYPE value it came from: auto, bf16 or fp32
    bf16_flags: Tuple[str, ...]  # the bf16 flags /proc/cpuinfo lists

    def as_record(self) -> dict:
        return {"cpu_dtype": self.dtype, "requested": self.requested, "bf16_flags": list(self.bf16_flags)}

    @property
    def bytes(self) -> int:
        """Bytes a value takes in this dtype."""
        return 4 if self.dtype == "fp32" else 2


def resolve(requested: Optional[str] = None, cpuinfo_text: Optional[str] = None) -> DtypeChoice:
    """Resolve ``requested`` (default: $MRTPO_CPU_DTYPE, else auto) against the CPU's flags.

    Raises ValueError for anything but auto/bf16/fp32 (an unknown value must not silently train in bf16).
    """
    raw = requested if requested is not None else os.environ.get(ENV_VAR, "")
    value = raw.strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV_VAR}={raw!r}: expected one of {', '.join(CHOICES)}")
    flags = bf16_flags(read_cpuinfo() if cpuinfo_text is None else cpuinfo_text)
    dtype = ("bf16" if flags else "fp32") if value == "auto" else value
    return DtypeChoice(dtype, value, flags)


def train_dtype() -> str:
    """The dtype this process trains in: ``resolve().dtype`` (the launcher has already fixed it in the env)."""
    return resolve().dtype
