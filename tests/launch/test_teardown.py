"""Interrupting the launcher stops what it started: Ctrl-C, SIGTERM and the wall limit each leave no process of the
run alive (the Ray head's raylet, GCS and workers, the job, an actor and the actor's own child process)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrtpo_openrlhf.cpu import SITE_DIR
from mrtpo_openrlhf.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
HERE = Path(__file__).resolve().parent


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def processes_naming(marker: str) -> list:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        found.append(int(entry))
            except OSError:
                continue
    return [pid for pid in found if alive(pid)]


def launch(tmp_path, *extra):
    """The launcher CLI running tests/launch/ray_holder.py; returns (process, pids, ray temp dir, output so far)."""
    pythonpath = os.pathsep.join([str(SITE_DIR), str(REPO_ROOT), str(HERE)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrtpo_openrlhf.launch", "--workdir", str(tmp_path / "run"), *extra,
         "--env", f"PYTHONPATH={pythonpath}", "--", "ray_holder"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    lines, temp_dir, deadline = [], None, time.time() + 180
    for line in proc.stdout:
        lines.append(line)
        found = re.search(r"\(temp (/tmp/mrray\w+)\)", line)
        temp_dir = temp_dir or (found and found.group(1))
        ready = re.search(r"HOLDER ready driver=(\d+) actor=(\d+) child=(\d+)", line)
        if ready:
            return proc, [int(p) for p in ready.groups()], temp_dir, lines
        assert time.time() < deadline, "".join(lines)
    raise AssertionError("the launcher ended before the job was ready:\n" + "".join(lines))


def assert_all_gone(proc, pids, temp_dir, lines, expect_status):
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the launcher did not exit within 90 s:\n" + "".join(lines))
    log = "".join(lines) + out
    assert proc.returncode == expect_status, log
    deadline = time.time() + 10
    while time.time() < deadline and (any(alive(p) for p in pids) or processes_naming(temp_dir)):
        time.sleep(0.5)
    left = [p for p in pids if alive(p)] + processes_naming(temp_dir)
    for pid in left:  # do not leak into the rest of the suite even when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the launcher exited: {left}\n{log}"
    assert not Path(temp_dir).exists(), log
    return log


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_the_head_and_every_process_under_it(tmp_path, sig, status):
    proc, pids, temp_dir, lines = launch(tmp_path)
    assert temp_dir and processes_naming(temp_dir), "".join(lines)  # the head runs (raylet, GCS name the temp dir)
    assert all(alive(p) for p in pids)
    proc.send_signal(sig)  # Ctrl-C in a terminal reaches only the launcher: the head and the job have own sessions
    log = assert_all_gone(proc, pids, temp_dir, lines, status)
    assert f"interrupted by {signal.Signals(sig).name}" in log


def test_wall_limit_stops_the_head_and_every_process_under_it(tmp_path):
    proc, pids, temp_dir, lines = launch(tmp_path, "--timeout", "5")
    log = assert_all_gone(proc, pids, temp_dir, lines, 124)
    assert "the wall limit" in log
