"""Per-step training metrics as JSON lines, so a run can be checked after it exits.

The trainer actor appends one object per logged step (``{"step": int, "<metric>": float, ...}``) to the
file named by ``$MRTPO_METRICS_JSONL``. Only finite-or-not numbers are kept (NaN and inf are written as
the strings "NaN"/"Infinity" by ``json`` and read back as floats), text samples are dropped.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

ENV_VAR = "MRTPO_METRICS_JSONL"


def numeric_metrics(logs: Mapping[str, Any]) -> Dict[str, float]:
    """The numeric entries of a trainer ``logs_dict`` (0-d tensors and numbers), as floats."""
    out: Dict[str, float] = {}
    for key, value in logs.items():
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            continue
        out[str(key)] = float(value)
    return out


def append_step(path: str | os.PathLike, step: int, logs: Mapping[str, Any]) -> Dict[str, Any]:
    """Append one JSON line ``{"step": step, **numeric_metrics(logs)}`` to ``path`` and return the record."""
    record: Dict[str, Any] = {"step": int(step), **numeric_metrics(logs)}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")
    return record


def continue_at(path: str | os.PathLike, step: int) -> tuple[int, Path | None]:
    """Make ``path`` continue at ``step`` (the checkpoint a run resumes from; 0 for a fresh start): the rows of later
    steps, which the run logs again, move to ``<path>.superseded-<UTC time>`` in their order, never deleted (a crash
    before the first checkpoint, or a checkpoint the trainer cannot see, must not cost the logged steps).

    Returns (rows moved, the file they went to, or None when none moved). A missing file is left missing.
    """
    path = Path(path)
    if not path.exists():
        return 0, None
    rows = read_metrics(path)
    later = [row for row in rows if int(row.get("step", 0)) > step]
    if not later:
        return 0, None
    aside = path.with_name(f"{path.name}.superseded-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}")
    while aside.exists():  # two restarts within a second
        aside = aside.with_name(aside.name + "+")
    aside.write_text("".join(json.dumps(row) + "\n" for row in later), encoding="utf-8")
    kept = [row for row in rows if int(row.get("step", 0)) <= step]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in kept), encoding="utf-8")
    os.replace(tmp, path)
    return len(later), aside


def read_metrics(path: str | os.PathLike) -> List[Dict[str, Any]]:
    """All records of a metrics JSONL file, in order. A torn last line (run killed mid-write) is skipped."""
    records = []
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) - 1:
                continue
            raise ValueError(f"{path}:{number + 1}: not a JSON line: {line[:80]!r}") from None
    return records


def first_key(record: Mapping[str, Any], *candidates: str) -> Optional[str]:
    """The first of ``candidates`` present in ``record`` (metric names differ across upstream versions)."""
    return next((key for key in candidates if key in record), None)


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
