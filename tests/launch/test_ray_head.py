"""The launcher's private Ray head runs only what a CPU run uses: no autoscaler monitor, no pool of idle Python
workers (each ~45 MiB PSS; the head used to prestart one per CPU as the driver joined), yet an actor still starts
and answers."""

import subprocess
import sys
import time

import pytest

from mrtpo_openrlhf.launch import runner

pytestmark = pytest.mark.timeout(180)

DRIVER = """
import os, time, ray
ray.init(address=os.environ["RAY_ADDRESS"])

@ray.remote(num_cpus=1)
class Echo:
    def ping(self):
        return os.getpid()

echo = Echo.remote()
print("ACTOR", ray.get(echo.ping.remote()), flush=True)
ray.get(ray.remote(lambda: 1).remote())  # a task: its worker falls idle afterwards
time.sleep(4)  # idle workers beyond the soft limit exit a second after they fall idle
print("DONE", flush=True)
"""


def head_processes(head) -> list:
    """The command lines of the head's processes (what the launcher would stop)."""
    table = runner._processes()
    return [table[pid][2] for pid in runner.owned_pids([head.pgid], str(head.temp_dir)) if pid in table]


def test_no_monitor_and_no_idle_workers_but_actors_run(tmp_path):
    env = runner.cpu_env()
    head = runner.start_ray_head(env, num_cpus=4, num_gpus=1)
    try:
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER], env=dict(env, RAY_ADDRESS=head.address), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        time.sleep(2)
        early = head_processes(head)  # the driver has joined: a prestarting head would have started 4 workers
        output, _ = driver.communicate(timeout=120)
        assert driver.returncode == 0 and "ACTOR" in output and "DONE" in output, output[-3000:]
        late = head_processes(head)
    finally:
        head.stop()
    assert not any("autoscaler/_private/monitor.py" in cmd for cmd in early + late)
    assert sum("ray::IDLE" in cmd for cmd in early) <= 1, early  # at most the one being started for the actor
    assert not any("ray::IDLE" in cmd for cmd in late), late
    assert any("gcs_server" in cmd for cmd in early) and any("raylet" in cmd for cmd in early)
