"""The rendezvous port of an actor group's rank 0 (``MASTER_PORT`` of its torch.distributed store).

Upstream asks the kernel for a free port in the actor's ``__init__`` and binds it only later, in
``init_model_from_pretrained``. A port the kernel hands out that way lies in its ephemeral range, the same range every
outgoing connection draws from (Ray's gRPC, vLLM's sockets, the other groups' stores), so in between another socket
can take it and the store fails with EADDRINUSE. A port below the ephemeral range and above Ray's worker ports is
never given to an outgoing connection: only another explicit listener could take it.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_EPHEMERAL_DEFAULT = (32768, 60999)
RAY_WORKER_PORTS_END = 19999  # Ray's default --max-worker-port; its workers listen in 10002-19999
ATTEMPTS = 64


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's range for outgoing connections (Linux's default where the file cannot be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return LINUX_EPHEMERAL_DEFAULT


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def rendezvous_port(rng: random.Random | None = None, range_file: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A free port between Ray's worker ports and the ephemeral range, else (no such room) a kernel-chosen one."""
    rng = rng or random.SystemRandom()
    low = RAY_WORKER_PORTS_END + 1
    high = ephemeral_range(range_file)[0] - 1
    if high - low >= ATTEMPTS:
        for _ in range(ATTEMPTS):
            port = rng.randint(low, high)
            if _bindable(port):
                return port
    with socket.socket() as sock:  # upstream's way: the kernel picks, from the ephemeral range
        sock.bind(("", 0))
        return sock.getsockname()[1]
