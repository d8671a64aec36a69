"""SQL rewards under rollout load: how many valid queries lose their reward when 32 are scored at once.

In training, upstream's ``SingleTurnExecutor`` scores each finished response inside the vLLM engine process with
``asyncio.to_thread(reward_func, ...)``: up to 32 calls at once (the default executor on a node with >= 28
cores), beside the engine's output loop, which holds the GIL most of the time. This replays that: every response
is a query that earns all three SQL rewards when scored alone (the bundled fixtures' gold queries, and a
"heavy" valid query that sorts ~40 MiB, as a big BIRD table's ORDER BY / GROUP BY does), scored by
``mrtpo_openrlhf.tasks.sql.reward.score_sql`` through ``asyncio.to_thread`` with 32 workers, with and without a
busy thread that holds the GIL (a pure-Python loop), and counts the responses that lose ``executable`` or
``execution``, with the reasons.

    python benchmarks/sql_under_load.py                      # the sandbox the reward is configured with
    python benchmarks/sql_under_load.py --workers 0 4        # in-process (0) vs a pool of 4 worker processes
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from mrtpo_openrlhf.tasks.sql import reward as sql_reward
from mrtpo_openrlhf.tasks.sql.verifier import pool, sandbox

FIXTURES = sql_reward.FIXTURE_DIR
# Valid, and alone well inside the limits (~40 MiB of sorter memory, ~0.1 s): 10,000 rows of 4 KB sorted.
HEAVY_SQL = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000) "
    "SELECT count(*), length(max(h)) FROM (SELECT x, hex(zeroblob(2000)) || x AS h FROM c ORDER BY h)"
)


def _response(sql: str) -> str:
    return f"<think>Select what the question asks.</think>\n```sql\n{sql}\n```"


def load_cases(heavy_every: int) -> list[tuple[str, str, dict, str]]:
    """(query, prompt, label, kind) for every bundled row whose gold earns all three rewards alone."""
    cases = []
    for name in ("train_mini.jsonl", "dev_mini.jsonl"):
        for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                cases.append((row["prompt"] + _response(row["label"]["gold"]), row["prompt"], row["label"], "fixture"))
    if heavy_every:
        label = {"db_id": "school", "gold": HEAVY_SQL, "mode": "bird"}
        heavy = [(_response(HEAVY_SQL), "", label, "heavy")]
        mixed = []
        for i, case in enumerate(cases):
            mixed.append(case)
            if i % heavy_every == heavy_every - 1:
                mixed += heavy
        cases = mixed
    return cases


def lost(vec) -> str:
    """ "" when the response kept executable and execution, else the reason one was lost."""
    items = {it.name: it for it in vec.items}
    for name in ("executable", "execution"):
        if items[name].value != 1.0:
            return items[name].reason
    return ""


def _busy(stop: threading.Event, counter: list[int]) -> None:
    n = 0
    while not stop.is_set():  # pure Python: holds the GIL except at the interpreter's switch interval
        for _ in range(10_000):
            n += 1
    counter[0] = n


async def _score_all(cases, concurrency: int):
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=concurrency))
    return await asyncio.gather(
        *(asyncio.to_thread(sql_reward.score_sql, query, prompt, label) for query, prompt, label, _ in cases)
    )


def measure(cases, concurrency: int, busy: bool, rounds: int) -> dict:
    stop, counter = threading.Event(), [0]
    thread = threading.Thread(target=_busy, args=(stop, counter), daemon=True) if busy else None
    if thread:
        thread.start()
    reasons: collections.Counter = collections.Counter()
    lost_by_kind: collections.Counter = collections.Counter()
    total = collections.Counter()
    start = time.perf_counter()
    try:
        for _ in range(rounds):
            if concurrency == 1:
                vecs = [sql_reward.score_sql(q, p, lab) for q, p, lab, _ in cases]
            else:
                vecs = asyncio.run(_score_all(cases, concurrency))
            for (_, _, _, kind), vec in zip(cases, vecs):
                total[kind] += 1
                why = lost(vec)
                if why:
                    lost_by_kind[kind] += 1
                    reasons[why.split(" (")[0][:70]] += 1
    finally:
        stop.set()
        if thread:
            thread.join()
    return {
        "seconds": time.perf_counter() - start,
        "total": dict(total),
        "lost": dict(lost_by_kind),
        "reasons": reasons.most_common(4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3, help="times every case is scored per setting")
    ap.add_argument("--copies", type=int, default=4, help="copies of the case list per round")
    ap.add_argument("--heavy-every", type=int, default=4, help="one heavy valid query after every N fixture rows")
    ap.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=None,
        help=f"SQL worker processes ({pool.WORKERS_ENV}): 0 runs queries in the calling thread",
    )
    args = ap.parse_args(argv)
    cases = load_cases(args.heavy_every) * args.copies
    pool.set_workers(0)
    alone = measure(cases, 1, False, 1)
    if alone["lost"]:
        print(f"warning: {alone['lost']} cases lost their reward even alone (a loaded machine?): {alone['reasons']}")
    print(
        f"CPU: {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores; {len(cases)} valid responses "
        f"per round ({sum(k == 'heavy' for *_, k in cases)} heavy), {args.rounds} rounds, "
        f"pred limits {sql_reward.pred_limits_from_env()}, memory bound {sandbox.DEFAULT_MAX_MEMORY_BYTES >> 20} MiB"
    )
    print(f"{'workers':>7} {'setting':<34} {'lost fixture':>13} {'lost heavy':>11} {'s':>6}  reasons")
    for workers in args.workers or [pool.configured_workers()]:
        pool.set_workers(workers)
        settings = [("alone (1 at a time)", 1, False), (f"{args.concurrency} at once", args.concurrency, False)]
        settings.append((f"{args.concurrency} at once + busy GIL thread", args.concurrency, True))
        for title, conc, busy in settings:
            r = measure(cases, conc, busy, args.rounds)
            frac = {k: f"{r['lost'].get(k, 0)}/{n}" for k, n in r["total"].items()}
            print(
                f"{workers:>7} {title:<34} {frac.get('fixture', '-'):>13} {frac.get('heavy', '-'):>11} "
                f"{r['seconds']:>6.1f}  {r['reasons']}",
                flush=True,
            )
    pool.set_workers(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
