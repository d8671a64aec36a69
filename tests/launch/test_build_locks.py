"""Stale torch C++-extension build locks: removed before a run, a live build's lock kept."""

import os
import subprocess
import sys
import time

from mrtpo_openrlhf.launch.runner import STALE_BUILD_LOCK_SECONDS, clear_stale_build_locks


def test_old_lock_removed_fresh_lock_kept(tmp_path):
    stale = tmp_path / "deepspeed_shm_comm" / "lock"
    live = tmp_path / "other_op" / "lock"
    for lock in (stale, live):
        lock.parent.mkdir()
        lock.touch()
    old = time.time() - STALE_BUILD_LOCK_SECONDS - 60
    os.utime(stale, (old, old))
    assert clear_stale_build_locks(tmp_path) == [stale]
    assert not stale.exists() and live.exists()
    assert clear_stale_build_locks(tmp_path / "missing") == []


def test_a_removed_lock_lets_torch_stop_waiting(tmp_path):
    """The real waiter: torch's FileBaton.wait() returns once the lock is cleared (it would spin forever)."""
    lock = tmp_path / "op" / "lock"
    lock.parent.mkdir()
    lock.touch()
    old = time.time() - STALE_BUILD_LOCK_SECONDS - 1
    os.utime(lock, (old, old))
    code = f"from torch.utils.file_baton import FileBaton; FileBaton({str(lock)!r}, wait_seconds=0.05).wait()"
    waiter = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(1.0)
    assert waiter.poll() is None  # still waiting on the stale lock
    clear_stale_build_locks(tmp_path)
    assert waiter.wait(timeout=60) == 0
