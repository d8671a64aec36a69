"""Run one untrusted SQL query against a SQLite database without letting it change or escape anything.

Layers of defence (each alone should be enough for its threat):
- the database is opened read-only through a ``file:...?mode=ro`` URI;
- the statement must be a single ``SELECT``/``WITH``/``VALUES`` query (checked by the lexer);
- an authorizer allows only reads, function calls (minus ``load_extension`` and friends), recursive CTEs and a
  short list of schema-reporting pragmas; ATTACH/DETACH, every write, DDL and transaction are denied;
- extension loading is disabled on the connection;
- a progress handler aborts the query past a wall-time limit, and the row count and value size are capped;
  ``printf``/``format`` are guarded against huge widths (one VM step the progress handler cannot interrupt).

Every call opens its own connection, so ``execute_sql`` is safe to call from many threads at once.
"""
from __future__ import annotations

import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from .lexer import first_keyword, split_statements

DEFAULT_TIMEOUT_S = 1.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_VALUE_BYTES = 10_000_000  # largest string/blob one expression may build (SQLITE_LIMIT_LENGTH)
PROGRESS_EVERY_N_OPS = 1_000  # SQLite VM instructions between two wall-clock checks

ALLOWED_FIRST_KEYWORDS = frozenset({"SELECT", "WITH", "VALUES"})
#: Pragmas that only report schema facts (their argument is a table or index name); every other pragma is denied.
READ_ONLY_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list", "collation_list"}
)
#: Functions that reach outside the database (files, extensions, tokenizer pointers).
DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"})

_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


@dataclass
class SqlResult:
    """Outcome of one query. ``error == ""`` iff the query ran to completion (possibly truncated)."""

    rows: list[tuple] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    error: str = ""
    timed_out: bool = False
    truncated: bool = False  # more than max_rows rows existed; ``rows`` holds the first max_rows
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error


def _authorize(action: int, arg1, arg2, db_name, trigger) -> int:
    """sqlite3 authorizer callback: allow-list of actions, everything else denied."""
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA:
        # arg2 is the pragma's argument: a table/index name for the listed pragmas, never a setting.
        harmless = (arg1 or "").lower() in READ_ONLY_PRAGMAS
        return sqlite3.SQLITE_OK if harmless else sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_DENY


def _decode_text(raw: bytes) -> str:
    # Same leniency as the Spider evaluation: invalid UTF-8 in a database never crashes scoring.
    return raw.decode("utf-8", errors="ignore")


_DIGITS_RE = re.compile(r"\d+")


def _guarded_printf(max_value_bytes: int):
    """A drop-in ``printf``/``format`` that refuses huge widths/precisions, plus the helper connection it uses.

    SQLite's builtin spends seconds inside one VM step on ``printf('%.999999999c', 'x')`` (it appends the character
    one at a time even past the length limit), where the progress handler cannot stop it. The guard rejects any
    width or precision above ``max_value_bytes`` and delegates everything else to the builtin of a private
    in-memory connection, so results stay identical to SQLite's.
    """
    helper = sqlite3.connect(":memory:", check_same_thread=False)
    helper.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)

    def printf(*args):
        if not args:
            return None
        fmt = args[0]
        if isinstance(fmt, str):
            too_wide = any(len(d) > 9 or int(d) > max_value_bytes for d in _DIGITS_RE.findall(fmt))
            star_too_wide = "*" in fmt and any(
                isinstance(a, (int, float)) and abs(a) > max_value_bytes for a in args[1:]
            )
            if too_wide or star_too_wide:
                raise ValueError("printf width or precision too large")
        placeholders = ",".join("?" * len(args))
        return helper.execute(f"SELECT printf({placeholders})", args).fetchone()[0]

    return printf, helper


def check_statement(sql: str, select_only: bool = True) -> str:
    """Return "" if ``sql`` is one statement (of an allowed kind), else the reason it is rejected."""
    statements = split_statements(sql)
    if not statements:
        return "empty query"
    if len(statements) > 1:
        return f"only one SQL statement is allowed, got {len(statements)}"
    if select_only:
        kw = first_keyword(statements[0])
        if kw not in ALLOWED_FIRST_KEYWORDS:
            return f"only SELECT queries are allowed (statement starts with {kw or statements[0][:20]!r})"
    return ""


class _ClosingConnection:
    """The sandbox connection plus its printf helper; ``close()`` closes both."""

    def __init__(self, conn: sqlite3.Connection, helper: sqlite3.Connection):
        self._conn, self._helper = conn, helper

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def close(self) -> None:
        self._conn.close()
        self._helper.close()


def open_read_only(db_path: str | os.PathLike, max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES) -> "_ClosingConnection":
    """Open ``db_path`` read-only with the authorizer installed; raise FileNotFoundError if it is missing."""
    path = Path(db_path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"database not found: {path}")
    uri = f"file:{quote(str(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    try:
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.text_factory = _decode_text
        printf, helper = _guarded_printf(max_value_bytes)
        conn.create_function("printf", -1, printf, deterministic=True)
        conn.create_function("format", -1, printf, deterministic=True)
        conn.set_authorizer(_authorize)
    except BaseException:
        conn.close()
        raise
    return _ClosingConnection(conn, helper)


def execute_sql(
    db_path: str | os.PathLike,
    sql: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    select_only: bool = True,
) -> SqlResult:
    """Execute one query in the sandbox and never raise for anything the query does.

    Args:
        db_path: SQLite file (opened read-only).
        sql: one statement; a trailing ``;`` is fine, a second statement is an error.
        timeout_s: wall-time limit for executing and fetching (checked every PROGRESS_EVERY_N_OPS VM steps).
        max_rows: rows kept; ``truncated`` says more existed.
        max_value_bytes: largest string/blob the query may build.
        select_only: reject statements not starting with SELECT/WITH/VALUES before SQLite sees them
            (the authorizer still applies when False; tests switch it off to exercise the authorizer).

    Returns:
        SqlResult with rows as tuples of Python values (int, float, str, bytes, None).
    """
    if timeout_s <= 0 or max_rows < 0:
        raise ValueError(f"timeout_s must be > 0 and max_rows >= 0, got {timeout_s}, {max_rows}")
    start = time.perf_counter()
    if not isinstance(sql, str):
        return SqlResult(error=f"query must be a string, got {type(sql).__name__}")
    rejection = check_statement(sql, select_only=select_only)
    if rejection:
        return SqlResult(error=rejection, elapsed_s=time.perf_counter() - start)
    try:
        conn = open_read_only(db_path, max_value_bytes=max_value_bytes)
    except (FileNotFoundError, sqlite3.Error) as exc:
        return SqlResult(error=f"cannot open database: {exc}", elapsed_s=time.perf_counter() - start)

    deadline = time.monotonic() + timeout_s
    state = {"timed_out": False}

    def _past_deadline() -> int:
        if time.monotonic() > deadline:
            state["timed_out"] = True
            return 1  # non-zero aborts the running statement with "interrupted"
        return 0

    result = SqlResult()
    try:
        conn.set_progress_handler(_past_deadline, PROGRESS_EVERY_N_OPS)
        cursor = conn.execute(sql)
        fetched = cursor.fetchmany(max_rows + 1)
        result.truncated = len(fetched) > max_rows
        result.rows = [tuple(r) for r in fetched[:max_rows]]
        result.columns = [d[0] for d in (cursor.description or [])]
        cursor.close()
    except (sqlite3.Error, OverflowError, MemoryError, ValueError) as exc:
        result.rows, result.truncated = [], False
        if state["timed_out"]:
            result.timed_out = True
            result.error = f"interrupted: query exceeded the time limit of {timeout_s:g} s"
        else:
            result.error = str(exc) or type(exc).__name__
    finally:
        conn.close()
    result.elapsed_s = time.perf_counter() - start
    return result


def read_schema_ddl(db_path: str | os.PathLike) -> list[str]:
    """The ``CREATE TABLE`` statements of the user tables, in creation order (read through the sandbox)."""
    res = execute_sql(
        db_path,
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND sql IS NOT NULL "
        "ORDER BY rowid",
        timeout_s=10.0,
    )
    if not res.ok:
        raise ValueError(f"cannot read the schema of {db_path}: {res.error}")
    return [row[0].strip() for row in res.rows]
