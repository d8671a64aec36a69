"""MRTPO_CPU_PEAK_STACKS: a process of a CPU run records where in its code it reached its memory peak, and
``cli.memory`` prints it beside the trace."""

import json
import os
import subprocess
import sys

from mrtpo_openrlhf.cli import memory as memory_cli
from mrtpo_openrlhf.cpu.peak_stack import read_peaks
from mrtpo_openrlhf.launch.runner import SITE_DIR
from mrtpo_openrlhf.paths import REPO_ROOT

PROGRAM = """
import time

def allocate_here():
    block = bytearray(300 * 2**20)
    block[::4096] = b"x" * len(block[::4096])
    time.sleep(0.3)  # long enough for the 5 ms sampler to see it
    return len(block)

def small_work():
    time.sleep(0.3)

allocate_here()
small_work()
"""


def test_a_process_records_the_stack_of_its_peak_and_the_memory_command_prints_it(tmp_path, capsys):
    stacks = tmp_path / "run" / "peak_stacks"
    env = dict(
        os.environ,
        MRTPO_CPU="1",
        MRTPO_CPU_PEAK_STACKS=str(stacks),
        PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO_ROOT)]),
    )
    subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=120)
    (record,) = read_peaks(stacks)
    assert record["peak_rss_bytes"] >= 300 * 2**20
    assert record["stack"][-1].endswith(" allocate_here")  # the frame running when the RSS peaked
    row = dict(t=1.0, phase="training", step=1, pss_gib=0.4, available_gib=9.0, by_role_gib={"python": 0.4})
    (tmp_path / "run" / "memory.jsonl").write_text(json.dumps(row) + "\n")
    assert memory_cli.main([str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "where each process peaked" in out and "allocate_here" in out


def test_without_the_switch_nothing_is_written(tmp_path):
    env = dict(os.environ, MRTPO_CPU="1", PYTHONPATH=os.pathsep.join([str(SITE_DIR), str(REPO_ROOT)]))
    env.pop("MRTPO_CPU_PEAK_STACKS", None)
    subprocess.run([sys.executable, "-c", "x = bytearray(2**20)"], env=env, check=True, cwd=tmp_path, timeout=120)
    assert list(tmp_path.iterdir()) == []
