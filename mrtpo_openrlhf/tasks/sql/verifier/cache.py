"""A bounded, thread-safe LRU cache of gold-query results.

Keyed by (resolved db path, the file's size and mtime, the exact SQL run, the limits used), so an edited database
file or a different sandbox limit never returns a stale result. Two threads missing on the same key at once both
compute it (results are deterministic, so the second write is harmless); the lock is never held while SQLite runs.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Hashable

from .sandbox import SqlResult, execute_sql


class GoldResultCache:
    def __init__(self, maxsize: int = 4096, execute: Callable[..., SqlResult] = execute_sql):
        """``execute``: how a miss runs the query (``execute_sql``, or ``pool.run_query`` for per-query limits)."""
        self._execute = execute
        if maxsize <= 0:
            raise ValueError(f"maxsize must be positive, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, SqlResult] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], SqlResult]) -> tuple[SqlResult, bool]:
        """Return (result, was_cached)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key], True
            self.misses += 1
        value = compute()
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value, False

    def execute(self, db_path: str | os.PathLike, sql: str, **limits) -> tuple[SqlResult, bool]:
        """``execute(db_path, sql, **limits)`` through the cache; returns (result, was_cached)."""
        path = Path(db_path).resolve()
        try:
            st = path.stat()
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None  # missing file: execute_sql reports it; do not cache the failure for long
        key = (str(path), stamp, sql, tuple(sorted(limits.items())))
        if stamp is None:
            return self._execute(path, sql, **limits), False
        return self.get_or_compute(key, lambda: self._execute(path, sql, **limits))
