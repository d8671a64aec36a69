"""One SQL worker process of ``pool.SqlWorkerPool``: ``python -m mrtpo_openrlhf.tasks.sql.verifier.worker``."""

from __future__ import annotations

import sys

from .pool import receive_message, send_message
from .sandbox import execute_sql


def serve() -> None:
    """Worker loop: (db_path, sql, limits) in on stdin, ("ok", SqlResult) or ("raise", exception) out on stdout."""
    fd_in, fd_out = sys.stdin.fileno(), sys.stdout.fileno()
    sys.stdout = sys.stderr  # nothing else may write into the answer pipe
    while True:
        request = receive_message(fd_in, None)
        if request is None:
            return  # the parent closed the pipe (or died)
        db_path, sql, limits = request
        try:
            reply = ("ok", execute_sql(db_path, sql, **limits))
        except Exception as exc:  # noqa: BLE001 - handed back to the caller, raised there
            reply = ("raise", exc)
        send_message(fd_out, reply)


if __name__ == "__main__":
    serve()
