"""HTTP reward server speaking OpenRLHF's remote reward protocol, on Starlette and uvicorn.

``python -m mrtpo_openrlhf.rewards.server serve --task tool --host 127.0.0.1 --port 5000 [--workers N]`` (the command
line is ``mrtpo_openrlhf.cli.reward_server``)

Request (POST ``/get_reward`` or ``/``; what ``openrlhf/utils/agent.py`` sends)::

    {"query": [str, ...], "prompts": [str, ...], "labels": [any, ...]}

Response (200): ``{"rewards": [float]*B, "scores": [float]*B, "extra_logs": {...}}``: exactly the
task's ``reward_func`` output with tensors turned into lists. OpenRLHF sends one response per
request (B=1): then extra_logs holds that response's MRTPO keys as in-process; for B>1 every
extra_logs key holds a list of B per-response values.
Errors (``{"error": "..."}``): 400 malformed JSON or fields (also JSON nested deeper than ``MAX_JSON_DEPTH``),
404 unknown path, 405 wrong method, 411 no length, 413 body over ``--max-request-bytes``, 500 when a verifier
worker died or a label cannot be scored on this server (a setup error: ``{"error": "reward setup error: ...",
"mrtpo_setup_error": ...}``), 503 when every handler slot stayed busy for ``--read-timeout-s``. ``GET /health`` answers
``{"status": "ok", "task": ...}``. Verifier failures never reach HTTP: ``reward_func`` turns them into zero
rewards with a reason, and the server logs a warning for each response scored without its label.

Verifier calls run in ``--workers`` processes (default: one per usable core), so they use every core; the event
loop only reads, routes and writes. Each worker imports the task's reward module and makes its warm-up call once.

Stalled clients: a connection must deliver each whole request (request line, headers and body) within
``--read-timeout-s`` (default 10 s) of the server starting to wait for it, idle keep-alive time included; past
that the server closes it. At most ``--max-handlers`` connections (default 256) are served at once; further
connections wait, not reading, for a free slot, and get 503 if none frees within the read timeout.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from mrtpo_openrlhf.rewards.contract import BAD_LABEL, REASONS_KEY, SETUP_ERROR_KEY, VERIFIER_ERROR
from mrtpo_openrlhf.tasks import TASKS, Task, get_task, register, warm_up

logger = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1 << 20
DEFAULT_READ_TIMEOUT_S = 10.0
DEFAULT_MAX_HANDLERS = 256  # idle connections cost a socket, not a thread: 50 idle clients leave room for work
WAITING_CONNECTIONS = 128  # connections waiting for a handler slot; more are refused (503) at once
MAX_JSON_DEPTH = 64  # far above any real label; deeper bodies are rejected before they reach a verifier
# a label this server cannot score where it runs (``contract.SetupError``: e.g. its SQL database is not here):
# no client can fix that per response, and a 200 with zeros is what a plain client trains on
SETUP_ERROR_STATUS = 500
REWARD_PATHS = ("/get_reward", "/")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
WORKER_START_S = 600.0  # a worker's imports and warm-up call, on a loaded machine


def default_workers() -> int:
    """One verifier process per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


def label_problems(result: dict, n_responses: int) -> list[str]:
    """One line per response scored without its label (a bad label, or a verifier that raised on it)."""
    reasons = result.get("extra_logs", {}).get(REASONS_KEY)
    if not isinstance(reasons, list) or not reasons:
        return []
    per_response = [reasons] if n_responses == 1 else reasons  # B=1 answers carry the flat in-process dict
    problems = []
    for i, response_reasons in enumerate(per_response):
        for reason in response_reasons if isinstance(response_reasons, list) else ():
            if isinstance(reason, str) and reason.startswith((BAD_LABEL, VERIFIER_ERROR)):
                problems.append(f"response {i + 1} of {n_responses}: {reason}")
                break
    return problems


def answer_body(reward_func: Callable[..., dict], raw: bytes) -> tuple[int, dict, list[str]]:
    """A request body -> (HTTP status, JSON answer, label problems). Runs in a verifier worker."""
    try:
        payload = json.loads(raw.decode("utf-8"))
        queries, prompts, labels = validate_request(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return 400, {"error": f"malformed JSON: {exc}"}, []
    except RecursionError:
        return 400, {"error": f"JSON nested deeper than {MAX_JSON_DEPTH} levels"}, []
    except ValueError as exc:
        return 400, {"error": str(exc)}, []
    try:
        result = score_batch(reward_func, queries, prompts, labels)
    except Exception as exc:  # noqa: BLE001 - the server must answer, whatever the verifier did
        logger.exception("reward scoring failed")
        return 500, {"error": f"scoring failed: {type(exc).__name__}: {exc}"}, []
    setup_error = result["extra_logs"].get(SETUP_ERROR_KEY)
    if setup_error:
        # zeros a plain OpenRLHF or verl client would train on: the server cannot score here, whatever the response
        message = setup_error[0] if isinstance(setup_error, list) else str(setup_error)
        logger.error("cannot score on this server: %s", message)
        return SETUP_ERROR_STATUS, {"error": f"reward setup error: {message}", SETUP_ERROR_KEY: message}, []
    return 200, result, label_problems(result, len(queries))


# ----------------------------------------------------------------------------- verifier worker processes
_worker_reward_func: Callable[..., dict] | None = None
_worker_barrier: Any = None


def _init_worker(task: Task, log_level: int, barrier: Any) -> None:
    """Worker start: the server's log level, the task (registered here too when the parent registered it at
    run time), its warm-up call; Ctrl-C goes to the server, which stops its workers."""
    global _worker_reward_func, _worker_barrier
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=LOG_FORMAT)
    parent = multiprocessing.parent_process()
    if parent is not None:  # a server killed with SIGKILL must not leave its workers behind
        threading.Thread(target=_exit_with_parent, args=(parent.sentinel,), daemon=True).start()
    if task.name not in TASKS:
        register(task)
    _worker_reward_func = task.reward_func()
    warm_up(task.name)
    import torch  # noqa: F401 - reward_func returns tensors: load torch now, not in the first request

    _worker_barrier = barrier


def _exit_with_parent(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def _worker_ready() -> int:
    # every worker holds one of these calls at once: so each ran its warm-up, and the pids are all of them
    _worker_barrier.wait(timeout=WORKER_START_S)
    return os.getpid()


def _answer_in_worker(raw: bytes) -> tuple[int, bytes, list[str]]:
    status, payload, problems = answer_body(_worker_reward_func, raw)
    return status, json.dumps(payload).encode("utf-8"), problems


class VerifierPool:
    """``workers`` processes that answer request bodies; a pool that lost a worker is replaced."""

    def __init__(self, task: Task, workers: int):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.task = task
        self.workers = workers
        self.pids: list[int] = []
        self._executor = self._start()
        self._restarting: asyncio.Task | None = None

    def _start(self) -> ProcessPoolExecutor:
        # spawn, not fork: the server process runs an event loop and threads that a fork would copy mid-state
        context = multiprocessing.get_context("spawn")
        executor = ProcessPoolExecutor(
            self.workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(self.task, logging.getLogger().getEffectiveLevel(), context.Barrier(self.workers)),
        )
        try:
            futures = [executor.submit(_worker_ready) for _ in range(self.workers)]  # each submit spawns a worker
            self.pids = sorted(f.result() for f in futures)
            logger.info("%d verifier workers ready (pids %s)", self.workers, " ".join(map(str, self.pids)))
        except BrokenProcessPool:
            executor.shutdown(wait=False, cancel_futures=True)
            raise RuntimeError(
                f"the verifier workers of task {self.task.name!r} did not start (their error is printed above; "
                "a script that starts the server itself must do so under `if __name__ == '__main__':`)"
            ) from None
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        return executor

    async def answer(self, raw: bytes) -> tuple[int, bytes, list[str]]:
        if self._restarting is not None:
            await asyncio.shield(self._restarting)
        executor = self._executor
        try:
            return await asyncio.get_running_loop().run_in_executor(executor, _answer_in_worker, raw)
        except BrokenProcessPool as exc:
            logger.error("a verifier worker died (%s); starting %d new workers", exc, self.workers)
            if self._executor is executor and self._restarting is None:
                self._restarting = asyncio.ensure_future(self._restart(executor))
            return 500, _error_body("scoring failed: a verifier worker died; the server restarts its workers"), []
        except RuntimeError as exc:  # submitted while shutting down
            return 503, _error_body(f"server shutting down: {exc}"), []

    async def _restart(self, broken: ProcessPoolExecutor) -> None:
        broken.shutdown(wait=False, cancel_futures=True)
        try:
            self._executor = await asyncio.to_thread(self._start)
        except Exception:  # noqa: BLE001 - the next request retries
            logger.exception("could not restart the verifier workers")
        finally:
            self._restarting = None

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode("utf-8")


# ----------------------------------------------------------------------------- connections: slots and deadline
class HandlerSlots:
    """At most ``limit`` connections are served at once; the others wait, not reading, in arrival order."""

    def __init__(self, limit: int, wait_s: float, max_waiting: int = WAITING_CONNECTIONS):
        self.limit = limit
        self.wait_s = wait_s
        self.max_waiting = max_waiting
        self.active = 0
        self.peak = 0  # most connections ever served at once (tests and monitoring)
        self.waiting: collections.deque[RewardProtocol] = collections.deque()

    def request(self, conn: RewardProtocol) -> None:
        if self.active < self.limit:
            self._admit(conn)
        elif len(self.waiting) >= self.max_waiting:
            conn.refuse_busy()
        else:
            self.waiting.append(conn)
            conn.wait_for_slot(self.wait_s)

    def release(self) -> None:
        self.active -= 1
        while self.waiting and self.active < self.limit:
            self._admit(self.waiting.popleft())

    def withdraw(self, conn: RewardProtocol) -> None:
        try:
            self.waiting.remove(conn)
        except ValueError:
            pass

    def refuse_waiting(self) -> None:
        while self.waiting:
            self.waiting.popleft().refuse_busy()

    def _admit(self, conn: RewardProtocol) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        conn.admitted()


BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
) % (
    len(_error_body("server busy: every handler slot is taken")),
    _error_body("server busy: every handler slot is taken"),
)


class RewardProtocol(H11Protocol):
    """uvicorn's h11 connection with a handler slot and a whole-request read deadline.

    uvicorn bounds idle keep-alive time only; a client that sends half a request line and stops would hold its
    connection forever. Here the deadline runs from the moment the server waits for a request until the app has
    read its whole body (or answers), and a connection is only read once it holds a slot.
    """

    def __init__(self, *args: Any, slots: HandlerSlots, read_timeout_s: float, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._slots = slots
        self._read_timeout_s = read_timeout_s
        self._state = "new"  # -> waiting -> admitted | refused
        self._raw_transport: asyncio.Transport | None = None
        self._wait_timer: asyncio.TimerHandle | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._app = self.app
        self.app = self._app_with_deadline

    # -- slots
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw_transport = transport
        self._slots.request(self)

    def wait_for_slot(self, wait_s: float) -> None:
        self._state = "waiting"
        self._raw_transport.pause_reading()
        self._wait_timer = self.loop.call_later(wait_s, self._wait_expired)

    def _wait_expired(self) -> None:
        self._slots.withdraw(self)
        self.refuse_busy()

    def refuse_busy(self) -> None:
        self._state = "refused"
        if self._wait_timer is not None:
            self._wait_timer.cancel()
        if not self._raw_transport.is_closing():
            peer = self._raw_transport.get_extra_info("peername") or ("-", 0)
            logger.warning("%s:%s refused (503): every handler slot stayed busy", *peer[:2])
            self._raw_transport.write(BUSY_RESPONSE)
            self._raw_transport.close()

    def admitted(self) -> None:
        if self._wait_timer is not None:
            self._wait_timer.cancel()
        was_waiting = self._state == "waiting"
        self._state = "admitted"
        super().connection_made(self._raw_transport)
        if was_waiting:
            self._raw_transport.resume_reading()
        self._arm_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._state != "admitted":  # never served: nothing of uvicorn's to clean up
            self._slots.withdraw(self)
            if self._wait_timer is not None:
                self._wait_timer.cancel()
            self._state = "refused"
            return
        self._disarm_deadline()
        super().connection_lost(exc)
        self._slots.release()

    # -- read deadline
    def _arm_deadline(self) -> None:
        self._disarm_deadline()
        self._deadline = self.loop.call_later(self._read_timeout_s, self._deadline_passed)

    def _disarm_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _deadline_passed(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_deadline()  # the next request, idle time included

    async def _app_with_deadline(self, scope: Any, receive: Any, send: Any) -> None:
        async def receive_in_time() -> dict:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                self._disarm_deadline()  # the whole body is here: scoring time is not read time
            return message

        async def send_and_disarm(message: dict) -> None:
            if message["type"] == "http.response.start":
                self._disarm_deadline()
            await send(message)

        await self._app(scope, receive_in_time, send_and_disarm)


# ----------------------------------------------------------------------------- the app
def _error(status: int, message: str, headers: dict | None = None) -> Response:
    # every error closes the connection: an unread body must not be taken as the next request
    return Response(
        _error_body(message), status, headers={"connection": "close", **(headers or {})}, media_type="application/json"
    )


def build_app(task: str, pool: VerifierPool, max_request_bytes: int) -> Starlette:
    async def health(_request: Request) -> Response:
        return JSONResponse({"status": "ok", "task": task})

    async def reward(request: Request) -> Response:
        length_header = request.headers.get("content-length")
        if length_header is None:
            return _error(411, "Content-Length required")
        try:
            length = int(length_header)
        except ValueError:
            return _error(400, "bad Content-Length")
        if length < 0:
            return _error(400, "bad Content-Length")
        if length > max_request_bytes:
            return _error(413, f"body of {length} bytes exceeds the limit of {max_request_bytes}")
        try:
            raw = await request.body()
        except ClientDisconnect:  # the client left or missed the read deadline: nobody to answer
            return Response(status_code=400)
        status, body, problems = await pool.answer(raw)
        client = "%s:%d" % request.client if request.client else "-"
        for problem in problems:
            logger.warning("%s POST %s: label not used, %s", client, request.url.path, problem)
        headers = None if status == 200 else {"connection": "close"}
        return Response(body, status, headers=headers, media_type="application/json")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            allowed = (exc.headers or {}).get("Allow", "")
            return _error(405, f"use {allowed or 'another method'} on {request.url.path}", exc.headers)
        return _error(exc.status_code, f"unknown path {request.url.path}" if exc.status_code == 404 else exc.detail)

    routes = [Route("/health", health, methods=["GET"])] + [Route(p, reward, methods=["POST"]) for p in REWARD_PATHS]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


# ----------------------------------------------------------------------------- the server
class RewardServer:
    """A bound socket, the verifier workers and uvicorn; ``serve_forever`` blocks until ``shutdown``."""

    def __init__(
        self,
        address: tuple[str, int],
        task: str,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        max_handlers: int = DEFAULT_MAX_HANDLERS,
        workers: int | None = None,
        access_log: bool = True,
    ):
        workers = default_workers() if workers is None else workers
        if read_timeout_s <= 0 or max_handlers < 1 or workers < 1:
            raise ValueError(
                f"read_timeout_s must be > 0, max_handlers and workers >= 1, got {read_timeout_s}, "
                f"{max_handlers}, {workers}"
            )
        self.task = task
        self.max_request_bytes = int(max_request_bytes)
        self.read_timeout_s = float(read_timeout_s)
        self.max_handlers = int(max_handlers)
        task_entry = get_task(task)
        self.socket = _listen(address)  # first: a busy port fails before the workers start
        try:
            self.pool = VerifierPool(task_entry, workers)
        except BaseException:
            self.socket.close()
            raise
        self.slots = HandlerSlots(self.max_handlers, self.read_timeout_s)
        config = uvicorn.Config(
            build_app(task, self.pool, self.max_request_bytes),
            http=functools.partial(RewardProtocol, slots=self.slots, read_timeout_s=self.read_timeout_s),
            loop="asyncio",
            lifespan="off",
            log_config=None,  # the caller's logging; uvicorn.access lines go wherever the root logger writes
            access_log=access_log,
            timeout_keep_alive=self.read_timeout_s,
            timeout_graceful_shutdown=5,
            server_header=False,
        )
        self._uvicorn = uvicorn.Server(config)
        self._stopped = threading.Event()
        self._stopped.set()

    @property
    def server_address(self) -> tuple[str, int]:
        return self.socket.getsockname()[:2]

    @property
    def peak_handlers(self) -> int:
        return self.slots.peak

    @property
    def active_handlers(self) -> int:
        return self.slots.active

    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    async def _serve(self) -> None:
        await self._uvicorn.serve(sockets=[self.socket])
        self.slots.refuse_waiting()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` (from another thread) and wait until it has returned."""
        self._uvicorn.should_exit = True
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self.pool.close()


def _listen(address: tuple[str, int]) -> socket.socket:
    host, port = address
    family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on such sockets (else a response written in two
    # parts waits for the client's delayed ACK, 40 ms per keep-alive request)
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(WAITING_CONNECTIONS)
    except BaseException:
        sock.close()
        raise
    return sock


def start_in_thread(
    task: str,
    host: str = "127.0.0.1",
    port: int = 0,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    max_handlers: int = DEFAULT_MAX_HANDLERS,
    workers: int | None = None,
) -> tuple[RewardServer, threading.Thread]:
    """Start a server in a daemon thread (port 0 = ephemeral); stop it with ``server.shutdown()`` and
    ``server.server_close()``. Its workers are spawned processes: a script calling this must do so under
    ``if __name__ == "__main__":``."""
    server = RewardServer(
        (host, port),
        task,
        max_request_bytes=max_request_bytes,
        read_timeout_s=read_timeout_s,
        max_handlers=max_handlers,
        workers=workers,
    )
    server._stopped.clear()  # shutdown() waits for the thread's loop even if it has not started yet
    thread = threading.Thread(target=server.serve_forever, name=f"reward-server-{task}", daemon=True)
    thread.start()
    return server, thread


if __name__ == "__main__":  # the documented command line; the entry point is mrtpo_openrlhf.cli.reward_server
    from mrtpo_openrlhf.cli.reward_server import main

    sys.exit(main(prog="python -m mrtpo_openrlhf.rewards.server"))
