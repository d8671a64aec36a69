"""Text-to-SQL reward: three binary rewards per response, in this fixed order.

=============  ==========================================================  ============================================
name           value 1 iff                                                 verifier block (text the replay removes)
=============  ==========================================================  ============================================
``format``     the response is exactly ``<think>...</think>`` then one      ``SQL_FORMAT_BLOCK`` (the format
               ```sql fenced block and nothing else                         description, also shown verbatim in the
                                                                           prompt)
``executable`` the extracted query ran without error or timeout            the SQLite error this response's query raised
                                                                           (``""`` when it ran or no query was found)
``execution``  its result matches the gold result                          the reference (gold) query
=============  ==========================================================  ============================================

The primary score is ``execution``. Extraction for the last two rewards is lenient (last closed sql fence), so a
response with a broken layout can still be executed.

Comparison (``label["mode"]``):
- ``auto`` (default): BIRD set comparison, unless the gold query has a top-level ORDER BY; then the Spider
  test-suite comparison (bag of rows, order-sensitive, column permutation allowed).
- ``bird``: always ``set(pred) == set(gold)``.
- ``spider``: always the Spider test-suite comparison; order-sensitive iff the gold has a top-level ORDER BY.
  (The official script looks for "order by" anywhere in the gold, subqueries included; this checks only the
  outermost query, which is what decides the row order.)
With the Spider comparison, DISTINCT is removed from both queries before running them, as the official
evaluation does, unless ``label["keep_distinct"]`` is true.

JSONL training row schema (OpenRLHF ``--data.input_key prompt --data.label_key label``)::

    {"prompt": "<schema + question (+ evidence) + SQL_FORMAT_BLOCK>",
     "label": {"db_id": "school",            # or "db_path": "school/school.sqlite" (absolute, or relative to the root)
               "gold": "SELECT ...",         # reference query
               "mode": "auto",               # optional: auto | bird | spider
               "keep_distinct": false,       # optional, Spider comparison only
               "db_root": "/data/spider/database"},  # optional; the converter leaves it out (--db-root-in-label)
     "meta": {...}}                          # optional, ignored by the reward

Database resolution: ``db_path`` if absolute; else relative to the first root found among ``label["db_root"]``,
the ``MRTPO_SQL_DB_ROOT`` environment variable and the bundled fixtures (``mrtpo_openrlhf/data/sql/database``).
``db_id`` resolves to ``<root>/<db_id>/<db_id>.sqlite`` (the Spider and BIRD layout). Rows made by the converter
name ``db_id`` only, so they travel: the machine that trains sets ``MRTPO_SQL_DB_ROOT`` to its copy of the databases
(the launcher forwards it to every Ray worker).

Sandbox limits for the model's query default to 1 s and 10,000 rows; the environment variables
``MRTPO_SQL_TIMEOUT_S`` and ``MRTPO_SQL_MAX_ROWS`` change them for a training run. Gold queries get 30 s (the BIRD
official timeout) and 100,000 rows, and their results are cached. The Spider comparison gets ``COMPARE_TIMEOUT_S``
(0.5 s of its thread's CPU time, so a busy machine does not change a reward); one that does not finish loses the
execution reward with that reason. A response longer than
``MRTPO_MAX_RESPONSE_CHARS`` scores 0 on all three rewards (see ``verifiers/response.py``).

Command line::

    python -m mrtpo_openrlhf.cli.task sql convert --format spider --input train.json --db-root DIR --out rows.jsonl
    python -m mrtpo_openrlhf.cli.task sql check --input rows.jsonl     # validate rows and run every gold query
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from mrtpo_openrlhf.data.jsonl import (
    DatasetError,
    read_jsonl,
    refuse_existing,
    refuse_same_file,
    require_fields,
    write_jsonl,
)
from mrtpo_openrlhf.paths import DATA_DIR
from mrtpo_openrlhf.rewards.contract import (
    BAD_LABEL,
    RewardItem,
    RewardVector,
    SetupError,
    label_object,
    make_reward_func,
)
from mrtpo_openrlhf.tasks.sql import DB_ROOT_ENV, MAX_ROWS_ENV, TIMEOUT_ENV
from mrtpo_openrlhf.tasks.sql.verifier import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    SQL_FORMAT_BLOCK,
    ComparisonTimeout,
    GoldResultCache,
    SqlResult,
    check_format,
    compare_results,
    execute_sql,
    extract_sql,
    has_top_level_order_by,
    read_schema_ddl,
    remove_distinct,
    response_from_query,
    run_query,
)
from mrtpo_openrlhf.verifiers.response import oversize_reason

logger = logging.getLogger(__name__)

SQL_REWARD_NAMES = ("format", "executable", "execution")
PRIMARY_REWARD = "execution"
MODES = ("auto", "bird", "spider")
LOG_KEYS = (
    "sql_has_query",
    "sql_pred_time_s",
    "sql_pred_rows",
    "sql_gold_rows",
    "sql_timed_out",
    "sql_truncated",
    "sql_order_matters",
    "sql_spider_compare",
    "sql_gold_ok",
    "sql_gold_cache_hit",
)
FIXTURE_DIR = DATA_DIR / "sql"
BUNDLED_DB_ROOT = FIXTURE_DIR / "database"
GOLD_TIMEOUT_S = 30.0
COMPARE_TIMEOUT_S = 0.5  # the Spider column-permutation search; past it the match is lost with the reason
GOLD_MAX_ROWS = 100_000
# The gold query is trusted: wider memory bounds than a model query's (256 MiB heap growth, 64 MiB of result).
GOLD_LIMITS = {"max_rows": GOLD_MAX_ROWS, "max_memory_bytes": 1 << 30, "max_result_bytes": 512 << 20}

GOLD_CACHE = GoldResultCache(maxsize=4096, execute=run_query)


@dataclass(frozen=True)
class SqlLabel:
    """A validated label."""

    db_path: Path
    gold: str
    mode: str = "auto"
    keep_distinct: bool = False


def parse_label(label: Any) -> SqlLabel:
    """Validate a dataset label (dict, or its JSON text) and resolve the database path.

    Raises ValueError naming the problem. The database file is not required to exist here.
    """
    label = label_object(label, "an object with 'gold' and 'db_id' or 'db_path'")
    gold = label.get("gold")
    if not isinstance(gold, str) or not gold.strip():
        raise ValueError("label field 'gold' (the reference SQL) is missing or empty")
    mode = label.get("mode", "auto") or "auto"
    if mode not in MODES:
        raise ValueError(f"label field 'mode' must be one of {MODES}, got {mode!r}")
    keep_distinct = label.get("keep_distinct", False)
    if not isinstance(keep_distinct, bool):
        raise ValueError(f"label field 'keep_distinct' must be a boolean, got {keep_distinct!r}")
    return SqlLabel(resolve_db_path(label), gold, mode, keep_distinct)


def missing_database(parsed: SqlLabel) -> str:
    """Why the label's database cannot be opened ("" when it can): every response then loses ``executable`` and
    ``execution``."""
    return "" if parsed.db_path.is_file() else f"database not found: {parsed.db_path}"


def gold_failure(parsed: SqlLabel) -> str:
    """Why the label's gold query cannot run ("" when it runs), run as the scorer runs it (DISTINCT removed under
    the Spider comparison, the gold limits): then no response can match it. The one check behind both
    ``sql check`` (``check_rows``) and the training pre-flight (``unearnable_rewards``)."""
    comparison, _ = choose_comparison(parsed.gold, parsed.mode)
    gold_sql = remove_distinct(parsed.gold) if comparison == "spider" and not parsed.keep_distinct else parsed.gold
    res = execute_sql(parsed.db_path, gold_sql, timeout_s=GOLD_TIMEOUT_S, **GOLD_LIMITS)
    return "" if res.ok else f"gold query failed: {res.error}"


def unearnable_rewards(label: Any) -> list[tuple[str, str]]:
    """(reward name, reason) for each reward no response can earn under ``label`` (the task registry's
    ``unearnable``, read by the training pre-flight): a missing database loses ``executable`` and ``execution``, a
    gold query that cannot run loses ``execution``. ValueError when the label does not parse."""
    parsed = parse_label(label)
    reason = missing_database(parsed)
    if reason:
        hint = "" if os.environ.get(DB_ROOT_ENV) else f" (set {DB_ROOT_ENV} to the folder holding <db_id>/)"
        return [("executable", reason + hint), ("execution", reason + hint)]
    reason = gold_failure(parsed)
    return [("execution", reason)] if reason else []


def resolve_db_path(label: dict) -> Path:
    """Database file of a label (see the module docstring for the order of roots)."""
    root_text = label.get("db_root") or os.environ.get(DB_ROOT_ENV) or ""
    root = Path(root_text).expanduser() if root_text else BUNDLED_DB_ROOT
    db_path, db_id = label.get("db_path"), label.get("db_id")
    if isinstance(db_path, str) and db_path:
        path = Path(db_path).expanduser()
        return path if path.is_absolute() else root / path
    if isinstance(db_id, str) and db_id and "/" not in db_id and "\\" not in db_id and db_id not in (".", ".."):
        return root / db_id / f"{db_id}.sqlite"
    raise ValueError("label needs 'db_path' or a plain 'db_id' (no path separators)")


def pred_limits_from_env() -> dict[str, Any]:
    """Sandbox limits for the model's query: defaults, overridden by MRTPO_SQL_TIMEOUT_S / MRTPO_SQL_MAX_ROWS."""
    try:
        timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
        max_rows = int(os.environ.get(MAX_ROWS_ENV, DEFAULT_MAX_ROWS))
    except ValueError as exc:
        raise ValueError(f"bad {TIMEOUT_ENV}/{MAX_ROWS_ENV} value: {exc}") from None
    return {"timeout_s": timeout_s, "max_rows": max_rows}


def choose_comparison(gold: str, mode: str) -> tuple[str, bool]:
    """(comparison name, order_matters) for a gold query under a label mode."""
    order_matters = has_top_level_order_by(gold)
    if mode == "bird":
        return "bird", order_matters
    if mode == "spider":
        return "spider", order_matters
    return ("spider" if order_matters else "bird"), order_matters


def _logs(**values: float) -> dict[str, float]:
    logs = {k: 0.0 for k in LOG_KEYS}
    for key, value in values.items():
        if key not in logs:
            raise KeyError(f"unknown SQL log key {key!r}")
        logs[key] = float(value)
    return logs


def _not_run(format_item: RewardItem, reason: str, gold_block: str, logs: dict[str, float]) -> RewardVector:
    """``format`` as scored, ``executable`` and ``execution`` 0 with ``reason``: nothing was (or could be) run."""
    return RewardVector(
        [format_item, RewardItem("executable", 0.0, "", reason), RewardItem("execution", 0.0, gold_block, reason)],
        primary=PRIMARY_REWARD,
        logs=logs,
    )


def _execution_match(
    sql: str | None,
    pred: SqlResult,
    gold: SqlResult,
    parsed: SqlLabel,
    comparison: str,
    order_matters: bool,
    strip_distinct: bool,
    limits: dict[str, Any],
    pred_cap: int,
) -> tuple[bool, str]:
    """(the ``execution`` reward, its reason): the predicted result against the gold's, by ``comparison``."""
    match, why = False, ""
    if sql is None or not pred.ok:
        why = "the query did not run"
    elif not gold.ok:
        why = f"gold query failed: {gold.error}"
    elif pred.truncated or gold.truncated:
        why = "result too large to compare (row cap reached)"
    else:
        compared = pred
        if strip_distinct and remove_distinct(sql) != sql:
            compared = run_query(parsed.db_path, remove_distinct(sql), timeout_s=limits["timeout_s"], max_rows=pred_cap)
        if not compared.ok:
            why = f"query without DISTINCT failed: {compared.error}"
        else:
            try:
                match = compare_results(
                    comparison, compared.rows, gold.rows, order_matters=order_matters, timeout_s=COMPARE_TIMEOUT_S
                )
            except ComparisonTimeout:
                why = f"result comparison did not finish within {COMPARE_TIMEOUT_S:g} s"
                logger.warning("%s (%d rows, %d columns)", why, len(gold.rows), len(gold.rows[0]) if gold.rows else 0)
            else:
                if not match:
                    ordered = ", ordered" if order_matters and comparison == "spider" else ""
                    why = f"result differs from the reference ({comparison} comparison{ordered})"
    return match, why


def score_sql(
    query: str,
    prompt: str,
    label: Any,
    *,
    timeout_s: float | None = None,
    max_rows: int | None = None,
    gold_timeout_s: float = GOLD_TIMEOUT_S,
    cache: GoldResultCache | None = None,
) -> RewardVector:
    """Score one rollout.

    Args:
        query: OpenRLHF's decoded prompt + response (a bare response works too when ``prompt`` is "").
        prompt: the prompt text, stripped from the front of ``query``.
        label: the row's label (see the module docstring); a bad label gives format-only scoring and a reason.
        timeout_s, max_rows: sandbox limits for the model's query (default: env vars, then 1 s / 10,000 rows).
        gold_timeout_s: limit for the gold query.
        cache: gold-result cache (default: the module-wide ``GOLD_CACHE``).

    Returns:
        RewardVector with SQL_REWARD_NAMES in order, primary ``execution`` and the numeric LOG_KEYS.
    """
    limits = pred_limits_from_env()
    if timeout_s is not None:
        limits["timeout_s"] = timeout_s
    if max_rows is not None:
        limits["max_rows"] = max_rows
    cache = GOLD_CACHE if cache is None else cache

    response = response_from_query(query, prompt)
    too_long = oversize_reason(response, "sql")
    if too_long:
        try:
            gold_block = parse_label(label).gold
        except ValueError:
            gold_block = ""
        return _not_run(
            RewardItem("format", 0.0, SQL_FORMAT_BLOCK, too_long, inline=True), too_long, gold_block, _logs()
        )
    fmt = check_format(response)
    format_item = RewardItem("format", float(fmt.ok), SQL_FORMAT_BLOCK, fmt.reason, inline=True)
    sql = extract_sql(response)

    try:
        parsed = parse_label(label)
    except ValueError as exc:
        return _not_run(format_item, f"{BAD_LABEL}: {exc}", "", _logs(sql_has_query=sql is not None))
    gold_item_block = parsed.gold
    reason = missing_database(parsed)
    if reason:
        return _not_run(format_item, reason, gold_item_block, _logs(sql_has_query=sql is not None))

    comparison, order_matters = choose_comparison(parsed.gold, parsed.mode)
    strip_distinct = comparison == "spider" and not parsed.keep_distinct
    gold_sql = remove_distinct(parsed.gold) if strip_distinct else parsed.gold
    gold, cache_hit = cache.execute(parsed.db_path, gold_sql, timeout_s=gold_timeout_s, **GOLD_LIMITS)
    if not gold.ok:
        logger.warning("gold query failed on %s: %s -- %s", parsed.db_path, gold.error, parsed.gold)
    # A result longer than the gold's can still set-match (duplicates), so never cap below the gold's length.
    pred_cap = max(limits["max_rows"], len(gold.rows) + 1)

    pred = SqlResult(error="")
    if sql is None:
        exec_item = RewardItem("executable", 0.0, "", "no ```sql block found in the response")
    else:
        pred = run_query(parsed.db_path, sql, timeout_s=limits["timeout_s"], max_rows=pred_cap)
        exec_reason = f"query failed: {pred.error}" if pred.error else ""
        exec_item = RewardItem("executable", float(pred.ok), pred.error, exec_reason)

    match, why = _execution_match(sql, pred, gold, parsed, comparison, order_matters, strip_distinct, limits, pred_cap)
    exec_match_item = RewardItem("execution", float(match), gold_item_block, why)

    logs = _logs(
        sql_has_query=sql is not None,
        sql_pred_time_s=pred.elapsed_s,
        sql_pred_rows=len(pred.rows),
        sql_gold_rows=len(gold.rows),
        sql_timed_out=pred.timed_out,
        sql_truncated=pred.truncated,
        sql_order_matters=order_matters,
        sql_spider_compare=comparison == "spider",
        sql_gold_ok=gold.ok,
        sql_gold_cache_hit=cache_hit,
    )
    return RewardVector([format_item, exec_item, exec_match_item], primary=PRIMARY_REWARD, logs=logs)


_FOUND_DATABASES: set[Path] = set()  # this process's databases already seen (one stat per database)


def require_database(label: Any) -> None:
    """Training's check of a label (``make_reward_func``'s ``check_label``): its database missing on this node is a
    ``SetupError`` that stops the run, naming the path and the node. Scored, it would zero ``executable`` and
    ``execution`` on every response to it, and only the format reward would train, silently."""
    try:
        path = parse_label(label).db_path
    except ValueError:
        return  # a bad label scores with its reason
    if path in _FOUND_DATABASES:
        return
    if not path.is_file():
        raise SetupError(
            f"reward_funcs/sql.py on {socket.gethostname()}: SQL database not found: {path} (every rollout node "
            f"must read the databases the data names: put them on shared storage, or set {DB_ROOT_ENV})"
        )
    _FOUND_DATABASES.add(path)


reward_func = make_reward_func(score_sql, lambda label: SQL_REWARD_NAMES, require_database)


def example_responses(row: dict) -> list[str]:
    """Two responses to a training row: the reference query in the required layout, and a query that fails."""
    gold = label_object(row["label"]).get("gold", "SELECT 1")
    return [
        f"<think>Select what the question asks.</think>\n```sql\n{gold}\n```",
        "<think>guess</think>\n```sql\nSELECT no_such_column FROM no_such_table\n```",
    ]


# ----------------------------------------------------------------------------------------------- dataset rows


# A worked example of the layout, for models too small to follow the description alone (the CPU demo's
# SmolLM2-135M: with it about a quarter of samples give a query that runs, without it none do).
ONE_SHOT_EXAMPLE = (
    "Example of the format:\n<think>The question counts the rows of one table.</think>\n"
    "```sql\nSELECT count(*) FROM authors;\n```"
)


def build_prompt(schema_ddl: Iterable[str], question: str, evidence: str | None = None, one_shot: bool = False) -> str:
    """Prompt text: compact schema, question, optional BIRD evidence, the format block verbatim, and
    optionally a worked example of the layout (``ONE_SHOT_EXAMPLE``)."""
    schema = "\n".join(" ".join(stmt.split()).rstrip(";") + ";" for stmt in schema_ddl)
    parts = [f"Database schema:\n{schema}", f"Question: {question.strip()}"]
    if evidence and evidence.strip():
        parts.append(f"Evidence: {evidence.strip()}")
    parts.append(SQL_FORMAT_BLOCK)
    if one_shot:
        parts.append(ONE_SHOT_EXAMPLE)
    return "\n\n".join(parts)


def validate_sql_row(row: dict) -> None:
    """Raise ValueError/TypeError naming the first problem of a training row."""
    require_fields(row, {"prompt": str, "label": dict})
    if not row["prompt"].strip():
        raise ValueError("field 'prompt' is empty")
    parse_label(row["label"])


def read_sql_rows(path: str | Path) -> list[dict]:
    """Read and validate training rows; DatasetError names ``file:line`` of the first bad row."""
    return read_jsonl(path, validate=validate_sql_row)


_INPUT_FIELDS = {
    "spider": {"db_id": str, "question": str, "query": str},
    "bird": {"db_id": str, "question": str, "SQL": str},
}


def convert_examples(
    examples: list[dict],
    fmt: str,
    db_root: str | Path,
    *,
    source: str = "<input>",
    mode: str = "auto",
    db_root_in_label: bool = False,
    one_shot: bool = False,
) -> list[dict]:
    """Spider/BIRD examples -> training rows (see the module docstring for the row schema).

    Raises DatasetError naming ``source`` and the item index for a malformed example or a missing database.
    """
    if fmt not in _INPUT_FIELDS:
        raise ValueError(f"format must be one of {sorted(_INPUT_FIELDS)}, got {fmt!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    db_root = Path(db_root).resolve()
    schemas: dict[str, list[str]] = {}
    rows = []
    for index, ex in enumerate(examples):
        where = f"{source}: item {index}"
        if not isinstance(ex, dict):
            raise DatasetError(f"{where}: expected an object, got {type(ex).__name__}")
        try:
            require_fields(ex, _INPUT_FIELDS[fmt])
        except ValueError as exc:
            raise DatasetError(f"{where}: {exc}") from None
        db_id = ex["db_id"]
        if db_id not in schemas:
            db_file = db_root / db_id / f"{db_id}.sqlite"
            if not db_file.is_file():
                raise DatasetError(f"{where}: database not found: {db_file}")
            schemas[db_id] = read_schema_ddl(db_file)
        gold = ex["query"] if fmt == "spider" else ex["SQL"]
        evidence = ex.get("evidence") if fmt == "bird" else None
        label: dict[str, Any] = {"db_id": db_id, "gold": gold.strip(), "mode": mode}
        if db_root_in_label:
            label["db_root"] = str(db_root)
        meta = {"source": fmt, "question": ex["question"]}
        if fmt == "bird":
            meta["difficulty"] = ex.get("difficulty", "")
        prompt = build_prompt(schemas[db_id], ex["question"], evidence, one_shot=one_shot)
        rows.append({"prompt": prompt, "label": label, "meta": meta})
    return rows


def load_json_list(path: str | Path) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DatasetError(f"{path}:{line}: invalid UTF-8 (byte {exc.start} of the file)") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise DatasetError(f"{path}: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of examples, got {type(data).__name__}")
    return data


def check_rows(rows: list[dict], source: str = "<rows>") -> list[str]:
    """Run every gold query; return one message per row whose gold fails or whose database is missing."""
    from tqdm import tqdm

    problems = []
    for index, row in enumerate(tqdm(rows, desc="checking gold SQL", unit="row", disable=len(rows) < 50)):
        reason = gold_failure(parse_label(row["label"]))
        if reason:
            problems.append(f"{source}: row {index + 1}: {reason}")
    return problems


def main(argv: list[str] | None = None, prog: str = "python -m mrtpo_openrlhf.cli.task sql") -> int:
    """The task's command line (``Task.command``): ``convert`` and ``check``."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="Spider/BIRD json -> training JSONL rows")
    conv.add_argument("--format", required=True, choices=sorted(_INPUT_FIELDS))
    conv.add_argument("--input", required=True, help="train.json / dev.json of the Spider or BIRD layout")
    conv.add_argument("--db-root", required=True, help="folder holding <db_id>/<db_id>.sqlite")
    conv.add_argument("--out", required=True)
    conv.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it exists (without it, an existing file stops the converter)",
    )
    conv.add_argument("--mode", default="auto", choices=MODES)
    conv.add_argument(
        "--db-root-in-label",
        action="store_true",
        help=f"write --db-root's absolute path into every label (the rows then work only where that path exists); "
        f"by default labels name the database by db_id and {DB_ROOT_ENV} gives the root at run time",
    )
    conv.add_argument("--no-db-root-in-label", action="store_true", help=argparse.SUPPRESS)  # the old default now
    conv.add_argument("--limit", type=int, default=0, help="convert only the first N examples (0 = all)")
    conv.add_argument("--check-gold", action="store_true", help="run every gold query and fail if one errors")
    conv.add_argument("--one-shot", action="store_true", help="append a worked example of the layout (small models)")
    chk = sub.add_parser("check", help="validate training rows and run their gold queries")
    chk.add_argument("--input", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "convert":
            refuse_same_file(args.input, args.out)
            refuse_existing(args.out, args.overwrite)
            examples = load_json_list(args.input)
            if args.limit > 0:
                examples = examples[: args.limit]
            rows = convert_examples(
                examples,
                args.format,
                args.db_root,
                source=args.input,
                mode=args.mode,
                db_root_in_label=args.db_root_in_label and not args.no_db_root_in_label,
                one_shot=args.one_shot,
            )
            # the gold queries run on --db-root's databases, whatever MRTPO_SQL_DB_ROOT says here
            rooted = [dict(r, label=dict(r["label"], db_root=str(Path(args.db_root).resolve()))) for r in rows]
            problems = check_rows(rooted, args.input) if args.check_gold else []
            if problems:
                print("\n".join(problems), file=sys.stderr)
                return 1
            n = write_jsonl(args.out, rows)
            print(f"wrote {n} rows to {args.out}")
            if not (args.db_root_in_label and not args.no_db_root_in_label):
                root = Path(args.db_root).resolve()
                print(f"their databases resolve under {DB_ROOT_ENV} at run time: export {DB_ROOT_ENV}={root}")
        else:
            rows = read_sql_rows(args.input)
            problems = check_rows(rows, args.input)
            print("\n".join(problems) if problems else f"{len(rows)} rows OK")
            return 1 if problems else 0
    except (DatasetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
