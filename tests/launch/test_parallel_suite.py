"""The suite's split over xdist workers (tests/parallel.py), checked on a small made-up suite run through pytest the
way ``scripts/test.sh`` runs the real one: every slow test on one worker, in file order, at its normal priority;
each other module whole on one worker, at nice 19; and nothing of that without xdist. Also: test.sh passes the
split to pytest and lets the caller's own ``-n`` win."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent

RECORD = """
import json, os, time
import pytest

def record(name):
    with open(os.environ["RECORD_TO"], "a") as f:
        f.write(json.dumps({"name": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"), "nice": os.nice(0),
                            "t": time.monotonic()}) + "\\n")
    time.sleep(0.2)
"""


# the cluster module comes last in file order, and each light module has more tests than the serial group's 4:
# both xdist's default order (by size) and file order would start the light ones first
LIGHT_PER_MODULE = 6


def made_up_suite(folder: Path) -> None:
    (folder / "rec.py").write_text(RECORD)
    slow = ["import pytest", "from rec import record"]
    for i in range(3):
        slow += ["", "@pytest.mark.slow", f"def test_cluster_{i}():", f"    record('cluster_{i}')"]
    (folder / "test_z_cluster.py").write_text("\n".join(slow) + "\n")
    for module in ("b", "c", "d"):
        body = ["from rec import record"]
        for i in range(LIGHT_PER_MODULE):
            body += ["", f"def test_{module}{i}():", f"    record('{module}{i}')"]
        (folder / f"test_{module}_light.py").write_text("\n".join(body) + "\n")
    # a module with one slow test and light ones: the slow one joins the serial group
    mixed = ["import pytest", "from rec import record", "", "@pytest.mark.slow", "def test_e_slow():",
             "    record('e_slow')", "", "def test_e_light():", "    record('e_light')"]  # fmt: skip
    (folder / "test_e_mixed.py").write_text("\n".join(mixed) + "\n")


def run_made_up(tmp_path: Path, *args: str) -> list[dict]:
    suite = tmp_path / "suite"
    suite.mkdir()
    made_up_suite(suite)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "RECORD_TO": str(record), "PYTHONPATH": f"{TESTS}{os.pathsep}{suite}"}
    env.pop("PYTEST_XDIST_WORKER", None)  # this test may itself run under xdist
    command = [sys.executable, "-m", "pytest", "-q", "-p", "parallel", "-p", "no:cacheprovider"]
    command += ["-o", "markers=slow: slow", "--rootdir", str(suite), "-c", os.devnull, *args, str(suite)]
    done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.slow  # on the serial worker, which keeps its priority: the light ones already run at nice 19
def test_slow_tests_run_in_order_on_one_worker_and_the_rest_beside_them_at_low_priority(tmp_path):
    pytest.importorskip("xdist")
    start_nice = os.nice(0)
    session_nice = os.environ.get("PARALLEL_SUITE_START_NICE")  # set where this suite itself runs under xdist
    assert session_nice is None or int(session_nice) == start_nice, "a light test lowered the serial worker's priority"
    if start_nice >= 19:
        pytest.skip("this process already runs at nice 19: the light tests' drop in priority cannot be seen")
    rows = run_made_up(tmp_path, "-n", "2", "--dist", "loadgroup")
    assert len(rows) == 3 * LIGHT_PER_MODULE + 3 + 2
    by_name = {r["name"]: r for r in rows}
    serial = [by_name[n] for n in ("e_slow", "cluster_0", "cluster_1", "cluster_2")]
    assert len({r["worker"] for r in serial}) == 1 and None not in {r["worker"] for r in serial}
    assert [r["t"] for r in serial] == sorted(r["t"] for r in serial)  # file order, one at a time
    assert all(r["nice"] == start_nice for r in serial)
    for module in ("b", "c", "d"):
        group = [by_name[f"{module}{i}"] for i in range(LIGHT_PER_MODULE)]
        assert len({r["worker"] for r in group}) == 1, group  # a module's fixtures are built once
    light = [r for r in rows if r not in serial]
    assert all(r["nice"] == 19 for r in light), light
    assert {r["worker"] for r in light} - {serial[0]["worker"]}, "no light test ran beside the serial ones"
    before = [r["name"] for r in light if r["worker"] == serial[0]["worker"] and r["t"] < serial[0]["t"]]
    assert not before, f"light tests ran on the serial worker before the serial group: {before}"


def test_without_xdist_nothing_changes(tmp_path):
    rows = run_made_up(tmp_path, "-p", "no:xdist")
    assert len(rows) == 3 * LIGHT_PER_MODULE + 5 and {r["worker"] for r in rows} == {None}
    assert {r["nice"] for r in rows} == {os.nice(0)}


def fake_pytest_args(tmp_path: Path, *args: str, **env: str) -> list[str]:
    """The words scripts/test.sh hands to pytest, with install.sh, env.sh, ruff and python faked."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / "scripts" / "test.sh").write_text((REPO / "scripts" / "test.sh").read_text())
    (root / "scripts" / "install.sh").write_text("true\n")
    (root / "scripts" / "env.sh").write_text("true\n")
    words = tmp_path / "words.json"
    (root / ".venv" / "bin" / "ruff").write_text("#!/bin/sh\nexit 0\n")
    (root / ".venv" / "bin" / "python").write_text(
        f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(words)!r}, 'w'))\n"
    )
    for name in ("ruff", "python"):
        (root / ".venv" / "bin" / name).chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("FAST", "TEST_WORKERS")}  # this run's own settings
    done = subprocess.run(
        ["bash", str(root / "scripts" / "test.sh"), *args], env={**base, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(words.read_text())


def test_test_sh_spreads_over_two_workers_unless_told_otherwise(tmp_path):
    assert fake_pytest_args(tmp_path / "a") == ["-m", "pytest", "-n", "2", "--dist", "loadgroup"]
    assert fake_pytest_args(tmp_path / "b", "-n", "0", "tests/core") == ["-m", "pytest", "-n", "0", "tests/core"]
    assert fake_pytest_args(tmp_path / "c", TEST_WORKERS="1") == ["-m", "pytest"]
    fast = fake_pytest_args(tmp_path / "d", "-x", FAST="1", TEST_WORKERS="3")
    assert fast == ["-m", "pytest", "-m", "not slow", "-n", "3", "--dist", "loadgroup", "-x"]


def test_test_sh_refuses_a_worker_count_that_is_not_a_number(tmp_path):
    with pytest.raises(AssertionError, match="TEST_WORKERS must be a number"):
        fake_pytest_args(tmp_path, TEST_WORKERS="two")


def test_the_suites_conftest_takes_every_hook_of_the_plugin():
    """tests/conftest.py imports parallel.py's hooks by name (a non-root conftest cannot declare pytest_plugins): a
    hook left out of that import does nothing in the real suite while the made-up suite above (-p parallel) passes."""
    import ast

    sys.path.insert(0, str(TESTS))
    import parallel

    hooks = {name for name in vars(parallel) if name.startswith("pytest_")}
    tree = ast.parse((TESTS / "conftest.py").read_text())
    imported = {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "parallel"
                for a in node.names}  # fmt: skip
    assert hooks and hooks <= imported, hooks - imported
