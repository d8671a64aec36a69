"""Spider and BIRD scoring through ``--predictions``: verdicts checked by hand against the official rules."""

import math
import sqlite3

import pytest

from mrtpo_openrlhf.tasks.sql.verifier import has_top_level_order_by

STUDENTS_NAME_CITY = "SELECT name, city FROM students"
SUBQUERY_ORDER_GOLD = "SELECT name FROM (SELECT name FROM students ORDER BY name)"
# (gold, prediction, official verdict, why a naive comparison gets it wrong)
SPIDER_CASES = [
    (
        "SELECT name FROM students ORDER BY name",
        "SELECT name FROM students ORDER BY name DESC",
        False,
        "gold has ORDER BY: row order counts (a set/bag comparison would accept)",
    ),
    (
        "SELECT name FROM students ORDER BY name",
        "SELECT T.name FROM students AS T ORDER BY T.name ASC",
        True,
        "different text, same ordered result (string match would reject)",
    ),
    (STUDENTS_NAME_CITY, "SELECT city, name FROM students", True, "column permutation is allowed"),
    (
        STUDENTS_NAME_CITY,
        "SELECT name, city FROM students GROUP BY name, city",
        False,
        "bag semantics: the duplicate (Ana, Porto) row is missing (a set comparison would accept)",
    ),
    (
        STUDENTS_NAME_CITY,
        "SELECT DISTINCT name, city FROM students",
        True,
        "DISTINCT is removed before execution (a bag comparison of the raw query would reject)",
    ),
    (
        "SELECT count(DISTINCT name) FROM students",
        "SELECT count(*) FROM students",
        True,
        "DISTINCT is removed from the gold too: 7 == 7",
    ),
    (
        SUBQUERY_ORDER_GOLD,
        "SELECT name FROM students ORDER BY name DESC",
        False,
        "official rule: 'order by' anywhere in the gold makes order count",
    ),
    (
        "SELECT name FROM students WHERE birth_year >= 2000",
        "SELECT name FROM students WHERE birth_year > = 2000",
        True,
        "the official post-processing closes up '> ='",
    ),
    (
        "SELECT name FROM students WHERE city = 'Porto'",
        "SELECT name FROM students WHERE name = 'Ana'",
        False,
        "equal on the main database, different on the test-suite variant",
    ),
    (STUDENTS_NAME_CITY, None, False, "no SQL in the response"),
    (STUDENTS_NAME_CITY, "SELECT nope FROM students", False, "the query fails"),
]
TEST_SUITE_CASE = 8


@pytest.fixture
def spider_dir(tmp_path, kit):
    items = [
        {"db_id": "school_ts" if i == TEST_SUITE_CASE else "school", "question": f"q{i}", "query": gold}
        for i, (gold, *_rest) in enumerate(SPIDER_CASES)
    ]
    root = kit.make_spider_dir(tmp_path / "spider", items, extra_dbs={"school_ts": [("school", "school_ts_v2.sqlite")]})
    with sqlite3.connect(root / "database" / "school_ts" / "school_ts_v2.sqlite") as conn:
        conn.execute(
            "UPDATE students SET city = 'Lisbon' WHERE student_id = (SELECT max(student_id) FROM students "
            "WHERE name = 'Ana')"
        )
    return root


def spider_predictions(tmp_path, kit):
    rows = []
    for i, (_gold, pred, *_rest) in enumerate(SPIDER_CASES):
        response = "I do not know." if pred is None else f"<think>\nplan\n</think>\n```sql\n{pred}\n```"
        rows.append({"id": str(i), "response": response})
    return kit.write_jsonl(tmp_path / "spider_preds.jsonl", rows)


def test_spider_official_rules(spider_dir, tmp_path, run_cli, kit):
    predictions = spider_predictions(tmp_path, kit)
    code, out = run_cli("--benchmark", "spider", "--data-dir", spider_dir, "--predictions", predictions)
    assert code == 0
    records = kit.read_records(out, "spider")
    for i, (_gold, _pred, expected, why) in enumerate(SPIDER_CASES):
        assert records[str(i)]["verdict"] is expected, f"case {i}: {why}: {records[str(i)]['reason']}"
    assert records[str(TEST_SUITE_CASE)]["n_databases"] == 2
    assert "school_ts_v2.sqlite" in records[str(TEST_SUITE_CASE)]["reason"]
    summary = kit.read_summary(out)["benchmarks"]["spider"]
    n_right, n = sum(expected for _, _, expected, _ in SPIDER_CASES), len(SPIDER_CASES)
    p = n_right / n  # a fraction; its binomial standard error over the n examples
    assert summary["ex"] == pytest.approx(p) and summary["correct"] == n_right
    assert summary["ex_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
    assert summary["by_difficulty"] == {}  # Spider dev.json has no difficulty field: no breakdown


def test_spider_order_rule_differs_from_the_reward_rule():
    # The reward looks only at the outermost query; the official eval at the whole gold string.
    assert not has_top_level_order_by(SUBQUERY_ORDER_GOLD)
    assert "order by" in SUBQUERY_ORDER_GOLD.lower()


def test_spider_keep_distinct(spider_dir, tmp_path, run_cli, kit):
    code, out = run_cli(
        "--benchmark",
        "spider",
        "--data-dir",
        spider_dir,
        "--predictions",
        spider_predictions(tmp_path, kit),
        "--keep-distinct",
    )
    assert code == 0
    records = kit.read_records(out, "spider")
    assert records["4"]["verdict"] is False  # 6 distinct rows vs 7
    assert records["5"]["verdict"] is False  # count(DISTINCT name) = 6 vs count(*) = 7
    assert records["2"]["verdict"] is True


BIRD_PREDICTIONS = [  # bundled BIRD mini: (id, sql, verdict, why)
    ("0", "SELECT COUNT(flight_id) FROM flights WHERE departure LIKE '2024-05-01%'", True, "same count"),
    ("1", "SELECT title FROM books WHERE genre IS NULL ORDER BY title DESC", True, "order is ignored"),
    (
        "2",
        "SELECT MAX(T2.score), T1.name FROM students AS T1 INNER JOIN exam_scores AS T2 "
        "ON T1.student_id = T2.student_id WHERE T2.subject = 'art'",
        False,
        "no column permutation in BIRD",
    ),
    (
        "3",
        "SELECT a.city FROM airports AS a, (SELECT 1 UNION ALL SELECT 2) WHERE a.code NOT IN "
        "(SELECT origin FROM flights)",
        True,
        "duplicates vanish in a set (a bag comparison would reject)",
    ),
    ("4", "SELECT COUNT(*) FROM nonexistent", False, "the query fails"),
]


def test_bird_set_semantics_and_difficulty(tmp_path, run_cli, kit):
    preds = kit.write_jsonl(tmp_path / "bird.jsonl", [{"id": i, "sql": sql} for i, sql, _, _ in BIRD_PREDICTIONS])
    code, out = run_cli("--benchmark", "bird", "--predictions", preds)
    assert code == 0
    records = kit.read_records(out, "bird")
    for i, _sql, expected, why in BIRD_PREDICTIONS:
        assert records[i]["verdict"] is expected, f"{i}: {why}: {records[i]['reason']}"
    summary = kit.read_summary(out)["benchmarks"]["bird"]
    assert summary["ex"] == pytest.approx(0.6) and summary["correct"] == 3
    assert summary["ex_stderr"] == pytest.approx(math.sqrt(0.6 * 0.4 / 4))
    assert summary["by_difficulty"] == {
        "challenging": {"accuracy": 0.0, "stderr": None, "correct": 0, "count": 1},  # one example: no error
        "moderate": {"accuracy": 0.5, "stderr": 0.5, "correct": 1, "count": 2},
        "simple": {"accuracy": 1.0, "stderr": 0.0, "correct": 2, "count": 2},
    }


def test_bird_timeout_really_stops_the_query(tmp_path, run_cli, kit):
    runaway = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c WHERE x < 0"
    preds = kit.write_jsonl(tmp_path / "bird.jsonl", [{"id": "0", "sql": runaway}])
    code, out = run_cli("--benchmark", "bird", "--predictions", preds, "--bird-timeout", "0.3", "--limit", "1")
    assert code == 0
    record = kit.read_records(out, "bird")["0"]
    assert record["verdict"] is False and "time limit" in record["reason"]


def test_missing_predictions_count_as_wrong(tmp_path, run_cli, kit):
    preds = kit.write_jsonl(tmp_path / "bird.jsonl", [{"id": "0", "sql": BIRD_PREDICTIONS[0][1]}])
    code, out = run_cli("--benchmark", "bird", "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)["benchmarks"]["bird"]
    assert summary["n_missing"] == 4 and summary["ex"] == pytest.approx(0.2)
    assert summary["ex_stderr"] == pytest.approx(math.sqrt(0.2 * 0.8 / 4))
    assert kit.read_records(out, "bird")["3"]["reason"] == "no prediction"


# (gold, prediction, official verdict with DISTINCT removed, with --keep-distinct), hand-checked against
# test-suite exec_eval (replace_cur_year before execution; remove_distinct keeps sqlparse.parse(s)[0])
DATE_AND_MULTI_CASES = [
    (
        "SELECT name FROM students WHERE birth_year > YEAR(CURDATE()) - 9",  # -> 2020- 9 = 2011
        "SELECT name FROM students WHERE birth_year > 2011",
        True,
        True,
    ),
    (
        "SELECT name FROM students WHERE birth_year = 2010",
        "SELECT name FROM students WHERE birth_year = year( curdate( ) ) - 10",
        True,
        True,
    ),
    (STUDENTS_NAME_CITY, "SELECT DISTINCT name, city FROM students; SELECT 1", True, False),
    (STUDENTS_NAME_CITY, "SELECT name, city FROM students; DELETE FROM students", True, False),
    (STUDENTS_NAME_CITY, "SELECT name FROM students; SELECT name, city FROM students", False, False),
]


@pytest.mark.parametrize("keep_distinct", [False, True])
def test_spider_date_rewrite_and_multi_statement(tmp_path, run_cli, kit, keep_distinct):
    items = [
        {"db_id": "school", "question": f"q{i}", "query": gold} for i, (gold, *_r) in enumerate(DATE_AND_MULTI_CASES)
    ]
    data = kit.make_spider_dir(tmp_path / "spider", items)
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": i, "sql": c[1]} for i, c in enumerate(DATE_AND_MULTI_CASES)])
    args = ["--benchmark", "spider", "--data-dir", data, "--predictions", preds] + ["--keep-distinct"] * keep_distinct
    code, out = run_cli(*args)
    assert code == 0
    records = kit.read_records(out, "spider")
    for i, (_gold, _pred, removed, kept) in enumerate(DATE_AND_MULTI_CASES):
        expected = kept if keep_distinct else removed
        assert records[str(i)]["verdict"] is expected, (i, records[str(i)]["reason"])
