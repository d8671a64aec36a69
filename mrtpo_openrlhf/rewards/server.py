"""HTTP reward server speaking OpenRLHF's remote reward protocol.

``python -m mrtpo_openrlhf.rewards.server serve --task tool --host 127.0.0.1 --port 5000``

Request (POST ``/get_reward`` or ``/``; what ``openrlhf/utils/agent.py`` sends)::

    {"query": [str, ...], "prompts": [str, ...], "labels": [any, ...]}

Response (200): ``{"rewards": [float]*B, "scores": [float]*B, "extra_logs": {...}}``: exactly the
task's ``reward_func`` output with tensors turned into lists. OpenRLHF sends one response per
request (B=1): then extra_logs holds that response's MRTPO keys as in-process; for B>1 every
extra_logs key holds a list of B per-response values.
Errors: 400 malformed JSON or fields, 404 unknown path, 405 wrong method, 411 no length,
413 body over ``--max-request-bytes``. ``GET /health`` answers ``{"status": "ok", "task": ...}``.
Verifier failures never reach HTTP: ``reward_func`` turns them into zero rewards with a reason.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from mrtpo_openrlhf.rewards.registry import TASKS, get_reward_func

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
REWARD_PATHS = ("/get_reward", "/")


def to_jsonable(obj: Any) -> Any:
    """Tensors and numpy arrays -> (nested) lists, recursively through dicts/lists/tuples."""
    if hasattr(obj, "tolist") and callable(obj.tolist):
        return obj.tolist()
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def validate_request(payload: Any) -> tuple[list, list, list]:
    """Check the OpenRLHF request body; raise ValueError with a message for the client."""
    if not isinstance(payload, dict):
        raise ValueError("body must be a JSON object")
    missing = [k for k in ("query", "prompts", "labels") if k not in payload]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    queries, prompts, labels = payload["query"], payload["prompts"], payload["labels"]
    if not all(isinstance(x, list) for x in (queries, prompts, labels)):
        raise ValueError("'query', 'prompts' and 'labels' must be lists")
    if not len(queries) == len(prompts) == len(labels):
        raise ValueError(f"list lengths differ: query={len(queries)} prompts={len(prompts)} labels={len(labels)}")
    if not all(isinstance(q, str) for q in queries) or not all(isinstance(p, str) for p in prompts):
        raise ValueError("'query' and 'prompts' must hold strings")
    return queries, prompts, labels


def score_batch(reward_func: Callable[..., dict], queries: list, prompts: list, labels: list) -> dict:
    """Run the task's ``reward_func`` on the whole request and make its output JSON-ready.

    The answer is exactly the in-process contract (``make_reward_func``): for one response the
    extra_logs values are that response's values; for B != 1 each key holds a list of B entries.
    """
    out = to_jsonable(reward_func(queries, prompts, labels))
    rewards = out.get("rewards")
    if not isinstance(rewards, list) or len(rewards) != len(queries):
        raise ValueError(f"reward_func returned {len(rewards) if isinstance(rewards, list) else rewards!r} "
                         f"rewards for {len(queries)} responses")
    out.setdefault("scores", rewards)
    out.setdefault("extra_logs", {})
    return out


class RewardHandler(BaseHTTPRequestHandler):
    """One request; the server object carries ``task``, ``reward_func`` and ``max_request_bytes``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # route to logging, not stderr
        logger.debug("%s - %s", self.address_string(), fmt % args)

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self.close_connection = True  # the unread body (if any) must not be taken as a next request
        self._send(status, {"error": message})

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path == "/health":
            self._send(200, {"status": "ok", "task": self.server.task})
        elif self.path in REWARD_PATHS:
            self._error(405, "use POST")
        else:
            self._error(404, f"unknown path {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path not in REWARD_PATHS:
            self._error(404, f"unknown path {self.path}")
            return
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            self._error(411, "Content-Length required")
            return
        try:
            length = int(length_header)
        except ValueError:
            self._error(400, "bad Content-Length")
            return
        if length < 0:
            self._error(400, "bad Content-Length")
            return
        if length > self.server.max_request_bytes:
            self._error(413, f"body of {length} bytes exceeds the limit of {self.server.max_request_bytes}")
            return
        raw = self.rfile.read(length)
        try:
            payload = json.loads(raw.decode("utf-8"))
            queries, prompts, labels = validate_request(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._error(400, f"malformed JSON: {exc}")
            return
        except ValueError as exc:
            self._error(400, str(exc))
            return
        try:
            result = score_batch(self.server.reward_func, queries, prompts, labels)
        except Exception as exc:  # noqa: BLE001 - the server must answer, whatever the verifier did
            logger.exception("reward scoring failed")
            self._error(500, f"scoring failed: {type(exc).__name__}: {exc}")
            return
        self._send(200, result)


class RewardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], task: str, reward_func: Callable[..., dict] | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES):
        self.task = task
        self.reward_func = reward_func if reward_func is not None else get_reward_func(task)
        self.max_request_bytes = int(max_request_bytes)
        super().__init__(address, RewardHandler)


def start_in_thread(task: str, host: str = "127.0.0.1", port: int = 0,
                    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> tuple[RewardServer, threading.Thread]:
    """Start a server in a daemon thread (port 0 = ephemeral); stop it with ``server.shutdown()``."""
    server = RewardServer((host, port), task, max_request_bytes=max_request_bytes)
    thread = threading.Thread(target=server.serve_forever, name=f"reward-server-{task}", daemon=True)
    thread.start()
    return server, thread


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.rewards.server")
    sub = parser.add_subparsers(dest="cmd", required=True)
    serve = sub.add_parser("serve", help="serve one task's reward_func over HTTP")
    serve.add_argument("--task", required=True, choices=sorted(TASKS))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=5000)
    serve.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    server = RewardServer((args.host, args.port), args.task, max_request_bytes=args.max_request_bytes)
    host, port = server.server_address[:2]
    print(f"serving task {args.task!r} on http://{host}:{port}/get_reward", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
