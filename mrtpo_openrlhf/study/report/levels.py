"""Held-out scores of a task whose prompts carry different numbers of rewards (instruction following): the share of a
prompt's constraints met (instruction level), all of them met (prompt level), the same over the constraints of types
never seen in training (unseen level), and the instruction level by the number of constraints K.

Each reads ``heldout.json``'s ``per_response`` ([prompt index, [values]]) and ``names_by_prompt`` (study/heldout.py)
and, for the unseen level, the held-out rows (``types`` and ``unseen`` per row: scripts/build_study_if_multi.py).
Each returns one value per held-out prompt (None where a prompt has nothing to score), so the report's mean over
prompts and its noise floor (``stats.heldout_noise``) read them alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

INSTRUCTION = "instruction_level"
PROMPT = "prompt_level"
UNSEEN = "unseen_level"
LEVELS = (INSTRUCTION, PROMPT, UNSEEN)
K_BINS = ((3, 4), (5, 6), (7, 8))  # the exploratory breakdown by constraints per prompt


def _per_prompt(heldout: dict[str, Any], score: Callable[[int, list[float]], float | None]) -> list[float | None]:
    """Per prompt, the mean of ``score(prompt index, values)`` over its responses (None-scored ones left out)."""
    n = len(heldout.get("names_by_prompt") or heldout.get("per_prompt_total") or [])
    sums, counts = [0.0] * n, [0] * n
    for index, values in heldout.get("per_response") or []:
        value = score(index, values)
        if value is not None:
            sums[index] += value
            counts[index] += 1
    return [s / c if c else None for s, c in zip(sums, counts)]


def unseen_positions(rows: Sequence[dict]) -> list[list[int]]:
    """Per held-out row, the positions of its constraints whose type is one of its ``unseen`` types."""
    return [[j for j, t in enumerate(row.get("types") or []) if t in set(row.get("unseen") or [])] for row in rows]


def per_prompt_levels(heldout: dict[str, Any], level: str, rows: Sequence[dict] | None = None) -> list[float | None]:
    """One value per held-out prompt of ``level`` (``LEVELS``); ``rows`` (the held-out rows) for the unseen level."""
    if level == INSTRUCTION:
        return _per_prompt(heldout, lambda i, v: sum(v) / len(v) if v else None)
    if level == PROMPT:
        return _per_prompt(heldout, lambda i, v: float(all(x == 1.0 for x in v)) if v else None)
    if level == UNSEEN:
        if rows is None:
            return []
        where = unseen_positions(rows)

        def unseen(i: int, v: list[float]) -> float | None:
            js = where[i] if i < len(where) else []
            return sum(v[j] for j in js) / len(js) if js else None

        return _per_prompt(heldout, unseen)
    raise ValueError(f"level {level!r}: choose from {LEVELS}")


def mean_level(per_prompt: Sequence[float | None]) -> float:
    """The mean over prompts with a value (every prompt has the same number of samples), NaN when none."""
    got = [x for x in per_prompt if x is not None]
    return sum(got) / len(got) if got else float("nan")


def by_k(heldout: dict[str, Any]) -> dict[tuple[int, int], float]:
    """The instruction level over the prompts whose number of constraints falls in each of ``K_BINS``."""
    names = heldout.get("names_by_prompt") or []
    per_prompt = per_prompt_levels(heldout, INSTRUCTION)
    out = {}
    for low, high in K_BINS:
        got = [x for x, n in zip(per_prompt, names) if x is not None and n and low <= len(n) <= high]
        out[(low, high)] = sum(got) / len(got) if got else float("nan")
    return out


def heldout_rows(config: dict[str, Any], repo_root: Path) -> list[dict] | None:
    """The config's held-out rows (for the unseen level), None when it names none or the file is gone."""
    name = config.get("heldout")
    if not name:
        return None
    path = Path(name) if Path(name).is_absolute() else repo_root / name
    if not path.is_file():
        return None
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
