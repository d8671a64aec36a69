"""Read BFCL v4 single-turn data from the installed ``bfcl-eval`` package (data files only).

``bfcl_eval``'s Python modules are never imported (they pull in many SDKs); the package folder is
located with ``importlib.util.find_spec``, which does not execute it. Each file holds one JSON
record per line: ``{"id", "question": [[messages of turn 1], ...], "function": [docs]}``; answers
are in ``possible_answer/`` as ``{"id", "ground_truth": [{name: {param: [acceptable]}}]}``.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrtpo_openrlhf.data.jsonl import DatasetError, read_jsonl
from mrtpo_openrlhf.tasks.tool import AST_CATEGORIES  # noqa: F401 - declared with the benchmark

BFCL_VERSION_PREFIX = "BFCL_v4"  # bfcl_eval constants.category_mapping.VERSION_PREFIX: data and score files
# Categories without a possible-answer file: they only test whether the model calls at all.
NO_ANSWER_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")


@dataclass(frozen=True)
class BfclItem:
    """One BFCL test item. ``ground_truth`` is ``[]`` for (ir)relevance categories."""

    id: str
    category: str
    messages: list[dict[str, Any]]  # the first (only) turn's chat messages
    functions: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]]


def bfcl_data_dir() -> Path:
    """The installed ``bfcl_eval/data`` folder; raises FileNotFoundError with an install hint."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bfcl-eval is not installed; run `pip install --no-deps bfcl-eval`")
    folder = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not folder.is_dir():
        raise FileNotFoundError(f"bfcl-eval has no data folder at {folder}")
    return folder


def _require_id(row: dict) -> None:
    if "id" not in row:
        raise ValueError("expected an object with an 'id'")


def _read_records(path: Path) -> list[dict]:
    """One JSON object with an ``id`` per line; DatasetError names ``path:line`` of a bad one."""
    return read_jsonl(path, validate=_require_id)


def load_bfcl(category: str, data_dir: str | Path | None = None) -> list[BfclItem]:
    """All items of one BFCL v4 AST category, joined with their possible answers by id."""
    if category not in AST_CATEGORIES:
        raise ValueError(f"unknown or non-AST BFCL category {category!r}; choose from {', '.join(AST_CATEGORIES)}")
    folder = Path(data_dir) if data_dir is not None else bfcl_data_dir()
    questions = _read_records(folder / f"{BFCL_VERSION_PREFIX}_{category}.json")
    answers: dict[str, list] = {}
    if category not in NO_ANSWER_CATEGORIES:
        answer_path = folder / "possible_answer" / f"{BFCL_VERSION_PREFIX}_{category}.json"
        answers = {row["id"]: row.get("ground_truth") for row in _read_records(answer_path)}
    items = []
    for row in questions:
        turns = row.get("question") or []
        if len(turns) != 1 or not isinstance(turns[0], list):
            raise DatasetError(f"{category} item {row['id']}: expected exactly one turn of messages")
        if category not in NO_ANSWER_CATEGORIES and row["id"] not in answers:
            raise DatasetError(f"{category} item {row['id']}: no possible answer")
        items.append(
            BfclItem(row["id"], category, turns[0], list(row.get("function") or []), list(answers.get(row["id"]) or []))
        )
    return items
