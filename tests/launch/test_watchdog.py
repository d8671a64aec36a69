"""The launcher's watchdog: a run is stopped when it shows no sign of life, never merely for being slow."""

import subprocess
import sys
import time

import pytest

from mrtpo_openrlhf.launch.runner import stop_processes
from mrtpo_openrlhf.launch.watchdog import RunWatchdog, stop_advice


def _child(code):
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)


def _watch(proc, tmp_path, lines, **kw):
    said = []
    dog = RunWatchdog(
        tmp_path / "metrics.jsonl",
        lambda: stop_processes([proc.pid], None, 1.0),
        said.append,
        label="[test] run",
        poll_seconds=0.1,
        **kw,
    )
    with dog:
        for line in proc.stdout:
            lines.append(line)
            dog.alive()
        proc.wait()
    return dog, said


def test_silent_process_is_stopped_as_stalled(tmp_path):
    proc = _child("import time; time.sleep(60)")
    start = time.monotonic()
    dog, said = _watch(proc, tmp_path, [], stall_seconds=1.0)
    assert dog.reason == "stalled" and proc.returncode != 0
    assert time.monotonic() - start < 15
    assert any("stopping the run: no output" in s for s in said)
    assert "--stall-timeout" in stop_advice(dog.reason)


def test_slow_but_talking_process_outlives_the_stall_limit(tmp_path):
    # 6 s of life, a line every 0.3 s, with a 3 s stall limit (room for a slow interpreter start on a busy
    # machine): a wall limit of 3 s would have killed it.
    proc = _child("import time\nfor i in range(20):\n    print(i, flush=True); time.sleep(0.3)")
    lines = []
    dog, _ = _watch(proc, tmp_path, lines, stall_seconds=3.0)
    assert dog.reason is None and proc.returncode == 0 and len(lines) == 20


def test_growing_log_folder_counts_as_life(tmp_path):
    logs = tmp_path / "ray_logs"
    logs.mkdir()
    code = (
        "import time\nfor i in range(24):\n"
        f"    open({str(logs / 'worker.log')!r}, 'a').write('x' * 10); time.sleep(0.25)"
    )
    proc = _child(code)
    dog, _ = _watch(proc, tmp_path, [], stall_seconds=3.0, watch=[logs])
    assert dog.reason is None and proc.returncode == 0


def test_steps_print_progress_with_eta(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    code = (
        "import json, time\nfor step in range(1, 4):\n    time.sleep(0.4)\n"
        f"    open({str(metrics)!r}, 'a').write(json.dumps({{'step': step}}) + '\\n')\ntime.sleep(0.3)"
    )
    proc = _child(code)
    dog, said = _watch(proc, tmp_path, [], stall_seconds=3.0, total_steps=3)
    assert dog.reason is None and dog.steps_seen == 3
    progress = [s for s in said if ": step " in s]
    assert progress[0].startswith("[test] run: step 1/3") and "left" in progress[0]
    assert progress[-1].startswith("[test] run: step 3/3")


def test_wall_limit_still_available(tmp_path):
    proc = _child("import time\nwhile True:\n    print('busy', flush=True); time.sleep(0.1)")
    dog, said = _watch(proc, tmp_path, [], stall_seconds=None, wall_seconds=1.0)
    assert dog.reason == "timed out" and "--timeout" in stop_advice(dog.reason)


def test_bad_stall_limit_is_refused(tmp_path):
    with pytest.raises(ValueError, match="stall_seconds"):
        RunWatchdog(tmp_path / "m.jsonl", lambda: None, print, stall_seconds=0)


def test_a_resumed_runs_rate_counts_only_the_steps_it_ran(tmp_path):
    """Issue 49, item 11: a run resumed after 2 steps read "3 s/step" at its first step: the time since its start
    divided by all 3 rows of metrics.jsonl, 2 of them from the earlier run."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n{"step": 2}\n')
    said = []
    dog = RunWatchdog(metrics, lambda: None, said.append, label="[test] run", total_steps=4)
    dog._progress(3, dog.started + 30.0)
    assert said == ["[test] run: step 3/4 (30 s/step incl. start-up, ~30 s left)"]
