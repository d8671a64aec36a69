"""How numbers are written in the report."""

from __future__ import annotations

import math
from typing import Sequence

from ..stats import Paired, t975


def _fmt(x: float | None, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.{max(0, digits - 2)}f}%" if pct else f"{x:.{digits}f}"


def _signed(x: float) -> str:
    """``+0.051``; a nonzero value that would print as ``±0.000`` keeps two significant digits (``+0.00049``), so an
    interval end that barely excludes zero reads as such."""
    text = f"{x:+.3f}"
    return f"{x:+.2g}" if x != 0 and float(text) == 0 else text


def _interval(low: float, high: float) -> str:
    return f"[{_signed(low)}, {_signed(high)}]"


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _p(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "–"
    return "<0.001" if x < 0.001 else f"{x:.3f}"


def _sd(p: Paired) -> float:
    """The seed-to-seed sd of the difference, back from the t-interval."""
    if p.n < 2 or math.isnan(p.t_high):
        return math.nan
    return (p.t_high - p.mean) * math.sqrt(p.n) / t975(p.n - 1)


def _ci(row: dict | None, pct: bool = True, digits: int = 3) -> str:
    if not row or row.get("mean") is None:
        return "–"
    if row.get("low") is None:
        return _fmt(row["mean"], digits, pct)
    return f"{_fmt(row['mean'], digits, pct)} [{_fmt(row['low'], digits, pct)}, {_fmt(row['high'], digits, pct)}]"
