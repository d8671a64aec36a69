"""Watch a training run: print step progress with an ETA, and stop it when it stalls.

A fixed wall limit kills healthy runs on a busy machine (Ray starts its workers at nice 15, so they only get the CPU
that other programs leave), so the run is judged by activity instead: a new output line, a new metrics row or any
growth of the files under the watched folders (Ray's session logs) resets the stall clock. Only a run with no sign
of life for ``stall_seconds`` is stopped. An optional wall limit (``wall_seconds``) remains for batch jobs.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

STALL_SECONDS = 600.0  # default: ten minutes without a line, a step or a log byte


def count_rows(path: Path) -> int:
    """Non-empty lines of a JSONL file (0 while it does not exist)."""
    try:
        return sum(1 for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())
    except OSError:
        return 0


def tree_size(folders: Sequence[Path]) -> int:
    """Total bytes of the regular files under ``folders`` (vanishing files are skipped)."""
    total = 0
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    continue
    return total


def fmt_minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class RunWatchdog:
    """Background thread: progress lines from ``metrics`` and a stall / wall-limit stop.

    Use as a context manager around the run; call ``alive()`` for every output line. ``label`` starts every line
    it prints. ``reason`` is ``"stalled"`` or ``"timed out"`` once ``stop`` was called, else None.
    """

    def __init__(
        self,
        metrics: Path,
        stop: Callable[[], None],
        say: Callable[[str], None],
        label: str = "[mrtpo.launch] run",
        total_steps: Optional[int] = None,
        stall_seconds: Optional[float] = STALL_SECONDS,
        wall_seconds: Optional[float] = None,
        watch: Sequence[Path] = (),
        poll_seconds: float = 5.0,
    ):
        if stall_seconds is not None and stall_seconds <= 0:
            raise ValueError(f"stall_seconds must be positive, got {stall_seconds}")
        self.metrics, self.stop_run, self.say, self.label = Path(metrics), stop, say, label
        self.total_steps, self.stall_seconds, self.wall_seconds = total_steps, stall_seconds, wall_seconds
        self.watch, self.poll_seconds = [Path(p) for p in watch], poll_seconds
        self.reason: Optional[str] = None
        # a resumed run's metrics.jsonl already holds its earlier steps: the rate counts the steps run here
        self.steps_seen = self.steps_before = count_rows(self.metrics)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="mrtpo-watchdog", daemon=True)
        self.started = self.last_activity = time.monotonic()

    def alive(self) -> None:
        """The run showed a sign of life (an output line)."""
        self.last_activity = time.monotonic()

    def _progress(self, steps: int, now: float) -> None:
        per = (now - self.started) / max(steps - self.steps_before, 1)
        total = f"/{self.total_steps}" if self.total_steps else ""
        eta = f", ~{fmt_minutes(per * (self.total_steps - steps))} left" if self.total_steps else ""
        self.say(f"{self.label}: step {steps}{total} ({per:.0f} s/step incl. start-up{eta})")

    def _loop(self) -> None:
        size = tree_size(self.watch)
        while not self._done.wait(self.poll_seconds):
            now = time.monotonic()
            steps = count_rows(self.metrics)
            if steps > self.steps_seen:
                self.steps_seen = steps
                self.last_activity = now
                self._progress(steps, now)
            grown = tree_size(self.watch)
            if grown != size:
                size, self.last_activity = grown, now
            if self.wall_seconds is not None and now - self.started > self.wall_seconds:
                self._stop("timed out", f"the wall limit of {fmt_minutes(self.wall_seconds)} was reached")
            elif self.stall_seconds is not None and now - self.last_activity > self.stall_seconds:
                self._stop(
                    "stalled",
                    f"no output, no new step and no log growth for "
                    f"{fmt_minutes(now - self.last_activity)} (after step {self.steps_seen})",
                )

    def _stop(self, reason: str, why: str) -> None:
        self.reason = reason
        self.say(f"{self.label}: stopping the run: {why}")
        self._done.set()
        self.stop_run()

    def __enter__(self) -> "RunWatchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=self.poll_seconds + 5.0)


def stop_advice(reason: Optional[str]) -> str:
    """What to do after the watchdog stopped a run (empty when it did not)."""
    if reason == "stalled":
        return (
            "the run showed no sign of life for the stall limit. If another program is busy on this machine, "
            "Ray's workers (nice 15) only get what it leaves: stop it or raise --stall-timeout; else read the "
            "log's last lines for a hang (a Ray actor that died, a deadlock between ranks)."
        )
    if reason == "timed out":
        return "the run hit --timeout; raise it (or drop it: the stall limit alone stops a run that hangs)."
    return ""
