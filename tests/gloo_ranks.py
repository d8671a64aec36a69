"""Local processes as the ranks of one gloo group: the multi-rank ZeRO-3 tests start their workers with ``start``,
read the JSON row each rank prints with ``rows``, and every worker ends with ``end_rank``."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.ports import free_port

TESTS = Path(__file__).resolve().parent


def start(worker: Path, world_size: int, env: Optional[Dict[str, str]] = None, args: Sequence[str] = ()):
    """One process per rank on a fresh port, stdout and stderr together; returns the ``Popen`` objects."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        rank_env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1",
                        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), str(TESTS)]), **(env or {}))  # fmt: skip
        command = [sys.executable, str(worker), *args]
        out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append(subprocess.Popen(command, env=rank_env, **out))
    return procs


def rows(outputs: Sequence[str]) -> List[dict]:
    """The last ``{"rank": ...}`` line of each rank's output."""
    found = []
    for out in outputs:
        lines = [line for line in out.splitlines() if line.startswith('{"rank"')]
        assert lines, out[-3000:]
        found.append(json.loads(lines[-1]))
    return found


def end_rank() -> None:
    """A worker's last call: leave the group together, then exit without running C++ static destructors.

    A rank that simply returned could abort at interpreter teardown (SIGABRT, "terminate called without an
    active exception": a gloo thread still joinable) after printing a right answer; CI saw it once in ~20 runs."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
