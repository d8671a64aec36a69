"""Benchmark examples: ``load_benchmark`` runs the loader a task registered for the benchmark
(``mrtpo_openrlhf.tasks.BENCHMARKS``; each task's ``benchmarks.py`` documents its layouts). Every example's
``prompt`` is the training-format user message (the task's own prompt builder wrote it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from mrtpo_openrlhf.data.jsonl import DatasetError
from mrtpo_openrlhf.tasks import BENCHMARKS, get_benchmark


class EvalDataError(DatasetError):
    """A missing or malformed benchmark folder/file; the message says what layout was expected."""


@dataclass(frozen=True)
class EvalExample:
    """One benchmark item.

    ``prompt``: the user message exactly as in training (chat template applied at generation time).
    ``target``: what the scorer needs (benchmark-specific: gold SQL + db paths, constraints, BFCL answer).
    ``meta``: fields copied into the per-example record (difficulty, category...).
    """

    id: str
    benchmark: str
    prompt: str
    target: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)


def default_data_dir(benchmark: str) -> Path | None:
    """The bundled mini fixture of a benchmark (runs with no ``--data-dir``); None when its loader finds its data."""
    return get_benchmark(benchmark).data_dir(None)


def _expect(path: Path, layout: str) -> Path:
    if not path.exists():
        raise EvalDataError(f"{path} not found. Expected layout: {layout}")
    return path


def _load_json_list(path: Path, layout: str) -> list[dict]:
    _expect(path, layout)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EvalDataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg}). Expected layout: {layout}") from None
    if not isinstance(data, list) or not all(isinstance(x, dict) for x in data):
        raise EvalDataError(f"{path}: expected a JSON list of objects. Expected layout: {layout}")
    return data


def _require(row: dict, where: str, fields: dict[str, type], layout: str) -> None:
    for name, typ in fields.items():
        if not isinstance(row.get(name), typ):
            got = "missing" if name not in row else f"a {type(row[name]).__name__}"
            raise EvalDataError(f"{where}: field {name!r} is {got}, expected {typ.__name__}. Expected layout: {layout}")


def load_benchmark(
    benchmark: str, data_dir: str | Path | None = None, options: Mapping[str, Any] | None = None
) -> list[EvalExample]:
    """All examples of one benchmark, in file order; raises EvalDataError naming the expected layout.
    ``options`` ({dest: value}, ``EvalConfig.options``) gives the loader's declared options (``--bfcl-category``);
    the others take their defaults."""
    entry = get_benchmark(benchmark)  # ValueError listing the benchmarks for an unknown name
    examples = entry.function("loader")(entry.data_dir(data_dir), **entry.arguments("loader", options or {}))
    seen: set[str] = set()
    for ex in examples:
        if ex.id in seen:
            raise EvalDataError(f"{benchmark}: duplicate example id {ex.id!r}")
        seen.add(ex.id)
    return examples


__all__ = [
    "BENCHMARKS",
    "EvalDataError",
    "EvalExample",
    "default_data_dir",
    "load_benchmark",
]
