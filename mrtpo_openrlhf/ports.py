"""Ports this project asks to listen on: a private Ray head's components, rank 0's torch.distributed store.

Every such port is chosen first and bound later, by another process. A port the kernel hands out for ``bind(0)``
lies in its ephemeral range, the range every outgoing connection also draws from (Ray's gRPC, vLLM's sockets), so
in between another socket can take it and the listener fails with EADDRINUSE (seen in CI: an actor group's store).
A port between Ray's worker ports and the ephemeral range is never given to an outgoing connection; only another
explicit listener could take it. Standard library only.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from typing import List, Sequence

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_DEFAULT = (32768, 60999)
RAY_WORKER_PORTS_END = 19999  # Ray's default --max-worker-port; its workers listen in 10002-19999
MIN_ROOM = 1024  # fewer ports than this between the two ranges: let the kernel pick, as upstream does


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections (Linux's default where the file cannot be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return LINUX_EPHEMERAL_DEFAULT


def free_ports(
    count: int,
    avoid: Sequence[int] = (),
    rng: random.Random | None = None,
    range_file: Path = EPHEMERAL_RANGE_FILE,
) -> List[int]:
    """``count`` distinct TCP ports that were free a moment ago, none in ``avoid``, drawn between Ray's worker
    ports and the ephemeral range where there is room.

    All are held bound until the last is chosen: ports taken one at a time can repeat, and a Ray head given one
    port for two components refuses to start.
    """
    rng = rng or random.SystemRandom()
    low, high = RAY_WORKER_PORTS_END + 1, ephemeral_range(range_file)[0] - 1
    drawn = high - low + 1 >= MIN_ROOM
    held: List[socket.socket] = []
    ports: List[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket()
            held.append(sock)
            try:
                sock.bind(("", rng.randint(low, high) if drawn else 0))
            except OSError:  # a listener has it already
                continue
            port = sock.getsockname()[1]
            if port not in avoid and port not in ports:
                ports.append(port)
        return ports
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    """One port, as ``free_ports(1)``; also rank 0's rendezvous port in the actor groups (``adapter/actor.py``)."""
    return free_ports(1)[0]
