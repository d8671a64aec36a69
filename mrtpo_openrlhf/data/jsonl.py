"""JSONL reading and writing with errors that name the file and line; writes replace the output atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator


class DatasetError(ValueError):
    """A malformed dataset row or file; the message names the file and (1-based) line."""


def iter_jsonl(path: str | Path, validate: Callable[[dict], None] | None = None) -> Iterator[dict]:
    """Yield one dict per non-empty line; raise DatasetError naming ``path:line`` on any bad row.

    ``validate(row)`` may raise ValueError/KeyError/TypeError to reject a row; its message is kept.
    """
    for _, row in iter_jsonl_numbered(path, validate):
        yield row


def json_error_at(exc: json.JSONDecodeError) -> str:
    """``exc``'s message and column: "Expecting value at column 5", "Unterminated string starting at column 16"
    (json's message for an open string already ends in "at")."""
    return f"{exc.msg}{'' if exc.msg.endswith(' at') else ' at'} column {exc.colno}"


def iter_jsonl_numbered(path: str | Path, validate: Callable[[dict], None] | None = None) -> Iterator[tuple[int, dict]]:
    """``iter_jsonl`` with each row's 1-based line number, for callers whose own checks name the line. A UTF-8
    byte-order mark before the first row is skipped (editors on Windows write one)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: invalid UTF-8 at byte {exc.start} of the line") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: invalid JSON ({json_error_at(exc)})") from None
            except RecursionError:
                raise DatasetError(f"{path}:{lineno}: JSON nested too deeply") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            if validate is not None:
                try:
                    validate(row)
                except (ValueError, KeyError, TypeError) as exc:
                    raise DatasetError(f"{path}:{lineno}: {exc}") from None
            yield lineno, row


def read_jsonl(path: str | Path, validate: Callable[[dict], None] | None = None) -> list[dict]:
    return list(iter_jsonl(path, validate))


def refuse_existing(path: str | Path, overwrite: bool) -> None:
    """A converter's ``--out``: an existing file is replaced only with ``--overwrite`` (DatasetError otherwise)."""
    if not overwrite and Path(path).exists():
        raise DatasetError(f"{path} exists: pass --overwrite to replace it")


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the process umask (0o644 under the usual 022)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write one JSON object per line; returns the row count.

    The rows go to a temporary file in the same folder, renamed over ``path`` only once every row is written:
    if ``rows`` raises midway (a bad input row), the previous ``path`` is left exactly as it was. The file gets
    the mode of any other new file (``new_file_mode``), not the temporary file's 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    n = 0
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return n


def refuse_same_file(input_path: str | Path, out_path: str | Path) -> None:
    """Raise DatasetError when ``out_path`` is ``input_path`` (same file through any link or spelling)."""
    src, dst = Path(input_path), Path(out_path)
    same = src.resolve() == dst.resolve()
    if not same and src.exists() and dst.exists():
        same = os.path.samefile(src, dst)
    if same:
        raise DatasetError(f"--out {out_path} is the input file {input_path}; choose another output path")


def require_fields(row: dict, fields: dict[str, type | tuple[type, ...]]) -> None:
    """Raise ValueError naming the first missing or mistyped field."""
    for name, typ in fields.items():
        if name not in row:
            raise ValueError(f"missing field {name!r}")
        if not isinstance(row[name], typ):
            raise ValueError(f"field {name!r} should be {typ}, got {type(row[name]).__name__}")
