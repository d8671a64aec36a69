"""HTTP reward server speaking OpenRLHF's remote reward protocol.

``python -m mrtpo_openrlhf.rewards.server serve --task tool --host 127.0.0.1 --port 5000``

Request (POST ``/get_reward`` or ``/``; what ``openrlhf/utils/agent.py`` sends)::

    {"query": [str, ...], "prompts": [str, ...], "labels": [any, ...]}

Response (200): ``{"rewards": [float]*B, "scores": [float]*B, "extra_logs": {...}}``: exactly the
task's ``reward_func`` output with tensors turned into lists. OpenRLHF sends one response per
request (B=1): then extra_logs holds that response's MRTPO keys as in-process; for B>1 every
extra_logs key holds a list of B per-response values.
Errors: 400 malformed JSON or fields (also JSON nested deeper than ``MAX_JSON_DEPTH``), 404 unknown path,
405 wrong method, 411 no length, 413 body over ``--max-request-bytes``, 503 when every handler slot stayed busy
for ``--read-timeout-s``. ``GET /health`` answers ``{"status": "ok", "task": ...}``.
Verifier failures never reach HTTP: ``reward_func`` turns them into zero rewards with a reason.

Stalled clients: a connection must deliver each whole request (request line, headers and body) within
``--read-timeout-s`` (default 10 s) of the server starting to wait for it, idle keep-alive time included; past
that the server closes it. At most ``--max-handlers`` connections (default 32) are served at once; further
connections wait in the listen queue for a free slot.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from mrtpo_openrlhf.tasks import TASKS, get_reward_func, warm_up

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_MAX_HANDLERS = 32
MAX_JSON_DEPTH = 64  # far above any real label; deeper bodies are rejected before they reach a verifier
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


def json_depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests lists/dicts more than ``limit`` levels deep (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


def validate_request(payload: Any) -> tuple[list, list, list]:
    """Check the OpenRLHF request body; raise ValueError with a message for the client."""
    if not isinstance(payload, dict):
        raise ValueError("body must be a JSON object")
    if json_depth_exceeds(payload, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
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
        raise ValueError(
            f"reward_func returned {len(rewards) if isinstance(rewards, list) else rewards!r} "
            f"rewards for {len(queries)} responses"
        )
    out.setdefault("scores", rewards)
    out.setdefault("extra_logs", {})
    return out


class RewardHandler(BaseHTTPRequestHandler):
    """One request; the server object carries ``task``, ``reward_func`` and ``max_request_bytes``."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s  # per socket read; the watchdog bounds the whole request
        super().setup()

    def handle_one_request(self) -> None:
        # A watchdog closes the socket if the request has not fully arrived in time (slow or silent clients).
        self._watchdog = threading.Timer(self.server.read_timeout_s, self._abort_slow_request)
        self._watchdog.daemon = True
        self._watchdog.start()
        try:
            super().handle_one_request()
        finally:
            self._request_read()

    def _request_read(self) -> None:
        self._watchdog.cancel()

    def _abort_slow_request(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

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
        self._request_read()
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
        try:
            raw = self.rfile.read(length)
        except OSError:  # read timeout or the watchdog closed the socket
            self.close_connection = True
            return
        if len(raw) < length:  # the client gave up or was cut off: nothing to answer
            self.close_connection = True
            return
        self._request_read()
        try:
            payload = json.loads(raw.decode("utf-8"))
            queries, prompts, labels = validate_request(payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._error(400, f"malformed JSON: {exc}")
            return
        except RecursionError:
            self._error(400, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
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
    """Thread per connection, at most ``max_handlers`` at once; see the module docstring for the timeouts."""

    daemon_threads = True
    request_queue_size = 128  # connections waiting for a handler slot queue here

    def __init__(
        self,
        address: tuple[str, int],
        task: str,
        reward_func: Callable[..., dict] | None = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        max_handlers: int = DEFAULT_MAX_HANDLERS,
    ):
        if read_timeout_s <= 0 or max_handlers < 1:
            raise ValueError(f"read_timeout_s must be > 0 and max_handlers >= 1, got {read_timeout_s}, {max_handlers}")
        self.task = task
        self.reward_func = reward_func if reward_func is not None else get_reward_func(task)
        self.max_request_bytes = int(max_request_bytes)
        self.read_timeout_s = float(read_timeout_s)
        self.max_handlers = int(max_handlers)
        self._slots = threading.BoundedSemaphore(self.max_handlers)
        self._count_lock = threading.Lock()
        self.active_handlers = 0
        self.peak_handlers = 0  # most connections ever served at once (tests and monitoring)
        super().__init__(address, RewardHandler)

    def process_request(self, request, client_address) -> None:
        # Runs in the accept loop: waiting here leaves further clients in the listen queue, not in threads.
        if not self._slots.acquire(timeout=self.read_timeout_s):
            self._refuse_busy(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        with self._count_lock:
            self.active_handlers += 1
            self.peak_handlers = max(self.peak_handlers, self.active_handlers)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count_lock:
                self.active_handlers -= 1
            self._slots.release()

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # a client that vanished or was cut off for being too slow
            logger.debug("connection from %s closed: %s", client_address, sys.exc_info()[1])
            return
        super().handle_error(request, client_address)

    def _refuse_busy(self, request) -> None:
        body = json.dumps({"error": "server busy: every handler slot is taken"}).encode("utf-8")
        head = (
            f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
        try:
            request.settimeout(1.0)
            request.sendall(head + body)
        except OSError:
            pass
        self.shutdown_request(request)


def start_in_thread(
    task: str,
    host: str = "127.0.0.1",
    port: int = 0,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    max_handlers: int = DEFAULT_MAX_HANDLERS,
) -> tuple[RewardServer, threading.Thread]:
    """Start a server in a daemon thread (port 0 = ephemeral); stop it with ``server.shutdown()``."""
    server = RewardServer(
        (host, port),
        task,
        max_request_bytes=max_request_bytes,
        read_timeout_s=read_timeout_s,
        max_handlers=max_handlers,
    )
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
    serve.add_argument(
        "--read-timeout-s",
        type=float,
        default=DEFAULT_READ_TIMEOUT_S,
        help="a request must arrive within this time (idle keep-alive included)",
    )
    serve.add_argument(
        "--max-handlers",
        type=int,
        default=DEFAULT_MAX_HANDLERS,
        help="connections served at once; more wait in the listen queue",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    warm_up(args.task)  # one-time model loads now, not inside the first rollout's call
    server = RewardServer(
        (args.host, args.port),
        args.task,
        max_request_bytes=args.max_request_bytes,
        read_timeout_s=args.read_timeout_s,
        max_handlers=args.max_handlers,
    )
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
