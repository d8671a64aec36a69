"""The verifier environment variables reach every Ray worker: the list is complete, and the CLI adds them to
upstream's ``ray.init`` runtime env (``adapter.cluster.hook_ray_init``; the job-submit side:
tests/adapter/test_launch_scripts.py)."""

import json
import re
from pathlib import Path

import ray

from mrtpo_openrlhf.adapter.cluster import hook_ray_init
from mrtpo_openrlhf.cli.job_env import main
from mrtpo_openrlhf.rewards.env import verifier_env_vars

PKG = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf"


def test_every_variable_the_verifiers_read_is_forwarded():
    names = set()
    for folder in ("rewards", "verifiers", "tasks"):
        for path in (PKG / folder).rglob("*.py"):
            names |= set(re.findall(r"[\"'](MRTPO_[A-Z0-9_]+)[\"']", path.read_text(encoding="utf-8")))
    assert names and names == set(verifier_env_vars())


def test_cli_adds_them_to_upstreams_ray_init(monkeypatch):
    calls = []
    monkeypatch.setattr(ray, "init", lambda *a, **kw: calls.append(kw))  # stands in for Ray; the wrapper is tested
    hook_ray_init(None, check_gpus=False)  # what the CLI's require_device does
    monkeypatch.setenv("MRTPO_SQL_TIMEOUT_S", "3")
    monkeypatch.setenv("MRTPO_MAX_RESPONSE_CHARS", "9000")
    monkeypatch.delenv("MRTPO_SQL_WORKERS", raising=False)
    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    ray.init(runtime_env={"env_vars": {"NCCL_DEBUG": "WARN"}})  # what upstream's train() passes
    env_vars = calls[-1]["runtime_env"]["env_vars"]
    assert env_vars["NCCL_DEBUG"] == "WARN"
    assert env_vars["MRTPO_SQL_TIMEOUT_S"] == "3" and env_vars["MRTPO_MAX_RESPONSE_CHARS"] == "9000"
    assert "MRTPO_SQL_WORKERS" not in env_vars

    # inside a submitted job whose runtime env already sets one: Ray would refuse the same key twice
    job = {"runtime_env": {"env_vars": {"MRTPO_SQL_TIMEOUT_S": "3"}}}
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(job))
    ray.init(runtime_env={"env_vars": {}})
    assert calls[-1]["runtime_env"]["env_vars"] == {"MRTPO_MAX_RESPONSE_CHARS": "9000"}


def test_job_runtime_env_command(capsys, monkeypatch):
    monkeypatch.setenv("MRTPO_SQL_MAX_ROWS", "500")
    for name in set(verifier_env_vars()) - {"MRTPO_SQL_MAX_ROWS"}:
        monkeypatch.delenv(name, raising=False)
    assert main(["--working-dir", "/repo", "--env", "MRTPO_METRICS_JSONL=/shared/m.jsonl"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["working_dir"] == "/repo" and ".venv" in out["excludes"]
    assert out["env_vars"] == {"MRTPO_SQL_MAX_ROWS": "500", "MRTPO_METRICS_JSONL": "/shared/m.jsonl"}
