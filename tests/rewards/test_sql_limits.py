"""The sandbox's time and memory bounds hold for everything a query does (issue 15, items 1, 5, 6).

Every query here is short; what it builds is large. Each must stop near the limit and count as stopped
(timed out, or a memory error), never as a query that ran.
"""

import time

import pytest
from wall_clock import LOADED_MACHINE_SLACK_S

from mrtpo_openrlhf.tasks.sql.reward import BUNDLED_DB_ROOT, score_sql
from mrtpo_openrlhf.tasks.sql.verifier import execute_sql
from mrtpo_openrlhf.tasks.sql.verifier.sandbox import MAX_LIKE_PATTERN_BYTES

BOOKSTORE = BUNDLED_DB_ROOT / "bookstore" / "bookstore.sqlite"
BIG = "hex(zeroblob(499000))"  # 998,000 characters: just under the 1 MB value limit

# One VM step each that ran for minutes before (LIKE/GLOB with long patterns, instr, replace, trim over big values).
QUADRATIC_STEPS = {
    "like_long_pattern": f"SELECT {BIG} LIKE '%' || hex(zeroblob(20000)) || '1'",
    "glob_long_pattern": f"SELECT {BIG} GLOB '*' || hex(zeroblob(20000)) || '1'",
    "instr": f"SELECT instr({BIG}, hex(zeroblob(200000)) || '1')",
    "replace": f"SELECT length(replace({BIG}, hex(zeroblob(100000)) || '1', 'x'))",
    "trim": f"SELECT length(trim({BIG}, hex(zeroblob(100000)) || 'x'))",
    "ltrim": f"SELECT length(ltrim({BIG}, hex(zeroblob(100000)) || 'x'))",
    "rtrim": f"SELECT length(rtrim({BIG}, hex(zeroblob(100000)) || 'x'))",
}


@pytest.mark.parametrize("name", sorted(QUADRATIC_STEPS))
def test_quadratic_string_steps_stop_and_count_as_not_run(name):
    start = time.perf_counter()
    res = execute_sql(BOOKSTORE, QUADRATIC_STEPS[name], timeout_s=1.0)
    took = time.perf_counter() - start
    assert not res.ok and took < 1.0 + LOADED_MACHINE_SLACK_S, (res, took)  # wall, like the limit
    assert res.timed_out or "too complex" in res.error  # LIKE/GLOB patterns past the limit are refused by SQLite


def test_guarded_functions_give_sqlite_results_on_normal_inputs():
    res = execute_sql(
        BOOKSTORE,
        "SELECT instr('abc', 'c'), instr(x'0102', x'02'), replace('aXbX', 'X', '-'), "
        "trim('xxaxx', 'x'), ltrim('xxa', 'x'), rtrim('axx', 'x'), trim('  a  '), "
        "'abc' LIKE 'A_C', 'abc' GLOB 'a*', replace(NULL, 'a', 'b'), instr(12345, 34)",
    )
    assert res.ok and res.rows == [(3, 2, "a-b-", "a", "a", "a", "a", 1, 1, None, 3)]
    assert execute_sql(BOOKSTORE, "SELECT 'x' LIKE '" + "%" * MAX_LIKE_PATTERN_BYTES + "'").rows == [(1,)]


def test_like_over_many_rows_is_stopped_at_the_deadline():
    # each LIKE takes a fraction of a second: the interrupt lands between two of them
    sql = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100) "
        "SELECT count(*) FROM c WHERE hex(zeroblob(499000 - x % 2)) LIKE '%' || hex(zeroblob(45)) || '1'"
    )
    start = time.perf_counter()
    res = execute_sql(BOOKSTORE, sql, timeout_s=0.5)
    assert res.timed_out and "time limit" in res.error and time.perf_counter() - start < 0.5 + LOADED_MACHINE_SLACK_S


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + ", ".join(f"zeroblob(999999) AS c{i}" for i in range(600)),  # one 600 MB row: too many columns
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) SELECT x, zeroblob(999999) FROM c",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) "
        "SELECT hex(zeroblob(400000)) || x AS v FROM c ORDER BY v",  # a sort of 1.6 GB
    ],
)
def test_memory_per_query_is_bounded(sql):
    start = time.process_time()  # stopped by the memory bound, well before the 5 s limit: CPU time, not wall
    res = execute_sql(BOOKSTORE, sql, timeout_s=5.0)
    assert not res.ok and ("interrupted" in res.error or "too many columns" in res.error) and res.rows == []
    assert not res.timed_out and time.process_time() - start < 3.0


def test_values_past_the_length_limit_are_errors():
    res = execute_sql(BOOKSTORE, "SELECT zeroblob(10000000)")
    assert not res.ok and "too big" in res.error


def test_python_precheck_counts_against_the_time_limit_and_is_bounded():
    in_list = "SELECT title FROM books WHERE book_id IN (" + ",".join(["1234567"] * 8_000) + ")"
    res = execute_sql(BOOKSTORE, in_list, timeout_s=0.001)
    assert res.timed_out and not res.ok
    start = time.process_time()  # refused in this process, before any query runs
    res = execute_sql(BOOKSTORE, "SELECT '" + "a" * 5_000_000 + "'")  # 5 MB literal
    assert not res.ok and "longer than the limit" in res.error and time.process_time() - start < 0.5


def test_query_finishing_past_the_deadline_counts_as_timed_out(monkeypatch):
    import mrtpo_openrlhf.tasks.sql.verifier.sandbox as sandbox

    real = sandbox.open_read_only

    def slow_open(*args, **kwargs):  # stands in for any work the interrupt cannot reach
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(sandbox, "open_read_only", slow_open)
    res = execute_sql(BOOKSTORE, "SELECT 1", timeout_s=0.2)
    assert res.timed_out and not res.ok and res.rows == []


def test_stopped_query_costs_the_executable_reward_with_the_reason():
    sql = QUADRATIC_STEPS["instr"]
    vec = score_sql(f"<think>t</think>\n```sql\n{sql}\n```", "", {"db_id": "school", "gold": "SELECT 1"})
    assert vec.values == [1.0, 0.0, 0.0]
    assert "time limit" in vec.items[1].reason and vec.logs["sql_timed_out"] == 1.0


def test_spider_comparison_timeout_costs_the_execution_reward(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from adversarial_corpus import sql_compare_cases

    for case in sql_compare_cases(tmp_path):
        start, cpu = time.perf_counter(), time.process_time()
        vec = score_sql(case.query, case.prompt, case.label)
        # CPU time is the bound's measure (a loaded machine stretches wall time, not work); wall: no hang
        assert time.process_time() - cpu < 2.0 and time.perf_counter() - start < 20.0, case.name
        assert vec.values[:2] == [1.0, 1.0]
        assert vec.values[2] == (1.0 if case.name == "shared_values_match" else 0.0)
        if case.name == "shared_values_bag":
            assert "did not finish" in vec.items[2].reason


class SlowToReadRows(list):
    """Rows whose first read waits (asleep, no CPU), as a thread descheduled on a busy machine does."""

    def __init__(self, rows, wait_s):
        super().__init__(rows)
        self.wait_s = wait_s

    def __iter__(self):
        time.sleep(self.wait_s)
        self.wait_s = 0.0
        return super().__iter__()


def test_the_comparison_bound_counts_work_not_waiting():
    """0.5 s of a wait inside a 0.1 s comparison bound: the match stands (a wall-clock bound lost it on a loaded
    machine: the adversarial corpus's shared_values_match scored 0 beside a training run); and real work past the
    bound still stops the search."""
    from mrtpo_openrlhf.tasks.sql.verifier import ComparisonTimeout, compare_results

    gold = [(i, i % 7, i % 5) for i in range(50)]
    pred = SlowToReadRows([(b, a, c) for a, b, c in gold], wait_s=0.5)  # the same rows, columns permuted
    assert compare_results("spider", pred, gold, timeout_s=0.1)
    # every cheap check passes and no column order fits (rows 0 and 1 reversed): all 8! orders are tried, real work
    wide = [tuple((r + i) % 300 for i in range(8)) for r in range(300)]
    with pytest.raises(ComparisonTimeout):
        compare_results("spider", [row[::-1] if r < 2 else row for r, row in enumerate(wide)], wide, timeout_s=0.1)
