"""The SQL worker pool (``tasks/sql/verifier/pool.py``): same results as the in-process sandbox, limits per query."""

import os
import signal
import threading

import pytest

from mrtpo_openrlhf.tasks.sql.reward import BUNDLED_DB_ROOT, score_sql
from mrtpo_openrlhf.tasks.sql.verifier import execute_sql, pool
from mrtpo_openrlhf.tasks.sql.verifier.pool import SqlWorkerPool, configured_workers, run_query

BOOKSTORE = BUNDLED_DB_ROOT / "bookstore" / "bookstore.sqlite"
# ~40 MiB of sorter memory: valid alone, but 8 at once in one process pass the 256 MiB bound together.
HEAVY = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000) "
    "SELECT count(*), length(max(h)) FROM (SELECT x, hex(zeroblob(2000)) || x AS h FROM c ORDER BY h)"
)


@pytest.fixture
def small_pool():
    p = SqlWorkerPool(2)
    yield p
    p.close()


def test_worker_gives_the_in_process_result(small_pool):
    for sql in (
        "SELECT title, year FROM books ORDER BY book_id",
        "SELECT no_such_column FROM books",
        "DELETE FROM books",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    ):
        here = execute_sql(BOOKSTORE, sql, timeout_s=0.3)
        there = small_pool.execute(BOOKSTORE, sql, timeout_s=0.3)
        assert (there.rows, there.columns, there.error, there.timed_out) == (
            here.rows,
            here.columns,
            here.error,
            here.timed_out,
        ), sql
    assert here.timed_out  # the runaway query was stopped inside the worker, by the worker's own watchdog
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        small_pool.execute(BOOKSTORE, "SELECT 1", timeout_s=0)  # bad arguments raise in the caller, as in-process


def test_memory_bound_applies_in_the_worker(small_pool):
    res = small_pool.execute(BOOKSTORE, HEAVY, max_memory_bytes=8 << 20, timeout_s=30)
    assert not res.ok and "more than 8 MiB" in res.error
    assert small_pool.execute(BOOKSTORE, HEAVY, timeout_s=30).rows == [(10000, 4004)]


def test_concurrent_heavy_queries_each_get_their_own_memory_bound(monkeypatch):
    """8 valid 40 MiB queries scored at once keep their reward: each worker counts only its own query."""
    monkeypatch.setenv("MRTPO_SQL_TIMEOUT_S", "30")  # only the memory bound is under test here
    pool.set_workers(2)
    try:
        label = {"db_id": "school", "gold": HEAVY, "mode": "bird"}
        response = f"<think>sort</think>\n```sql\n{HEAVY}\n```"
        out = [None] * 8

        def score(i):
            out[i] = score_sql(response, "", label)

        threads = [threading.Thread(target=score, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [v.values for v in out] == [[1.0, 1.0, 1.0]] * 8, [v.items[1].reason for v in out]
    finally:
        pool.set_workers(None)


def test_a_dead_or_stuck_worker_is_replaced(small_pool, monkeypatch):
    assert small_pool.execute(BOOKSTORE, "SELECT 1").rows == [(1,)]
    worker = small_pool._idle.get()
    small_pool._idle.put(worker)
    os.kill(worker.proc.pid, signal.SIGKILL)
    worker.proc.wait()
    assert small_pool.execute(BOOKSTORE, "SELECT 2").rows == [(2,)]  # a fresh worker took the query

    monkeypatch.setattr(pool, "ANSWER_GRACE_S", 0.2)
    stuck = small_pool._idle.get()  # the last worker used (the queue is last in, first out): started
    small_pool._idle.put(stuck)
    assert stuck is not None and stuck is not worker
    os.kill(stuck.proc.pid, signal.SIGSTOP)  # alive, never answers
    try:
        res = small_pool.execute(BOOKSTORE, "SELECT 3", timeout_s=0.2)
    finally:
        if stuck.proc.poll() is None:
            os.kill(stuck.proc.pid, signal.SIGCONT)
    assert res.timed_out and "time limit of 0.2 s" in res.error
    assert stuck.proc.poll() is not None  # killed, not left behind
    assert small_pool.execute(BOOKSTORE, "SELECT 4").rows == [(4,)]


def test_workers_variable(monkeypatch):
    monkeypatch.setenv("MRTPO_SQL_WORKERS", "3")
    assert configured_workers() == 3
    monkeypatch.setenv("MRTPO_SQL_WORKERS", "many")
    with pytest.raises(ValueError, match="MRTPO_SQL_WORKERS"):
        configured_workers()
    monkeypatch.setenv("MRTPO_SQL_WORKERS", "0")
    pool.set_workers(None)
    assert (
        run_query(BOOKSTORE, "SELECT count(*) FROM books").rows
        == execute_sql(BOOKSTORE, "SELECT count(*) FROM books").rows
    )
    assert pool._pool is None  # 0: in this thread, no worker started
