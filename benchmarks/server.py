"""Reward server: requests/s and p99 latency of the old ``http.server`` implementation against this one, side by side.

Usage: ``python benchmarks/server.py [--tasks tool,sql] [--seconds 3] [--clients 1,8,32] [--idle 50] [--workers N]
[--baseline REV]``

The old server is read from git (``git show REV:mrtpo_openrlhf/rewards/server.py``, default ``BASELINE_REV``, the
last commit that had it) into a temporary folder and run from there; nothing of it is kept. Both servers run as
their own ``serve`` process on 127.0.0.1 with their default limits (the new one with ``--workers``), so the load
generator (asyncio, one keep-alive connection per client, requests back to back) never shares a GIL with them.
Requests are the task's bundled mini training set with its example responses, one response per request (what
OpenRLHF sends). For each scenario the two servers run one after the other, so both see the same machine load.
The idle scenario opens ``--idle`` connections that send nothing, then one client; "1st answer" is how long its
first request waited for an answer (the old server's handler slots are held by the idle ones until its 10 s read
timeout). Each client count runs twice: a new connection per request (what OpenRLHF's client does: a new aiohttp
session per call) and one keep-alive connection per client. Latencies include the client's own time; a 503 or a
dropped connection is counted and the request sent again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mrtpo_openrlhf.tasks import TASKS, get_task

REPO = Path(__file__).resolve().parents[1]
BASELINE_REV = "fc7a277a5e417489afbec0e363dbf6b6265c1b2f"  # the last commit whose server ran on http.server
SERVER_PATH = "mrtpo_openrlhf/rewards/server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_baseline(rev: str, folder: Path) -> Path:
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:{SERVER_PATH}"], check=True, capture_output=True, text=True
    ).stdout
    path = folder / "http_server_baseline.py"
    path.write_text(source, encoding="utf-8")
    return path


def start_server(cmd: list[str], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                json.load(r)
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"server did not start: {' '.join(cmd)}; see {log}") from None
            time.sleep(0.3)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def request_bytes(task: str) -> list[bytes]:
    """One HTTP request per (row, example response) of the task's mini training set."""
    entry = get_task(task)
    make_responses = entry.function("example_responses") or (lambda _row: [""])
    rows = [json.loads(line) for line in entry.train_data_path().open(encoding="utf-8") if line.strip()]
    out = []
    for row in rows:
        for response in make_responses(row):
            body = json.dumps(
                {"query": [row["prompt"] + response], "prompts": [row["prompt"]], "labels": [row["label"]]}
            ).encode()
            head = (
                "POST /get_reward HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            out.append(head.encode() + body)
    return out


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, connection closes) of one response; its body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection", "").lower() == "close"


async def client(port: int, reqs: list[bytes], offset: int, stop: float, keep_alive: bool, out: dict[str, Any]) -> None:
    conn = None
    i = offset
    first = True
    while time.perf_counter() < stop or first:
        start = time.perf_counter()
        answered = False
        while not answered:  # a 503 or a dropped connection: reconnect and send again, as a client would
            try:
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port)
                conn[1].write(reqs[i % len(reqs)])
                status, close = await read_response(conn[0])
            except (OSError, asyncio.IncompleteReadError):
                status, close = 0, True
            if (close or not keep_alive) and conn is not None:
                conn[1].close()
                conn = None
            answered = status == 200
            if not answered:
                out["errors"] += 1
                await asyncio.sleep(0.01)
        latency = time.perf_counter() - start
        out["latencies"].append(latency)
        if first:
            out["first"].append(latency)
            first = False
        i += 1
    if conn is not None:
        conn[1].close()


async def run_load(
    port: int, reqs: list[bytes], clients: int, idle: int, keep_alive: bool, seconds: float
) -> dict[str, Any]:
    idle_conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(idle)]
    out: dict[str, Any] = {"latencies": [], "first": [], "errors": 0}
    start = time.perf_counter()
    await asyncio.gather(*(client(port, reqs, k * 7, start + seconds, keep_alive, out) for k in range(clients)))
    elapsed = time.perf_counter() - start
    for _, writer in idle_conns:
        writer.close()
    lat = sorted(out["latencies"])
    return {
        "rps": len(lat) / elapsed,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "first_s": max(out["first"]),
        "requests": len(lat),
        "errors": out["errors"],
    }


def num(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"


def cpu_line() -> str:
    import torch

    model = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln),
        platform.processor() or "unknown CPU",
    )
    return f"{model}, {os.cpu_count()} cores, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="tool,sql", help="tasks to serve, comma-separated")
    parser.add_argument("--seconds", type=float, default=3.0, help="load time per scenario and server")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients, comma-separated")
    parser.add_argument("--idle", type=int, default=50, help="idle connections of the last scenario (0: none)")
    parser.add_argument("--workers", type=int, default=None, help="the new server's --workers (default: its own)")
    parser.add_argument("--baseline", default=BASELINE_REV, help="git revision of the old server")
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        parser.error(f"--tasks: unknown {unknown}; choose from {sorted(TASKS)}")
    clients = [int(c) for c in args.clients.split(",") if c]
    # OpenRLHF opens a connection per request (a new aiohttp session per call); keep-alive clients reuse one
    scenarios = [(c, 0, False) for c in clients] + [(c, 0, True) for c in clients]
    scenarios += [(1, args.idle, False)] if args.idle else []

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        baseline = write_baseline(args.baseline, folder)
        for task in tasks:
            reqs = request_bytes(task)
            ports = {"old": free_port(), "new": free_port()}
            new_cmd = [sys.executable, "-m", "mrtpo_openrlhf.rewards.server", "serve", "--task", task]
            if args.workers is not None:
                new_cmd += ["--workers", str(args.workers)]
            cmds = {
                "old": [sys.executable, str(baseline), "serve", "--task", task, "--port", str(ports["old"])],
                "new": new_cmd + ["--port", str(ports["new"])],
            }
            procs = {}
            try:
                for name in ("old", "new"):
                    procs[name] = start_server(cmds[name], ports[name], folder / f"{name}-{task}.log")
                    asyncio.run(run_load(ports[name], reqs, 2, 0, True, 1.0))  # warm-up: first calls load modules
                for n_clients, idle, keep_alive in scenarios:
                    result = {
                        name: asyncio.run(run_load(ports[name], reqs, n_clients, idle, keep_alive, args.seconds))
                        for name in ("old", "new")
                    }
                    rows.append((task, n_clients, idle, keep_alive, result))
                    print(f"{task} clients={n_clients} idle={idle} keep_alive={keep_alive}: {json.dumps(result)}")
            finally:
                for proc in procs.values():
                    stop_server(proc)

    print(f"\nCPU: {cpu_line()}; load average {os.getloadavg()[0]:.1f} at the end; {args.seconds:g} s per cell")
    print("old: http.server at " + args.baseline[:7] + "; new: uvicorn + verifier processes (this checkout)\n")
    print(
        "| task | connection | clients | idle | req/s old | req/s new | new/old | p99 ms old | p99 ms new "
        "| 1st answer s old | 1st answer s new |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for task, n_clients, idle, keep_alive, r in rows:
        o, n = r["old"], r["new"]
        connection = "keep-alive" if keep_alive else "per request"
        print(
            f"| {task} | {connection} | {n_clients} | {idle} | {num(o['rps'])} | {num(n['rps'])} "
            f"| {num(n['rps'] / o['rps'])} | {o['p99_ms']:.1f} | {n['p99_ms']:.1f} | {o['first_s']:.2f} "
            f"| {n['first_s']:.2f} |"
        )
    errors = sum(r[name]["errors"] for *_, r in rows for name in ("old", "new"))
    if errors:
        print(f"\n{errors} request(s) answered other than 200 (503 or a dropped connection) and were retried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
