"""Where in the code each process reaches its memory peak (``MRTPO_CPU_PEAK_STACKS=DIR``).

The launcher's trace says which process held the memory and in which phase; a 1-second PSS sample cannot say which
line of code allocated it. With this switch on, every process of a CPU run starts a thread that reads its own RSS
every ``MRTPO_CPU_PEAK_STACKS_MS`` milliseconds (default 5) and, each time the RSS passes its last record by more
than 32 MiB, stores the main thread's Python stack beside it. ``DIR/<pid>.json`` holds the record and the
process's name (Ray renames its workers after start, so the name is read at each write): written
when it grows (throttled to once a second) and at exit, since Ray ends its actors without running atexit hooks.
``python -m mrtpo_openrlhf.cli.memory RUN_DIR`` prints the largest processes' peaks with their stacks.

A thread that reads /proc every 5 ms costs about 1% of a core; the switch is for finding memory, not for
production runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import List, Optional

ENV_DIR = "MRTPO_CPU_PEAK_STACKS"
ENV_MS = "MRTPO_CPU_PEAK_STACKS_MS"
STEP_BYTES = 32 << 20  # a new record only when the RSS grew this much past the last one
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * _PAGE


def main_stack(limit: int = 25) -> List[str]:
    """The main thread's innermost ``limit`` frames as ``file:line function`` lines, innermost last."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    if frame is None:
        return []
    return [f"{f.filename}:{f.lineno} {f.name}" for f in traceback.extract_stack(frame)[-limit:]]


class PeakStacks:
    """The sampling thread of one process; ``record`` is its current peak (bytes, seconds since start, stack)."""

    def __init__(self, out_dir: Path, interval: float = 0.005) -> None:
        self.out_dir, self.interval = out_dir, interval
        self.start = time.time()
        self.record: dict = {"pid": os.getpid(), "peak_rss_bytes": 0, "at_s": 0.0, "stack": []}
        self._written = 0.0
        self._stop = threading.Event()

    def sample(self) -> None:
        rss, best = rss_bytes(), self.record["peak_rss_bytes"]
        if rss > best + STEP_BYTES or (rss > best and not self.record["stack"]):
            self.record = dict(self.record, peak_rss_bytes=rss, at_s=round(time.time() - self.start, 3))
            self.record["stack"] = main_stack()
            if time.time() - self._written > 1.0:
                self.write()

    def write(self) -> None:
        self._written = time.time()
        try:
            with open(f"/proc/{os.getpid()}/cmdline") as handle:
                self.record["name"] = handle.read().split("\0")[0][:80]
            self.out_dir.mkdir(parents=True, exist_ok=True)
            target = self.out_dir / f"{os.getpid()}.json"
            tmp = target.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.record))
            os.replace(tmp, target)
        except OSError:
            pass

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()
        self.write()

    def stop(self) -> None:
        self._stop.set()


def start_from_env() -> Optional[PeakStacks]:
    """Start the thread when ``MRTPO_CPU_PEAK_STACKS`` names a folder (sitecustomize calls this in every process)."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return None
    sampler = PeakStacks(Path(folder), float(os.environ.get(ENV_MS) or 5) / 1000)
    threading.Thread(target=sampler.run, daemon=True, name="mrtpo-peak-stacks").start()
    import atexit

    atexit.register(sampler.write)
    return sampler


def read_peaks(folder: os.PathLike) -> List[dict]:
    """The records under ``folder``, largest peak first."""
    rows = []
    for path in Path(folder).glob("*.json"):
        try:
            rows.append(dict(json.loads(path.read_text()), file=path.name))
        except (OSError, ValueError):
            continue
    return sorted(rows, key=lambda r: -r.get("peak_rss_bytes", 0))
