"""The Spider and BIRD benchmarks: loaders, official scorers, summary, prediction file formats.

Layouts (``--data-dir``; the bundled minis are used when it is omitted):

=========  ==========================================================================================
spider     ``dev.json`` (``db_id``, ``question``, ``query``; optional ``difficulty``/``hardness``),
           ``database/<db_id>/<db_id>.sqlite`` (every ``*.sqlite`` in that folder is a test-suite db)
bird       ``dev.json`` (``question_id``?, ``db_id``, ``question``, ``evidence``, ``SQL``, ``difficulty``),
           ``dev_databases/<db_id>/<db_id>.sqlite``
=========  ==========================================================================================

Official rules reproduced here (the comparisons themselves live in ``verifier/``):

- Spider (test-suite ``exec_eval.eval_exec_match``): ``> =``/``< =``/``! =`` are closed up in both queries,
  DISTINCT is removed from both (unless ``keep_distinct``), row order matters iff ``"order by"`` occurs anywhere
  in the gold string (lower-cased; the official test, not the reward's top-level one), denotations are compared as
  bags with column permutations on EVERY ``*.sqlite`` file in the database's folder (test-suite databases).
- BIRD (``evaluation.py``): ``set(pred_rows) == set(gold_rows)``; the pred and gold queries share one time budget
  (30 s by default), past it the example is wrong.

Prediction files: besides JSONL rows (a bare query may be given as ``"sql"``), Spider's official plain text (one
query per line in dev order, a ``\\t`` and what follows it ignored) and BIRD's official JSON
(``{"<question_id>": "SQL\\t----- bird -----\\t<db_id>"}``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mrtpo_openrlhf.data.jsonl import DatasetError
from mrtpo_openrlhf.evaluation.data import EvalDataError, EvalExample, _expect, _load_json_list, _require
from mrtpo_openrlhf.evaluation.predictions import Prediction
from mrtpo_openrlhf.evaluation.scoring import _accuracy_by, _decisions, _flat, _n_examples, rate
from mrtpo_openrlhf.tasks.sql import BIRD_TIMEOUT_S, SPIDER_TIMEOUT_S
from mrtpo_openrlhf.tasks.sql.reward import build_prompt
from mrtpo_openrlhf.tasks.sql.verifier import (
    GoldResultCache,
    bird_set_match,
    execute_sql,
    extract_sql,
    read_schema_ddl,
    remove_distinct,
    spider_result_eq,
    split_statements,
)

EVAL_MAX_ROWS = 1_000_000  # the official scripts fetch everything; past this cap the example counts as wrong
GOLD_CACHE = GoldResultCache(maxsize=8192)
BIRD_SEPARATOR = "\t----- bird -----\t"


# ----------------------------------------------------------------------------------------------- loaders
SPIDER_LAYOUT = "DIR/dev.json (list of {db_id, question, query}) and DIR/database/<db_id>/<db_id>.sqlite"
BIRD_LAYOUT = (
    "DIR/dev.json (list of {question_id, db_id, question, evidence, SQL, difficulty}) and "
    "DIR/dev_databases/<db_id>/<db_id>.sqlite"
)


def _sql_examples(benchmark: str, data_dir: Path) -> list[EvalExample]:
    spider = benchmark == "spider"
    layout = SPIDER_LAYOUT if spider else BIRD_LAYOUT
    _expect(data_dir, layout)
    items = _load_json_list(data_dir / "dev.json", layout)
    db_root = _expect(data_dir / ("database" if spider else "dev_databases"), layout)
    gold_key = "query" if spider else "SQL"
    schemas: dict[str, str] = {}
    out = []
    for index, item in enumerate(items):
        where = f"{data_dir / 'dev.json'}: item {index}"
        _require(item, where, {"db_id": str, "question": str, gold_key: str}, layout)
        db_id = item["db_id"]
        db_file = db_root / db_id / f"{db_id}.sqlite"
        if not db_file.is_file():
            raise EvalDataError(f"{where}: database {db_file} not found. Expected layout: {layout}")
        if db_id not in schemas:
            schemas[db_id] = read_schema_ddl(db_file)
        evidence = None if spider else item.get("evidence")
        difficulty = item.get("difficulty", item.get("hardness"))
        # BIRD's official predictions are keyed by position; its question_id equals the position in dev.json.
        ex_id = str(item.get("question_id", index)) if not spider else str(index)
        target = {"gold": item[gold_key].strip(), "db_path": str(db_file), "db_dir": str(db_file.parent)}
        meta = {"db_id": db_id, "question": item["question"]}
        if difficulty is not None:
            meta["difficulty"] = str(difficulty)
        out.append(
            EvalExample(ex_id, benchmark, build_prompt(schemas[db_id], item["question"], evidence), target, meta)
        )
    return out


def load_spider(data_dir: Path, **_: Any) -> list[EvalExample]:
    return _sql_examples("spider", data_dir)


def load_bird(data_dir: Path, **_: Any) -> list[EvalExample]:
    return _sql_examples("bird", data_dir)


# ----------------------------------------------------------------------------------------------- scorers
def spider_postprocess(sql: str) -> str:
    """exec_eval.postprocess: close up the comparison operators a tokenizer may have split."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def spider_replace_cur_year(sql: str) -> str:
    """exec_eval.replace_cur_year, applied to both queries right before execution: MySQL's ``YEAR(CURDATE())``
    becomes ``2020`` (the regex also eats the whitespace after it, as the official one does)."""
    return _CUR_YEAR.sub("2020", sql)


def spider_remove_distinct(sql: str) -> str:
    """parse.remove_distinct: DISTINCT tokens dropped from the FIRST statement only (``sqlparse.parse(s)[0]``), so a
    multi-statement prediction is cut to its first statement, exactly as the official scorer does."""
    statements = split_statements(sql)
    return remove_distinct(statements[0] if len(statements) > 1 else sql)


def spider_order_matters(gold_sql: str) -> bool:
    """The official test: "order by" anywhere in the (post-processed) gold string."""
    return "order by" in gold_sql.lower()


def spider_databases(db_dir: str | Path) -> list[Path]:
    """Every database the test suite compares on: each ``*.sqlite`` file in the folder, sorted."""
    return sorted(p for p in Path(db_dir).iterdir() if p.is_file() and p.name.endswith(".sqlite"))


def _sql_answer(response: str, answer: str | None) -> str | None:
    return answer if answer is not None else extract_sql(response or "")


def score_spider(
    example: EvalExample,
    response: str,
    answer: str | None = None,
    *,
    timeout_s: float = SPIDER_TIMEOUT_S,
    max_rows: int = EVAL_MAX_ROWS,
    keep_distinct: bool = False,
) -> dict[str, Any]:
    """Spider test-suite execution match for one example (see the module docstring)."""
    sql = _sql_answer(response, answer)
    record: dict[str, Any] = {"answer": sql, "gold": example.target["gold"], "gold_error": ""}
    if not sql:
        return {**record, "verdict": False, "reason": "no SQL found in the response"}
    pred_sql, gold_sql = spider_postprocess(sql), spider_postprocess(example.target["gold"])
    if not keep_distinct:
        pred_sql, gold_sql = spider_remove_distinct(pred_sql), spider_remove_distinct(gold_sql)
    order_matters = spider_order_matters(gold_sql)
    pred_sql, gold_sql = spider_replace_cur_year(pred_sql), spider_replace_cur_year(gold_sql)
    record["order_matters"] = order_matters
    databases = spider_databases(example.target["db_dir"])
    record["n_databases"] = len(databases)
    for db in databases:
        gold, _ = GOLD_CACHE.execute(db, gold_sql, timeout_s=timeout_s, max_rows=max_rows)
        if not gold.ok:
            return {
                **record,
                "verdict": False,
                "gold_error": gold.error,
                "reason": f"gold query failed on {db.name}: {gold.error}",
            }
        pred = execute_sql(db, pred_sql, timeout_s=timeout_s, max_rows=max_rows)
        if not pred.ok:
            return {**record, "verdict": False, "reason": f"query failed on {db.name}: {pred.error}"}
        if pred.truncated or gold.truncated:
            return {**record, "verdict": False, "reason": f"more than {max_rows} rows on {db.name}"}
        if not spider_result_eq(pred.rows, gold.rows, order_matters=order_matters):
            ordered = ", ordered" if order_matters else ""
            return {**record, "verdict": False, "reason": f"denotation differs on {db.name} (bag{ordered})"}
    return {**record, "verdict": True, "reason": ""}


def score_bird(
    example: EvalExample,
    response: str,
    answer: str | None = None,
    *,
    timeout_s: float = BIRD_TIMEOUT_S,
    max_rows: int = EVAL_MAX_ROWS,
) -> dict[str, Any]:
    """BIRD EX for one example: set equality, pred + gold within one time budget."""
    sql = _sql_answer(response, answer)
    record: dict[str, Any] = {"answer": sql, "gold": example.target["gold"], "gold_error": ""}
    if not sql:
        return {**record, "verdict": False, "reason": "no SQL found in the response"}
    db = example.target["db_path"]
    pred = execute_sql(db, sql, timeout_s=timeout_s, max_rows=max_rows)
    if not pred.ok:
        return {**record, "verdict": False, "reason": f"query failed: {pred.error}"}
    gold, _ = GOLD_CACHE.execute(db, example.target["gold"], timeout_s=timeout_s, max_rows=max_rows)
    if not gold.ok:
        return {**record, "verdict": False, "gold_error": gold.error, "reason": f"gold query failed: {gold.error}"}
    if pred.elapsed_s + gold.elapsed_s > timeout_s:
        return {**record, "verdict": False, "reason": f"pred + gold took more than {timeout_s:g} s"}
    if pred.truncated or gold.truncated:
        return {**record, "verdict": False, "reason": f"more than {max_rows} rows"}
    if not bird_set_match(pred.rows, gold.rows):
        return {**record, "verdict": False, "reason": "result set differs from the gold"}
    return {**record, "verdict": True, "reason": ""}


# ----------------------------------------------------------------------------------------------- summary
def summarize_sql(records: list[dict]) -> dict[str, Any]:
    """EX overall (with ``correct``, the number of examples right) and by ``difficulty`` when the data has it
    (BIRD: simple/moderate/challenging)."""
    stats = rate(_decisions(records))
    return {
        "n": _n_examples(records),
        **_flat("ex", stats),
        "correct": stats["correct"],
        "by_difficulty": _accuracy_by(records, "difficulty"),
        "gold_errors": sum(1 for r in records if r.get("gold_error")),
    }  # per sample


def spider_columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [("Spider EX", "ex")]


def bird_columns(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [("BIRD EX", "ex")]


# ----------------------------------------------------------------------------------------------- prediction files
def detects_file(benchmark: str, text: str, whole: Any) -> str | None:
    """What the file is when it is ``benchmark``'s official prediction format (the text of the error that names the
    benchmark when it is not the one requested), else None."""
    if benchmark == "bird":
        if isinstance(whole, dict) and whole and all(k.isdigit() and isinstance(v, str) for k, v in whole.items()):
            return "BIRD's JSON prediction file"
        return None
    head = text.lstrip()[:1]
    if head and head not in "{[" and not isinstance(whole, dict):
        return "a plain-text prediction file (one SQL per line) is Spider's official format"
    return None


def read_file(benchmark: str, path: str, text: str, whole: Any, examples: list[EvalExample]):
    """(id, [Prediction], where) of each query of an official prediction file (``detects_file``)."""
    if benchmark == "bird":
        db_of = {ex.id: ex.meta.get("db_id") for ex in examples}
        for key, value in whole.items():
            sql, sep, db_id = value.partition(BIRD_SEPARATOR)
            if sep and key in db_of and db_id.strip() != db_of[key]:
                raise DatasetError(
                    f"{path}: question {key}: prediction is for database {db_id.strip()!r}, "
                    f"the benchmark item is on {db_of[key]!r}"
                )
            yield key, [Prediction("", sql)], f"{path}: question {key}"
        return
    queries = [ln.split("\t")[0] for ln in (raw.strip() for raw in text.splitlines()) if ln]
    n = len(examples)
    if len(queries) > n:  # ids are positions: the surplus lines have no example
        raise DatasetError(
            f"{path}: {len(queries)} queries for the {n} spider examples (one query per line, in dev.json order): "
            + (f"query {n + 1} has" if len(queries) == n + 1 else f"queries {n + 1}-{len(queries)} have")
            + " no example"
        )
    for index, sql in enumerate(queries):
        yield str(index), [Prediction("", sql)], f"{path}: query {index + 1}"
