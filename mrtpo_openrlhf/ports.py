"""Ports this project asks to listen on: a private Ray head's components, rank 0's torch.distributed store.

Every such port is chosen first and bound later, by another process. A port the kernel hands out for ``bind(0)``
lies in its ephemeral range, the range every outgoing connection also draws from (Ray's gRPC, vLLM's sockets), so
in between another socket can take it and the listener fails with EADDRINUSE (seen in CI: an actor group's store).
A port between Ray's worker ports and the ephemeral range is never given to an outgoing connection; only another
explicit listener could take it. Where the chooser can, it also holds the port bound until just before the listener
binds it (``held_port``: rank 0's store, whose port is chosen when the actor starts and bound after the model
loads). Standard library only.
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


def _span(range_file: Path) -> tuple[int, int] | None:
    """Ports to draw from: above Ray's worker ports, below the ephemeral range; None when there is little room."""
    low, high = RAY_WORKER_PORTS_END + 1, ephemeral_range(range_file)[0] - 1
    return (low, high) if high - low + 1 >= MIN_ROOM else None


def _bind_one(rng: random.Random, span: tuple[int, int] | None) -> socket.socket | None:
    """A socket bound on a drawn port (the kernel's pick without a span), or None when a listener has the port."""
    sock = socket.socket()
    try:
        sock.bind(("", rng.randint(*span) if span else 0))
    except OSError:
        sock.close()
        return None
    return sock


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
    rng, span = rng or random.SystemRandom(), _span(range_file)
    held: List[socket.socket] = []
    ports: List[int] = []
    try:
        while len(ports) < count:
            sock = _bind_one(rng, span)
            if sock is None:
                continue
            held.append(sock)
            port = sock.getsockname()[1]
            if port not in avoid and port not in ports:
                ports.append(port)
        return ports
    finally:
        for sock in held:
            sock.close()


def free_port() -> int:
    """One port, as ``free_ports(1)``."""
    return free_ports(1)[0]


def held_port(rng: random.Random | None = None, range_file: Path = EPHEMERAL_RANGE_FILE) -> socket.socket:
    """A socket bound (not listening) on a port drawn as ``free_ports`` draws it: no other socket can bind that port
    until the caller closes it, right before its listener binds it (rank 0's store, ``adapter/actor.py``)."""
    rng, span = rng or random.SystemRandom(), _span(range_file)
    while True:
        sock = _bind_one(rng, span)
        if sock is not None:
            return sock
