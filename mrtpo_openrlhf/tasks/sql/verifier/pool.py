"""Per-query limits under load: the reward's SQL queries run in a small pool of worker processes.

In training, the reward runs inside each vLLM engine process, up to 32 calls at once beside the engine's output
loop. In that process a query's deadline (progress handler + watchdog thread, both needing the GIL) counts the
time spent waiting for the GIL and for the other queries' CPU, and the memory bound reads the process-wide
``sqlite3_memory_used``, so concurrent queries count against each other: valid queries lost their reward
(``benchmarks/sql_under_load.py``; docs/rewards-sql.md). A worker process runs one query at a time through
``sandbox.execute_sql``, so its clock and its memory counter are that query's; a query starts its clock only when
a worker takes it.

``MRTPO_SQL_WORKERS`` sets the pool size per process (default ``min(4, cores)``; ``0`` runs queries in the calling
thread, as before). Workers start on first use (``python -m mrtpo_openrlhf.tasks.sql.verifier.worker``, no torch import,
~0.1 s), exit when their parent's pipe closes, and are replaced when one dies or stops answering (the parent waits
``timeout_s + ANSWER_GRACE_S`` at most, then kills it and reports the query as timed out).
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import select
import subprocess
import sys
import threading
import time

from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.tasks.sql import WORKERS_ENV

from .sandbox import DEFAULT_TIMEOUT_S, SqlResult, execute_sql

ANSWER_GRACE_S = 5.0  # past the query's own limit (enforced in the worker): pickling, start-up, a loaded machine
_HEADER = 8  # bytes of the big-endian length before each pickled message
_PACKAGE_ROOT = str(REPO_ROOT)


def configured_workers() -> int:
    """Pool size from ``MRTPO_SQL_WORKERS`` (default ``min(4, cores)``); ValueError names the variable."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if not raw:
        return min(4, os.cpu_count() or 1)
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"{WORKERS_ENV} must be a whole number >= 0 (0: queries run in-process), got {raw!r}")
    return n


def send_message(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(_HEADER, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    """n bytes from fd, or None at EOF or past ``deadline`` (time.monotonic)."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def receive_message(fd: int, deadline: float | None):
    header = _read_exact(fd, _HEADER, deadline)
    if header is None:
        return None
    body = _read_exact(fd, int.from_bytes(header, "big"), deadline)
    return None if body is None else pickle.loads(body)


class _Worker:
    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mrtpo_openrlhf.tasks.sql.verifier.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )

    def ask(self, request, wait_s: float):
        """The worker's ("ok", result) or ("raise", exception), or None when it died or did not answer in time."""
        try:
            send_message(self.proc.stdin.fileno(), request)
        except OSError:
            return None
        return receive_message(self.proc.stdout.fileno(), time.monotonic() + wait_s)

    def close(self, kill: bool = False) -> None:
        if kill:
            self.proc.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SqlWorkerPool:
    """``size`` worker processes; ``execute`` blocks (GIL released) until one is free."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a pool needs at least one worker, got {size}")
        self.size = size
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)  # started on first use
        self._all: list[_Worker] = []
        self._lock = threading.Lock()

    def execute(self, db_path, sql: str, **limits) -> SqlResult:
        """``execute_sql(db_path, sql, **limits)`` in a worker: same result, same exceptions."""
        worker = self._idle.get()
        try:
            if worker is not None and worker.proc.poll() is not None:
                self._retire(worker)
                worker = None
            if worker is None:
                worker = _Worker()
                with self._lock:
                    self._all.append(worker)
            timeout_s = float(limits.get("timeout_s", DEFAULT_TIMEOUT_S))
            start = time.perf_counter()
            reply = worker.ask((str(db_path), sql, limits), timeout_s + ANSWER_GRACE_S)
            if reply is None:  # died (a crash inside SQLite) or stuck past its own deadline: replace it
                code = worker.proc.poll()
                self._retire(worker, kill=True)
                worker = None
                if code is None:
                    return SqlResult(
                        error=f"interrupted: query exceeded the time limit of {timeout_s:g} s",
                        timed_out=True,
                        elapsed_s=time.perf_counter() - start,
                    )
                return SqlResult(error=f"the SQL worker process died (exit status {code})")
            kind, value = reply
            if kind == "raise":
                raise value
            return value
        finally:
            self._idle.put(worker)

    def _retire(self, worker: _Worker, kill: bool = False) -> None:
        with self._lock:
            if worker in self._all:
                self._all.remove(worker)
        worker.close(kill=kill)

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.close()


_pool: tuple[int, int, SqlWorkerPool] | None = None  # (pid, size, pool): a forked child builds its own
_pool_lock = threading.Lock()
_size_override: int | None = None


def set_workers(n: int | None) -> None:
    """Use ``n`` workers from now on in this process (None: ``MRTPO_SQL_WORKERS`` again); closes the old pool."""
    global _size_override, _pool
    if n is not None and n < 0:
        raise ValueError(f"workers must be >= 0, got {n}")
    with _pool_lock:
        _size_override = n
        old, _pool = _pool, None
    if old is not None and old[0] == os.getpid():
        old[2].close()


def workers() -> int:
    return configured_workers() if _size_override is None else _size_override


def run_query(db_path, sql: str, **limits) -> SqlResult:
    """``execute_sql`` with per-query limits: in a worker process, or in this thread with ``MRTPO_SQL_WORKERS=0``."""
    global _pool
    size = workers()
    if size == 0:
        return execute_sql(db_path, sql, **limits)
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid() or _pool[1] != size:
            _pool = (os.getpid(), size, SqlWorkerPool(size))
        pool = _pool[2]
    return pool.execute(db_path, sql, **limits)


@atexit.register
def _close_pool() -> None:
    if _pool is not None and _pool[0] == os.getpid():
        _pool[2].close()
