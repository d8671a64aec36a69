"""The reward server's command line: ``python -m mrtpo_openrlhf.cli.reward_server serve --task sql`` (also run as
``python -m mrtpo_openrlhf.rewards.server``; the server itself is ``mrtpo_openrlhf.rewards.server``, docs/rewards.md).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

from mrtpo_openrlhf.rewards.server import (
    DEFAULT_MAX_HANDLERS,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_READ_TIMEOUT_S,
    LOG_FORMAT,
    RewardServer,
    default_workers,
)
from mrtpo_openrlhf.tasks import TASKS


def _check_serve_args(args: argparse.Namespace) -> str | None:
    """The first bad flag, as the one line to print; None when all are usable."""
    if not 0 <= args.port <= 65535:
        return f"--port {args.port}: a port is 0..65535"
    if args.max_request_bytes < 0:
        return f"--max-request-bytes {args.max_request_bytes}: must be >= 0"
    if not args.read_timeout_s > 0:
        return f"--read-timeout-s {args.read_timeout_s}: must be > 0"
    if args.max_handlers < 1:
        return f"--max-handlers {args.max_handlers}: must be >= 1"
    if args.workers < 1:
        return f"--workers {args.workers}: must be >= 1"
    return None


class _Stop(Exception):
    """SIGTERM, re-raised by uvicorn once it has shut down gracefully."""


def _raise_stop(_signum: int, _frame: Any) -> None:
    raise _Stop


def main(argv: list[str] | None = None, prog: str = "python -m mrtpo_openrlhf.cli.reward_server") -> int:
    parser = argparse.ArgumentParser(prog=prog)
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
        help="connections served at once; more wait up to the read timeout for a slot, then get 503",
    )
    serve.add_argument(
        "--workers",
        type=int,
        default=default_workers(),
        help="verifier processes (default: one per usable core, %(default)s here)",
    )
    serve.add_argument("--no-access-log", action="store_true", help="no line per request")
    args = parser.parse_args(argv)
    problem = _check_serve_args(args)
    if problem:
        print(f"{parser.prog} serve: error: {problem}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        server = RewardServer(
            (args.host, args.port),
            args.task,
            max_request_bytes=args.max_request_bytes,
            read_timeout_s=args.read_timeout_s,
            max_handlers=args.max_handlers,
            workers=args.workers,
            access_log=not args.no_access_log,
        )
    except OSError as exc:  # a busy port, an address this machine does not have, a host that does not resolve
        print(
            f"{parser.prog} serve: error: --host {args.host} --port {args.port}: cannot listen there: "
            f"{exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address
    print(
        f"serving task {args.task!r} on http://{host}:{port}/get_reward ({args.workers} verifier workers)", flush=True
    )
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, _Stop):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
