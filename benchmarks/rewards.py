"""Reward-function throughput per task family, and how fast the SQL sandbox stops runaway queries.

Usage: ``python benchmarks/rewards.py [--seconds 2] [--families tool,sql,instruction]``

For each family (a registered task, ``mrtpo_openrlhf/tasks/__init__.py``) its bundled mini set (rows with ``prompt`` and
``label``) is scored one response per call, the way OpenRLHF calls ``reward_func``, with a correct-ish
and a wrong response per row where the family allows building one. A family whose module or fixture is
missing is reported as skipped, with the reason. The runaway part runs an infinite ``WITH RECURSIVE``
and a four-way cross join through the sandbox and through the SQL reward at the default limits.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mrtpo_openrlhf.tasks import TASKS, get_task

REPO = Path(__file__).resolve().parents[1]


def bench_family(name: str, seconds: float) -> dict[str, Any]:
    task = get_task(name)
    try:
        reward_func = task.reward_func()
        make_responses = task.function("example_responses") or (lambda _row: [""])
    except Exception as exc:  # noqa: BLE001 - a missing or broken family is reported, not fatal
        return {"family": name, "skipped": f"cannot import {task.reward_module}: {type(exc).__name__}: {exc}"}
    fixture = task.train_data_path()
    if not fixture.is_file():
        return {"family": name, "skipped": f"no mini fixture {fixture}"}
    rows = [json.loads(line) for line in fixture.open(encoding="utf-8") if line.strip()]
    cases = [(row["prompt"] + resp, row["prompt"], row["label"]) for row in rows for resp in make_responses(row)]
    for query, prompt, label in cases[:2]:  # warm-up: imports, gold caches
        reward_func([query], [prompt], [label])
    done, total_reward, start = 0, 0.0, time.perf_counter()
    while True:
        for query, prompt, label in cases:
            out = reward_func([query], [prompt], [label])
            total_reward += float(out["rewards"][0])
            done += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    shown = fixture.relative_to(REPO) if fixture.is_relative_to(REPO) else fixture
    return {
        "family": name,
        "fixture": str(shown),
        "rows": len(rows),
        "responses": done,
        "per_s": done / elapsed,
        "ms": 1000 * elapsed / done,
        "mean_total_reward": total_reward / done,
    }


# ----------------------------------------------------------------------------- runaway SQL
RUNAWAY_QUERIES = {
    "recursive CTE (infinite)": (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    ),
    "cross join t^4 (1.6e13 rows)": "SELECT count(*) FROM t AS a, t AS b, t AS c, t AS d",
}


def _make_db(folder: Path) -> Path:
    path = folder / "bench.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(2000)])
    return path


def bench_runaway() -> list[dict[str, Any]]:
    try:
        sandbox = importlib.import_module("mrtpo_openrlhf.tasks.sql.verifier")
        sql_reward = importlib.import_module("mrtpo_openrlhf.tasks.sql.reward")
    except Exception as exc:  # noqa: BLE001
        return [{"query": "(all)", "skipped": f"SQL verifier missing: {type(exc).__name__}: {exc}"}]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        db = _make_db(Path(tmp))
        for title, sql in RUNAWAY_QUERIES.items():
            start = time.perf_counter()
            res = sandbox.execute_sql(db, sql)
            sandbox_s = time.perf_counter() - start
            label = {"db_path": str(db), "gold": "SELECT count(*) FROM t"}
            response = f"<think>count</think>\n```sql\n{sql}\n```"
            start = time.perf_counter()
            out = sql_reward.reward_func([response], [""], [label])
            reward_s = time.perf_counter() - start
            results.append(
                {
                    "query": title,
                    "limit_s": sandbox.DEFAULT_TIMEOUT_S,
                    "sandbox_s": sandbox_s,
                    "timed_out": bool(res.timed_out),
                    "error": res.error[:60],
                    "reward_s": reward_s,
                    "rewards": out["extra_logs"].get("mrtpo_reward_values"),
                }
            )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="scoring time per family")
    parser.add_argument("--families", default=",".join(TASKS))
    args = parser.parse_args(argv)
    wanted = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in wanted if f not in TASKS]
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {list(TASKS)}")

    print(f"{'family':<12} {'responses/s':>12} {'ms/resp':>9} {'n':>6} {'mean reward':>12}  fixture")
    for name in wanted:
        r = bench_family(name, args.seconds)
        if "skipped" in r:
            print(f"{name:<12} SKIPPED: {r['skipped']}")
        else:
            print(
                f"{name:<12} {r['per_s']:>12.1f} {r['ms']:>9.2f} {r['responses']:>6} "
                f"{r['mean_total_reward']:>12.2f}  {r['fixture']} ({r['rows']} rows)"
            )
    print()
    print(f"{'runaway SQL query':<30} {'limit s':>7} {'sandbox s':>9} {'timed out':>9} {'reward s':>8}  rewards")
    for r in bench_runaway():
        if "skipped" in r:
            print(f"{r['query']:<30} SKIPPED: {r['skipped']}")
        else:
            print(
                f"{r['query']:<30} {r['limit_s']:>7.2f} {r['sandbox_s']:>9.3f} {str(r['timed_out']):>9} "
                f"{r['reward_s']:>8.3f}  {r['rewards']}  {r['error']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
