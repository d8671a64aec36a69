"""score_sql / reward_func: hand-checked cases, adversarial responses, labels, threads, dataset rows."""

import hashlib
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from wall_clock import LOADED_MACHINE_SLACK_S

from mrtpo_openrlhf.data.jsonl import DatasetError
from mrtpo_openrlhf.rewards.contract import BLOCKS_KEY, NAMES_KEY, REASONS_KEY, VALUES_KEY
from mrtpo_openrlhf.tasks.sql.reward import (
    BUNDLED_DB_ROOT,
    FIXTURE_DIR,
    LOG_KEYS,
    SQL_REWARD_NAMES,
    GoldResultCache,
    check_rows,
    convert_examples,
    load_json_list,
    main,
    parse_label,
    read_sql_rows,
    reward_func,
    score_sql,
    unearnable_rewards,
)
from mrtpo_openrlhf.tasks.sql.verifier import SQL_FORMAT_BLOCK, check_format, extract_sql, response_from_query

REPO = Path(__file__).resolve().parents[2]


def respond(sql: str, think: str = "Look at the tables.") -> str:
    return f"<think>{think}</think>\n```sql\n{sql}\n```"


def values(vec):
    return dict(zip(vec.names, vec.values))


SCHOOL = {"db_id": "school", "gold": "SELECT name FROM students WHERE city = 'Porto'"}


def test_correct_answer_scores_all_three_and_blocks_are_right():
    vec = score_sql(respond("SELECT s.name FROM students s WHERE s.city = 'Porto';"), "", SCHOOL)
    assert vec.names == list(SQL_REWARD_NAMES)
    assert vec.values == [1.0, 1.0, 1.0]
    blocks = [it.block for it in vec.items]
    assert blocks == [SQL_FORMAT_BLOCK, "", SCHOOL["gold"]]
    assert vec.primary_value() == 1.0 and set(vec.logs) == set(LOG_KEYS)


def test_wrong_but_runnable_query():
    vec = score_sql(respond("SELECT name FROM students WHERE city = 'Lyon'"), "", SCHOOL)
    assert values(vec) == {"format": 1.0, "executable": 1.0, "execution": 0.0}
    assert "differs" in vec.items[2].reason


def test_error_becomes_the_executable_block():
    vec = score_sql(respond("SELECT nme FROM students"), "", SCHOOL)
    assert values(vec) == {"format": 1.0, "executable": 0.0, "execution": 0.0}
    assert vec.items[1].block == "no such column: nme"


def test_broken_layout_can_still_execute():
    response = "The answer:\n```sql\nSELECT name FROM students WHERE city = 'Porto'\n```\nHope it helps"
    vec = score_sql(response, "", SCHOOL)
    assert values(vec) == {"format": 0.0, "executable": 1.0, "execution": 1.0}


def test_spider_order_and_bag_semantics_through_the_reward():
    ordered = {"db_id": "bookstore", "gold": "SELECT title FROM books WHERE year = 1987 ORDER BY title"}
    assert score_sql(respond("SELECT title FROM books WHERE year = 1987 ORDER BY title"), "", ordered).values[2] == 1.0
    vec = score_sql(respond("SELECT title FROM books WHERE year = 1987 ORDER BY title DESC"), "", ordered)
    assert vec.values[2] == 0.0 and vec.logs["sql_order_matters"] == 1.0
    # Duplicates: sales has two identical Tokyo rows for book 2. Set semantics (BIRD, default) ignore them ...
    dup_gold = "SELECT store FROM sales WHERE book_id = 2"
    one = respond("SELECT DISTINCT store FROM sales WHERE book_id = 2")
    assert score_sql(one, "", {"db_id": "bookstore", "gold": dup_gold}).values[2] == 1.0
    # ... the Spider bag comparison counts them, unless DISTINCT is dropped as the official evaluation does.
    spider_keep = {"db_id": "bookstore", "gold": dup_gold, "mode": "spider", "keep_distinct": True}
    assert score_sql(one, "", spider_keep).values[2] == 0.0
    assert score_sql(one, "", dict(spider_keep, keep_distinct=False)).values[2] == 1.0


def test_column_permutation_only_with_spider_comparison():
    gold = "SELECT name, city FROM students WHERE class_id = 1"
    swapped = respond("SELECT city, name FROM students WHERE class_id = 1")
    assert score_sql(swapped, "", {"db_id": "school", "gold": gold, "mode": "bird"}).values[2] == 0.0
    assert score_sql(swapped, "", {"db_id": "school", "gold": gold, "mode": "spider"}).values[2] == 1.0


def test_unicode_values_match():
    label = {"db_id": "bookstore", "gold": "SELECT name FROM authors WHERE country = 'Japan'"}
    vec = score_sql(respond("SELECT name FROM authors WHERE name LIKE '%村上春樹%'", think="日本の作家"), "", label)
    assert vec.values == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "sql",
    [
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
        # 12^8 = 430M rows
        "SELECT count(*) FROM sales a, sales b, sales c, sales d, sales e, sales f, sales g, sales h",
    ],
)
def test_runaway_queries_cost_about_the_limit_and_score_zero(sql):
    start = time.perf_counter()
    vec = score_sql(respond(sql), "", {"db_id": "bookstore", "gold": "SELECT count(*) FROM sales"}, timeout_s=1.0)
    assert time.perf_counter() - start < 1.0 + LOADED_MACHINE_SLACK_S  # wall, like the limit
    assert values(vec) == {"format": 1.0, "executable": 0.0, "execution": 0.0}
    assert vec.logs["sql_timed_out"] == 1.0 and "time limit" in vec.items[1].block


def test_huge_select_is_truncated_and_scores_zero_execution():
    vec = score_sql(
        respond("SELECT * FROM sales a, sales b, sales c, sales d"),
        "",
        {"db_id": "bookstore", "gold": "SELECT * FROM sales"},
        max_rows=1000,
    )
    assert vec.values[2] == 0.0 and vec.logs["sql_truncated"] == 1.0


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH DATABASE 'x.sqlite' AS x",
        "DROP TABLE students",
        "INSERT INTO students VALUES (9, 'Zed', 1, 2011, 'Rome')",
        "PRAGMA writable_schema=1",
        "SELECT load_extension('libevil')",
        "SELECT name FROM students; DROP TABLE students",
    ],
)
def test_hostile_queries_score_zero_and_leave_the_db_identical(sql):
    db = BUNDLED_DB_ROOT / "school" / "school.sqlite"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    vec = score_sql(respond(sql), "", SCHOOL)
    assert vec.values[1:] == [0.0, 0.0] and vec.items[1].block
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("response", ["", "   ", "SELECT", "\x00\xff garbage ``` <think>", "<think></think>"])
def test_empty_and_garbage_responses(response):
    vec = score_sql(response, "", SCHOOL)
    assert vec.values == [0.0, 0.0, 0.0] and vec.items[0].reason


@pytest.mark.parametrize(
    "response, ok",
    [
        (respond("SELECT 1"), True),
        ("  <think>x</think>```sql\nSELECT 1```<|im_end|>", True),
        (respond("SELECT 1") + "\nDone.", False),
        ("<think>a</think><think>b</think>\n```sql\nSELECT 1\n```", False),
        ("<think>a</think>\n```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```", False),
        ("<think>a</think>\n```python\nprint(1)\n```", False),
        ("Sure! <think>a</think>\n```sql\nSELECT 1\n```", False),
        ("<think>a\n```sql\nSELECT 1\n```</think>", False),
        ("<think>a</think>\n```sql\n\n```", False),
    ],
)
def test_format_rule(response, ok):
    assert check_format(response).ok is ok


def test_extraction_prefers_the_last_block_after_think():
    text = "<think>maybe ```sql\nSELECT 0\n``` no</think>\n```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```"
    assert extract_sql(text) == "SELECT 2"
    assert extract_sql("<think>```sql\nSELECT 7\n```</think> nothing") == "SELECT 7"
    assert extract_sql("no code") is None


def test_query_includes_the_prompt():
    prompt = "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    response = respond("SELECT name FROM students WHERE city = 'Porto'")
    assert response_from_query(prompt + response + "<|im_end|>", prompt).startswith("<think>")
    vec = score_sql(prompt + response + "<|im_end|>", prompt, SCHOOL)
    assert vec.values == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "label, reason",
    [
        (None, "label must be an object"),
        ("not json", "not JSON"),
        ({"db_id": "school"}, "'gold'"),
        ({"gold": "SELECT 1"}, "db_path"),
        ({"db_id": "../etc", "gold": "SELECT 1"}, "db_path"),
        ({"db_id": "school", "gold": "SELECT 1", "mode": "exact"}, "mode"),
        ({"db_id": "no_such_db", "gold": "SELECT 1"}, "database not found"),
    ],
)
def test_bad_labels_give_zeros_with_a_reason_and_same_log_keys(label, reason):
    vec = score_sql(respond("SELECT 1"), "", label)
    assert vec.values == [1.0, 0.0, 0.0]
    assert reason in vec.items[2].reason and set(vec.logs) == set(LOG_KEYS)


def test_label_as_json_string_and_db_path_and_env_root(monkeypatch, tmp_path):
    label = json.dumps({"db_path": "school/school.sqlite", "gold": SCHOOL["gold"]})
    assert score_sql(respond(SCHOOL["gold"]), "", label).values == [1.0, 1.0, 1.0]
    monkeypatch.setenv("MRTPO_SQL_DB_ROOT", str(tmp_path))  # empty root: the database is not found there
    assert "database not found" in score_sql(respond(SCHOOL["gold"]), "", SCHOOL).items[2].reason
    abs_label = {"db_path": str(BUNDLED_DB_ROOT / "school" / "school.sqlite"), "gold": SCHOOL["gold"]}
    assert score_sql(respond(SCHOOL["gold"]), "", abs_label).values == [1.0, 1.0, 1.0]


def test_gold_failure_is_reported_not_raised():
    vec = score_sql(respond("SELECT 1"), "", {"db_id": "school", "gold": "SELECT nope FROM students"})
    assert vec.values == [1.0, 1.0, 0.0] and "gold query failed" in vec.items[2].reason


def test_gold_cache_hits_and_is_bounded():
    cache = GoldResultCache(maxsize=2)
    for _ in range(3):
        score_sql(respond("SELECT 1"), "", SCHOOL, cache=cache)
    assert cache.hits == 2 and cache.misses == 1
    for gold in ("SELECT 1", "SELECT 2", "SELECT 3"):
        score_sql(respond("SELECT 1"), "", {"db_id": "school", "gold": gold}, cache=cache)
    assert len(cache) == 2


def test_reward_func_shape_and_never_raises():
    out = reward_func([respond(SCHOOL["gold"])], [""], [SCHOOL])
    assert set(out) == {"rewards", "scores", "extra_logs"}
    assert isinstance(out["rewards"], torch.Tensor) and out["rewards"].shape == (1,)
    assert out["rewards"].item() == 3.0 and out["scores"].item() == 1.0
    logs = out["extra_logs"]
    assert logs[NAMES_KEY] == list(SQL_REWARD_NAMES) and logs[VALUES_KEY] == [1.0, 1.0, 1.0]
    assert len(logs[BLOCKS_KEY]) == len(logs[REASONS_KEY]) == 3
    assert all(isinstance(v, float) for k, v in logs.items() if k.startswith("sql_"))
    for weird in ([None], [123], [{"gold": "x"}]):  # (a missing database is a setup error: see below)
        bad = reward_func([12345], [None], weird)  # non-string query and prompt, bad labels
        assert bad["extra_logs"][NAMES_KEY] == list(SQL_REWARD_NAMES) and bad["rewards"].item() == 0.0


def test_entry_point_file_loads_by_path():
    import importlib.util

    spec = importlib.util.spec_from_file_location("reward_func", REPO / "reward_funcs" / "sql.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.reward_func([respond(SCHOOL["gold"])], [""], [SCHOOL])["scores"].item() == 1.0


def test_threads_give_the_same_results_as_serial():
    rows = read_sql_rows(FIXTURE_DIR / "train_mini.jsonl")
    cases = []
    for i in range(50):
        row = rows[i % len(rows)]
        gold = row["label"]["gold"]
        sql = [
            gold,
            "SELECT nope",
            gold + " LIMIT 1",
            "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM r) SELECT count(*) FROM r",
            "SELECT 1",
        ][i % 5]
        cases.append((row["prompt"] + respond(sql), row["prompt"], row["label"]))
    # Only clear-cut queries (fast, or never-ending) so that machine load cannot flip a time-limit verdict.
    serial = [score_sql(*c, cache=GoldResultCache(), timeout_s=0.3).values for c in cases]
    shared = GoldResultCache()
    with ThreadPoolExecutor(max_workers=8) as pool:
        threaded = list(pool.map(lambda c: score_sql(*c, cache=shared, timeout_s=0.3).values, cases))
    assert threaded == serial
    assert sum(v[2] for v in serial) >= 10  # the gold answers really matched


def test_mini_sets_score_gold_as_correct():
    for name in ("train_mini.jsonl", "dev_mini.jsonl"):
        for row in read_sql_rows(FIXTURE_DIR / name):
            assert SQL_FORMAT_BLOCK in row["prompt"] and len(row["prompt"]) < 1500
            vec = score_sql(row["prompt"] + respond(row["label"]["gold"]), row["prompt"], row["label"])
            assert vec.values == [1.0, 1.0, 1.0], (row["label"], [it.reason for it in vec.items])


def test_malformed_row_error_names_file_and_line(tmp_path):
    good = (FIXTURE_DIR / "train_mini.jsonl").read_text(encoding="utf-8").splitlines()[0]
    path = tmp_path / "rows.jsonl"
    path.write_text(good + "\n" + json.dumps({"prompt": "q", "label": {"db_id": "school"}}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: .*gold"):
        read_sql_rows(path)


def test_converter_spider_and_bird(tmp_path):
    spider = load_json_list(FIXTURE_DIR / "dev.json")
    rows = convert_examples(spider, "spider", BUNDLED_DB_ROOT, db_root_in_label=True)
    assert rows[0]["label"]["db_root"] == str(BUNDLED_DB_ROOT.resolve())
    assert "CREATE TABLE authors" in rows[0]["prompt"] and spider[0]["question"] in rows[0]["prompt"]
    bird = load_json_list(FIXTURE_DIR / "bird" / "dev.json")
    brows = convert_examples(bird, "bird", FIXTURE_DIR / "bird" / "dev_databases")
    assert "Evidence: depart on 2024-05-01" in brows[0]["prompt"]
    with pytest.raises(DatasetError, match="item 0: missing field 'query'"):
        convert_examples([{"db_id": "school", "question": "q"}], "spider", BUNDLED_DB_ROOT)
    with pytest.raises(DatasetError, match="database not found"):
        convert_examples([{"db_id": "nope", "question": "q", "query": "SELECT 1"}], "spider", BUNDLED_DB_ROOT)


def test_converted_rows_travel_with_a_root_given_at_run_time(tmp_path, monkeypatch, capsys):
    """Issue 47 item 5: the converter wrote the converting machine's absolute database root into every label; now the
    label names the database by db_id and MRTPO_SQL_DB_ROOT, set where the run happens, gives the root."""
    databases = FIXTURE_DIR / "bird" / "dev_databases"
    moved = tmp_path / "elsewhere"
    shutil.copytree(databases, moved)
    out = tmp_path / "rows.jsonl"
    args = ["convert", "--format", "bird", "--input", str(FIXTURE_DIR / "bird" / "train.json")]
    assert main([*args, "--db-root", str(databases), "--out", str(out), "--check-gold"]) == 0
    assert f"export MRTPO_SQL_DB_ROOT={databases.resolve()}" in capsys.readouterr().out
    labels = [row["label"] for row in read_sql_rows(out)]
    assert all("db_root" not in label and str(databases) not in json.dumps(label) for label in labels)
    monkeypatch.setenv("MRTPO_SQL_DB_ROOT", str(moved))  # the training machine's copy, at another path
    assert all(parse_label(label).db_path.is_relative_to(moved) for label in labels)
    assert main(["check", "--input", str(out)]) == 0
    monkeypatch.delenv("MRTPO_SQL_DB_ROOT")  # no root given: the pre-flight's reason says which variable to set
    assert unearnable_rewards({"db_id": "only_elsewhere", "gold": "SELECT 1"})[0][1].endswith(
        "(set MRTPO_SQL_DB_ROOT to the folder holding <db_id>/)"
    )
    pinned = tmp_path / "pinned.jsonl"
    assert main([*args, "--db-root", str(databases), "--out", str(pinned), "--db-root-in-label"]) == 0
    assert read_sql_rows(pinned)[0]["label"]["db_root"] == str(databases.resolve())


def test_a_gold_query_that_cannot_run_makes_execution_unearnable():
    """Issue 49 item 3: the same check as ``sql check`` (``gold_failure``) is the task's ``unearnable``."""
    label = {"db_id": "bookstore", "gold": "SELEC broken"}
    found = unearnable_rewards(label)
    assert [name for name, _ in found] == ["execution"] and "gold query failed" in found[0][1]
    assert check_rows([{"prompt": "q", "label": label}], "rows.jsonl")[0].startswith("rows.jsonl: row 1: gold query")
    assert unearnable_rewards({"db_id": "bookstore", "gold": "SELECT count(*) FROM authors"}) == []


def test_cli_convert_and_check(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MRTPO_SQL_DB_ROOT", str(FIXTURE_DIR / "bird" / "dev_databases"))
    out = tmp_path / "rows.jsonl"
    args = [
        "convert",
        "--format",
        "bird",
        "--input",
        str(FIXTURE_DIR / "bird" / "train.json"),
        "--db-root",
        str(FIXTURE_DIR / "bird" / "dev_databases"),
        "--out",
        str(out),
        "--check-gold",
    ]
    assert main(args) == 0
    assert len(read_sql_rows(out)) == len(load_json_list(FIXTURE_DIR / "bird" / "train.json"))
    assert main(["check", "--input", str(out)]) == 0
    bad = tmp_path / "bad.json"
    bad.write_text('[{"db_id": 1}]', encoding="utf-8")
    assert (
        main(
            [
                "convert",
                "--format",
                "spider",
                "--input",
                str(bad),
                "--db-root",
                str(tmp_path),
                "--out",
                str(tmp_path / "x.jsonl"),
            ]
        )
        == 2
    )
    assert "item 0" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["mrtpo_openrlhf.rewards.sql"], ["mrtpo_openrlhf.cli.task", "sql"]])
def test_module_runs_as_a_script(tmp_path, command):
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            *command,
            "convert",
            "--format",
            "spider",
            "--input",
            str(FIXTURE_DIR / "train.json"),
            "--db-root",
            str(BUNDLED_DB_ROOT),
            "--out",
            str(out),
            "--limit",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) == 3


def test_training_reward_stops_on_a_database_missing_on_this_node(monkeypatch, tmp_path):
    """Issue 26 item 3: in training (``reward_func``), a label whose database this node cannot read is a setup error
    naming the path and the node, not a zero on two of the three rewards; evaluation's ``score_sql`` still scores
    such a label with the reason."""
    import socket

    from mrtpo_openrlhf.rewards.contract import SETUP_ERROR_KEY

    ok = reward_func([respond(SCHOOL["gold"])], [""], [SCHOOL])
    assert SETUP_ERROR_KEY not in ok["extra_logs"] and ok["rewards"].tolist() == [3.0]
    monkeypatch.setenv("MRTPO_SQL_DB_ROOT", str(tmp_path))  # a root without the databases, as on a bad node
    out = reward_func([respond(SCHOOL["gold"])], [""], [SCHOOL])
    message = out["extra_logs"][SETUP_ERROR_KEY]
    assert f"SQL database not found: {tmp_path / 'school' / 'school.sqlite'}" in message
    assert socket.gethostname() in message and "MRTPO_SQL_DB_ROOT" in message
    assert out["rewards"].tolist() == [0.0] and NAMES_KEY not in out["extra_logs"]
    assert "database not found" in score_sql(respond(SCHOOL["gold"]), "", SCHOOL).items[2].reason
    # a bad label is the row's problem, not the node's: scored with its reason
    bad = reward_func([respond("SELECT 1")], [""], [{"gold": "SELECT 1"}])
    assert SETUP_ERROR_KEY not in bad["extra_logs"] and "db_path" in bad["extra_logs"][REASONS_KEY][2]
