"""JSONL reading and writing with errors that name the file and line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator, Iterable


class DatasetError(ValueError):
    """A malformed dataset row or file; the message names the file and (1-based) line."""


def iter_jsonl(path: str | Path, validate: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Yield one dict per non-empty line; raise DatasetError naming ``path:line`` on any bad row.

    ``validate(row)`` may raise ValueError/KeyError/TypeError to reject a row; its message is kept.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            if validate is not None:
                try:
                    validate(row)
                except (ValueError, KeyError, TypeError) as exc:
                    raise DatasetError(f"{path}:{lineno}: {exc}") from None
            yield row


def read_jsonl(path: str | Path, validate: Callable[[dict], None] | None = None) -> list[dict]:
    return list(iter_jsonl(path, validate))


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def require_fields(row: dict, fields: dict[str, type | tuple[type, ...]]) -> None:
    """Raise ValueError naming the first missing or mistyped field."""
    for name, typ in fields.items():
        if name not in row:
            raise ValueError(f"missing field {name!r}")
        if not isinstance(row[name], typ):
            raise ValueError(f"field {name!r} should be {typ}, got {type(row[name]).__name__}")
