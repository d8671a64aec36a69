"""The paper-scale launch scripts produce command lines that upstream's parser (with our hook) accepts."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from test_args import parse_upstream

from mrtpo_openrlhf.core.settings import DEFAULT_BETA, DEFAULT_WARMUP_STEPS

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"


def test_gpu_script_passes_the_method_settings_it_is_given(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake}:{os.environ['PATH']}",
        DRY_RUN="1",
        DATA=str(tmp_path / "rows.jsonl"),
        OUT=str(tmp_path / "out"),
        BETA="0.25",
        PLACEMENT="joint",
        CAP="none",
    )
    out = subprocess.run(
        ["bash", str(SCRIPTS / "train_mrtpo_if.sh")], env=env, capture_output=True, text=True, check=True
    ).stdout
    args = vars(parse_upstream(shlex.split(out.strip().splitlines()[-1])[3:], monkeypatch))
    assert args["algo.mrtpo.beta"] == 0.25 and args["algo.mrtpo.placement"] == "joint"
    assert args["algo.mrtpo.cap"] is None and args["algo.mrtpo.warmup_steps"] == DEFAULT_WARMUP_STEPS


@pytest.mark.parametrize(
    "script, estimator",
    [
        ("train_mrtpo_sql.sh", "mrtpo"),
        ("train_gdpo_if.sh", "gdpo"),
        ("train_grpo_tool.sh", "group_norm"),
    ],
)
def test_gpu_command_lines_parse(tmp_path, monkeypatch, script, estimator):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake}:{os.environ['PATH']}",
        DRY_RUN="1",
        DATA=str(tmp_path / "rows.jsonl"),
        OUT=str(tmp_path / "out"),
    )
    out = subprocess.run(["bash", str(SCRIPTS / script)], env=env, capture_output=True, text=True, check=True).stdout
    argv = shlex.split(out.strip().splitlines()[-1])
    assert argv[:3] == ["python", "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
    args = vars(parse_upstream(argv[3:], monkeypatch))
    assert args["algo.advantage.estimator"] == estimator
    # unset method settings are left to the CLI's defaults (core/settings.py)
    assert args["algo.mrtpo.beta"] == DEFAULT_BETA and args["algo.mrtpo.warmup_steps"] == DEFAULT_WARMUP_STEPS
    assert args["rollout.n_samples_per_prompt"] == 8 and args["ds.zero_stage"] == 3


def test_gpu_script_without_data_says_how_to_make_it(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DATA"}
    env.update(PATH=f"{fake}:{os.environ['PATH']}", DRY_RUN="1")
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "mrtpo_openrlhf.rewards.sql convert" in res.stderr


def test_submitted_job_forwards_the_verifier_variables(tmp_path):
    """RAY_JOB_ADDRESS: the runtime env given to `ray job submit` carries MRTPO_SQL_TIMEOUT_S and the others."""
    import json
    import sys

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "ray").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/ray_args\n')
    for tool in ("nvidia-smi", "ray"):
        (fake / tool).chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake}:{os.environ['PATH']}",
        PYTHON=sys.executable,
        RAY_JOB_ADDRESS="http://head:8265",
        DATA=str(tmp_path / "rows.jsonl"),
        OUT=str(tmp_path / "out"),
        MRTPO_SQL_TIMEOUT_S="2.5",
        MRTPO_SQL_DB_ROOT="/shared/spider/database",
        MRTPO_SQL_WORKERS="6",
    )
    env.pop("MRTPO_SQL_MAX_ROWS", None)
    subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True, check=True)
    args = (tmp_path / "ray_args").read_text().splitlines()
    assert args[:3] == ["job", "submit", "--address"]
    runtime_env = json.loads(args[args.index("--runtime-env-json") + 1])
    assert runtime_env["working_dir"] == str(SCRIPTS.parents[1])
    assert runtime_env["env_vars"] == {
        "MRTPO_SQL_TIMEOUT_S": "2.5",
        "MRTPO_SQL_DB_ROOT": "/shared/spider/database",
        "MRTPO_SQL_WORKERS": "6",
        "MRTPO_METRICS_JSONL": str(tmp_path / "out" / "metrics.jsonl"),
    }
    assert args[args.index("--") + 1 : args.index("--") + 4] == ["python", "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
