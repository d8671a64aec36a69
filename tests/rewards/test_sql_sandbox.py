"""Sandbox: runaway queries stop, writes/escapes are denied, the database file never changes."""

import hashlib
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from wall_clock import LOADED_MACHINE_SLACK_S

from mrtpo_openrlhf.tasks.sql.reward import BUNDLED_DB_ROOT
from mrtpo_openrlhf.tasks.sql.verifier import check_statement, execute_sql, read_schema_ddl
from mrtpo_openrlhf.tasks.sql.verifier.lexer import has_top_level_order_by, remove_distinct, split_statements

BOOKSTORE = BUNDLED_DB_ROOT / "bookstore" / "bookstore.sqlite"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def db_copy(tmp_path):
    target = tmp_path / "bookstore" / "bookstore.sqlite"
    target.parent.mkdir()
    shutil.copyfile(BOOKSTORE, target)
    return target


def test_plain_select_returns_rows_columns_and_unicode():
    res = execute_sql(BOOKSTORE, "SELECT name, country FROM authors WHERE author_id IN (1, 2, 5) ORDER BY author_id;")
    assert res.ok and not res.timed_out and not res.truncated
    assert res.columns == ["name", "country"]
    assert res.rows == [
        ("Gabriel García Márquez", "Colombia"),
        ("Haruki Murakami (村上春樹)", "Japan"),
        ("Anonymous", None),
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        # 9 rows ** 9 = 387 million combinations: a count over a cross join that cannot finish in time
        "SELECT count(*) FROM books a, books b, books c, books d, books e, books f, books g, books h, books i",
    ],
)
def test_runaway_queries_are_stopped_near_the_limit(sql):
    start = time.perf_counter()
    res = execute_sql(BOOKSTORE, sql, timeout_s=0.5)
    took = time.perf_counter() - start
    assert res.timed_out and not res.ok and "time limit" in res.error
    assert took < 0.5 + LOADED_MACHINE_SLACK_S, took  # wall, like the limit; unstopped, minutes


def test_row_cap_truncates_and_flags():
    res = execute_sql(BOOKSTORE, "SELECT * FROM books a, books b, books c, books d, books e", max_rows=50)
    assert res.ok and res.truncated and len(res.rows) == 50


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH DATABASE 'evil.sqlite' AS evil",
        "DROP TABLE books",
        "INSERT INTO books VALUES (99, 'x', 1, 2000, 1.0, NULL)",
        "UPDATE books SET price = 0",
        "DELETE FROM sales",
        "CREATE TABLE t (a)",
        "ALTER TABLE books ADD COLUMN c",
        "PRAGMA writable_schema=1",
        "PRAGMA journal_mode=DELETE",
        "SELECT load_extension('/tmp/nothing.so')",
        "VACUUM INTO 'copy.sqlite'",
        "WITH x AS (SELECT 1) INSERT INTO sales SELECT * FROM sales",
        "BEGIN",
    ],
)
@pytest.mark.parametrize("select_only", [True, False])  # False: only the authorizer and mode=ro stand in the way
def test_writes_and_escapes_are_denied_and_file_is_unchanged(db_copy, sql, select_only, monkeypatch):
    monkeypatch.chdir(db_copy.parent)
    before = _digest(db_copy)
    res = execute_sql(db_copy, sql, select_only=select_only)
    assert not res.ok, res
    assert _digest(db_copy) == before
    assert sorted(p.name for p in db_copy.parent.iterdir()) == ["bookstore.sqlite"]


def test_read_only_pragma_allowed_only_when_not_select_only():
    assert not execute_sql(BOOKSTORE, "PRAGMA table_info(books)").ok
    res = execute_sql(BOOKSTORE, "PRAGMA table_info(books)", select_only=False)
    assert res.ok and [r[1] for r in res.rows][:2] == ["book_id", "title"]


def test_huge_printf_is_refused_quickly_and_normal_printf_works():
    start = time.process_time()  # refused by SQLite's length limit in this process: CPU time, not wall
    res = execute_sql(BOOKSTORE, "SELECT printf('%.*c', 2000000000, 'x')")
    assert not res.ok and time.process_time() - start < 0.5
    assert execute_sql(BOOKSTORE, "SELECT printf('%.2f|%5s', 3.14159, 'ab')").rows == [("3.14|   ab",)]


def test_multiple_statements_rejected_even_if_harmless():
    res = execute_sql(BOOKSTORE, "SELECT 1; SELECT 2")
    assert not res.ok and "one SQL statement" in res.error
    assert execute_sql(BOOKSTORE, "SELECT 1; -- trailing comment").ok
    assert execute_sql(BOOKSTORE, "SELECT ';' AS semi").rows == [(";",)]


def test_missing_database_and_bad_input_do_not_raise(tmp_path):
    assert "cannot open database" in execute_sql(tmp_path / "none.sqlite", "SELECT 1").error
    assert not tmp_path.joinpath("none.sqlite").exists()  # read-only open never creates the file
    assert execute_sql(BOOKSTORE, "").error == "empty query"
    assert not execute_sql(BOOKSTORE, None).ok
    assert "no such column" in execute_sql(BOOKSTORE, "SELECT nme FROM authors").error


def test_statement_checks_and_lexer():
    assert check_statement("select 1") == ""
    assert "only SELECT" in check_statement("pragma table_info(x)")
    assert split_statements("SELECT 'a;b' ; /* ; */ SELECT \"c;\"") == ["SELECT 'a;b'", '/* ; */ SELECT "c;"']
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert not has_top_level_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3)")
    assert not has_top_level_order_by("SELECT rank() OVER (ORDER BY a) FROM t")
    assert not has_top_level_order_by("SELECT 'order by' FROM t -- order by\n")
    assert remove_distinct("SELECT DISTINCT a, 'distinct' FROM t") == "SELECT  a, 'distinct' FROM t"


def test_read_schema_ddl_lists_user_tables():
    ddl = read_schema_ddl(BOOKSTORE)
    assert [d.split("(")[0].split()[-1] for d in ddl] == ["authors", "books", "sales"]


def test_sqlite_module_unchanged_file_after_many_reads():
    before = _digest(BOOKSTORE)
    for _ in range(5):
        execute_sql(BOOKSTORE, "SELECT * FROM sales")
    assert _digest(BOOKSTORE) == before
    with sqlite3.connect(f"file:{BOOKSTORE}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM sales").fetchone() == (12,)
