"""Run one untrusted SQL query against a SQLite database without letting it change or escape anything.

Layers of defence (each alone should be enough for its threat):
- the database is opened read-only through a ``file:...?mode=ro`` URI;
- the statement must be a single ``SELECT``/``WITH``/``VALUES`` query (checked by the lexer);
- an authorizer allows only reads, function calls (minus ``load_extension`` and friends), recursive CTEs and a
  short list of schema-reporting pragmas; ATTACH/DETACH, every write, DDL and transaction are denied;
- extension loading is disabled on the connection;
- time and memory: a watchdog thread interrupts the query at its deadline (SQLite checks the interrupt at every
  loop jump) or when SQLite's memory grows past ``max_memory_bytes`` (temporary tables and sorts are kept in
  memory so they count); the progress handler checks the deadline too. A row has at most ``MAX_COLUMNS``
  columns (a database whose tables are wider cannot be queried here) and a query at most ``MAX_SQL_CHARS``
  characters. What one VM step can do is bounded so the interrupt comes soon enough: values are at most
  ``max_value_bytes`` (1 MB), LIKE/GLOB patterns at most ``MAX_LIKE_PATTERN_BYTES``, ``printf``/``format``
  widths are refused past the value limit, and ``instr``, ``replace`` and two-argument ``trim``/``ltrim``/``rtrim``
  (quadratic in their arguments) are refused past ``MAX_STRING_WORK`` character comparisons. The deadline starts
  before the Python pre-check, and a query that finished past its deadline counts as timed out;
- rows are read one at a time with a byte budget (``max_result_bytes``) besides the row cap.

A query stopped by the time limit or a work guard has ``timed_out`` set (never "ran"); one stopped by a memory
bound has an error saying so. Either way the executable reward is lost with that reason.

Every call opens its own connection, so ``execute_sql`` is safe to call from many threads at once.
"""

from __future__ import annotations

import ctypes
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from .lexer import first_keyword, split_statements

DEFAULT_TIMEOUT_S = 1.0
DEFAULT_MAX_ROWS = 10_000
DEFAULT_MAX_VALUE_BYTES = 1_000_000  # largest string/blob one expression may build or read (SQLITE_LIMIT_LENGTH)
DEFAULT_MAX_MEMORY_BYTES = 256 << 20  # growth of SQLite's heap during the query before it is stopped
DEFAULT_MAX_RESULT_BYTES = 64 << 20  # bytes of str/bytes values read back before the query is stopped
MAX_COLUMNS = 200  # result (and table) columns: one row holds at most 200 x 1 MB (SQLITE_LIMIT_COLUMN)
MAX_SQL_CHARS = 65_536  # longer queries are refused before the (pure Python) statement check
MAX_LIKE_PATTERN_BYTES = 100  # one LIKE/GLOB costs up to value length x pattern length: 1 MB x 100 ~ 0.3 s
MAX_STRING_WORK = 500_000_000  # instr/replace/trim: refused past this many character comparisons (~20 ms)
PROGRESS_EVERY_N_OPS = 1_000  # SQLite VM instructions between two wall-clock checks
WATCHDOG_POLL_S = 0.005

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


def _guarded_printf(max_value_bytes: int, refused: list[str]):
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
                refused.append("printf")
                raise WorkLimitExceeded("printf width or precision too large")
        placeholders = ",".join("?" * len(args))
        return helper.execute(f"SELECT printf({placeholders})", args).fetchone()[0]

    return printf, helper


class WorkLimitExceeded(ValueError):
    """A guarded string function refused arguments that would take one VM step too long."""


def _length(value) -> int:
    return len(value) if isinstance(value, (str, bytes)) else len(str(value)) if value is not None else 0


def _quadratic_cost(args) -> int:
    """Worst-case character comparisons of instr/replace/trim on ``args``: haystack x needle (or trim set)."""
    if len(args) < 2:
        return 0
    return _length(args[0]) * _length(args[1])


def _guarded_builtin(helper: sqlite3.Connection, name: str, nargs: int, refused: list[str]):
    """``name`` with ``nargs`` arguments, refused when ``_quadratic_cost`` exceeds ``MAX_STRING_WORK`` and
    otherwise run by SQLite's own builtin on the helper connection (results identical to SQLite's).
    A refusal is appended to ``refused`` (SQLite reports only "user-defined function raised exception")."""
    sql = f"SELECT {name}({','.join('?' * nargs)})"

    def guarded(*args):
        if _quadratic_cost(args) > MAX_STRING_WORK:
            refused.append(name)
            raise WorkLimitExceeded(f"{name}() arguments too large")
        return helper.execute(sql, args).fetchone()[0]

    return guarded


#: builtin -> argument counts whose cost is quadratic in the arguments (one-argument trims are linear).
GUARDED_BUILTINS = {"instr": (2,), "replace": (3,), "trim": (2,), "ltrim": (2,), "rtrim": (2,)}


def _sqlite_memory_used():
    """``sqlite3_memory_used`` of the library Python's sqlite3 uses (process-wide), or None when unavailable."""
    try:
        import _sqlite3

        fn = ctypes.CDLL(_sqlite3.__file__).sqlite3_memory_used
    except (ImportError, OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int64
    fn.argtypes = []
    return fn


_MEMORY_USED = _sqlite_memory_used()


class _Watchdog(threading.Thread):
    """Interrupts ``conn`` at ``deadline`` (time.monotonic) or when SQLite's heap grew by ``max_memory_bytes``."""

    def __init__(self, conn: sqlite3.Connection, deadline: float, max_memory_bytes: int):
        super().__init__(name="sql-watchdog", daemon=True)
        self.conn, self.deadline, self.max_memory_bytes = conn, deadline, max_memory_bytes
        self.base_memory = _MEMORY_USED() if _MEMORY_USED else 0
        self.done = threading.Event()
        self.fired = ""  # "time" or "memory" once it interrupted the query

    def run(self) -> None:
        while not self.done.wait(WATCHDOG_POLL_S):
            if time.monotonic() > self.deadline:
                self.fired = "time"
            elif _MEMORY_USED and _MEMORY_USED() - self.base_memory > self.max_memory_bytes:
                self.fired = "memory"
            if self.fired:
                self.conn.interrupt()
                return

    def stop(self) -> None:
        self.done.set()
        self.join()


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
    """The sandbox connection plus its helper for guarded builtins; ``close()`` closes both. ``refused`` lists
    the guarded functions that refused their arguments."""

    def __init__(self, conn: sqlite3.Connection, helper: sqlite3.Connection, refused: list[str]):
        self._conn, self._helper, self.refused = conn, helper, refused

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
        conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
        conn.execute("PRAGMA temp_store = MEMORY")  # sorts and temp tables count against the memory bound
        conn.text_factory = _decode_text
        refused: list[str] = []
        printf, helper = _guarded_printf(max_value_bytes, refused)
        conn.create_function("printf", -1, printf, deterministic=True)
        conn.create_function("format", -1, printf, deterministic=True)
        for name, arities in GUARDED_BUILTINS.items():
            for nargs in arities:
                conn.create_function(name, nargs, _guarded_builtin(helper, name, nargs, refused), deterministic=True)
        conn.set_authorizer(_authorize)
    except BaseException:
        conn.close()
        raise
    return _ClosingConnection(conn, helper, refused)


def execute_sql(
    db_path: str | os.PathLike,
    sql: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    select_only: bool = True,
) -> SqlResult:
    """Execute one query in the sandbox and never raise for anything the query does.

    Args:
        db_path: SQLite file (opened read-only).
        sql: one statement; a trailing ``;`` is fine, a second statement is an error.
        timeout_s: wall-time limit for everything: the pre-check, executing and fetching.
        max_rows: rows kept; ``truncated`` says more existed.
        max_value_bytes: largest string/blob the query may build or read.
        max_memory_bytes: growth of SQLite's heap (process-wide counter) past which the query is stopped.
        max_result_bytes: str/bytes bytes read back past which the query is stopped.
        select_only: reject statements not starting with SELECT/WITH/VALUES before SQLite sees them
            (the authorizer still applies when False; tests switch it off to exercise the authorizer).

    Returns:
        SqlResult with rows as tuples of Python values (int, float, str, bytes, None).
    """
    if timeout_s <= 0 or max_rows < 0:
        raise ValueError(f"timeout_s must be > 0 and max_rows >= 0, got {timeout_s}, {max_rows}")
    start = time.perf_counter()
    deadline = time.monotonic() + timeout_s  # the pre-check below counts against the limit too
    if not isinstance(sql, str):
        return SqlResult(error=f"query must be a string, got {type(sql).__name__}")
    if len(sql) > MAX_SQL_CHARS:
        return SqlResult(error=f"query of {len(sql)} characters is longer than the limit of {MAX_SQL_CHARS}")
    rejection = check_statement(sql, select_only=select_only)
    if rejection:
        return SqlResult(error=rejection, elapsed_s=time.perf_counter() - start)
    if time.monotonic() > deadline:
        return _timed_out(SqlResult(), timeout_s, start)
    try:
        conn = open_read_only(db_path, max_value_bytes=max_value_bytes)
    except (FileNotFoundError, sqlite3.Error) as exc:
        return SqlResult(error=f"cannot open database: {exc}", elapsed_s=time.perf_counter() - start)

    state = {"timed_out": False}

    def _past_deadline() -> int:
        if time.monotonic() > deadline:
            state["timed_out"] = True
            return 1  # non-zero aborts the running statement with "interrupted"
        return 0

    result = SqlResult()
    watchdog = _Watchdog(conn._conn, deadline, max_memory_bytes)
    try:
        conn.set_progress_handler(_past_deadline, PROGRESS_EVERY_N_OPS)
        watchdog.start()
        cursor = conn.execute(sql)
        read_bytes = 0
        for row in cursor:
            read_bytes += sum(len(v) for v in row if isinstance(v, (str, bytes)))
            if read_bytes > max_result_bytes:
                raise MemoryError(f"result larger than {max_result_bytes} bytes")
            if len(result.rows) == max_rows:
                result.truncated = True
                break
            result.rows.append(tuple(row))
        result.columns = [d[0] for d in (cursor.description or [])]
        cursor.close()
    except (sqlite3.Error, OverflowError, MemoryError, ValueError) as exc:
        result.rows, result.truncated = [], False
        if conn.refused:  # a guard saw one step that could not finish in time: a timeout, decided early
            result.timed_out = True
            result.error = (
                f"interrupted: {conn.refused[0]}() arguments too large to finish within the time limit "
                f"of {timeout_s:g} s"
            )
        elif state["timed_out"] or watchdog.fired == "time":
            result.timed_out = True
            result.error = f"interrupted: query exceeded the time limit of {timeout_s:g} s"
        elif watchdog.fired == "memory":
            result.error = f"interrupted: query used more than {max_memory_bytes >> 20} MiB"
        elif isinstance(exc, MemoryError):
            result.error = f"interrupted: {exc}"
        else:
            result.error = str(exc) or type(exc).__name__
    finally:
        watchdog.stop()
        conn.close()
    if not result.timed_out and time.monotonic() > deadline:  # finished, but past the limit: not a "ran"
        return _timed_out(result, timeout_s, start)
    result.elapsed_s = time.perf_counter() - start
    return result


def _timed_out(result: SqlResult, timeout_s: float, start: float) -> SqlResult:
    result.rows, result.columns, result.truncated = [], [], False
    result.timed_out = True
    result.error = f"interrupted: query exceeded the time limit of {timeout_s:g} s"
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
