"""The driver on a Ray cluster (``adapter.cluster``): the GPUs the flags need, counted against the cluster's, and the
MRTPO variables added to upstream's runtime env. Flags go through upstream's own parser (``parse_upstream``)."""

import os
from types import SimpleNamespace

import pytest
from test_args import BASE, parse_upstream

from mrtpo_openrlhf.adapter.cluster import forwarded_env, gpus_needed, shortage, with_forwarded_env


def flat(monkeypatch, *extra):
    return parse_upstream(BASE + ["--algo.advantage.estimator", "mrtpo", *extra], monkeypatch)


def test_colocated_flags_need_the_actor_gpus_only(monkeypatch):
    args = flat(
        monkeypatch,
        *("--actor.num_nodes", "2", "--actor.num_gpus_per_node", "8", "--ref.num_nodes", "2"),
        *("--ref.num_gpus_per_node", "8", "--vllm.num_engines", "16", "--train.colocate_all"),
        *("--algo.kl.init_coef", "0.001"),
    )
    assert gpus_needed(args)[0] == 16


def test_separate_models_add_up(monkeypatch):
    """actor 4 + reference 4 (KL on) + 2 engines x tensor parallel 2 = 12; without KL no reference is placed."""
    layout = ("--actor.num_gpus_per_node", "4", "--ref.num_gpus_per_node", "4", "--vllm.num_engines", "2")
    args = flat(monkeypatch, *layout, "--vllm.tensor_parallel_size", "2", "--algo.kl.init_coef", "0.01")
    need, how = gpus_needed(args)
    assert need == 12 and how == "4 actor + 4 reference + 4 vLLM"
    no_kl = flat(monkeypatch, *layout, "--vllm.tensor_parallel_size", "2", "--algo.kl.init_coef", "0")
    assert gpus_needed(no_kl)[0] == 8
    shared = flat(monkeypatch, *layout, "--algo.kl.init_coef", "0.01", "--train.colocate_actor_ref")
    assert gpus_needed(shared)[0] == 4 + 2


def test_a_head_without_gpus_is_fine_when_the_cluster_has_them(monkeypatch):
    """Issue 26 item 2: what counts is the cluster's GPUs, never the driver's (a head without any)."""
    args = flat(monkeypatch, "--actor.num_gpus_per_node", "8", "--vllm.num_engines", "8", "--train.colocate_all")
    assert shortage(args, {"CPU": 64.0, "GPU": 8.0}) is None
    assert shortage(args, {"CPU": 64.0, "GPU": 16.0}) is None
    line = shortage(args, {"CPU": 64.0}, "the Ray cluster at 10.0.0.1:6379")
    assert line.startswith("mrtpo: the Ray cluster at 10.0.0.1:6379 has 0 GPUs, the flags need 8 (--train.colocate_all")
    assert "\n" not in line and "MRTPO_SKIP_GPU_CHECK=1" in line
    assert "has 4 GPUs, the flags need 8" in shortage(args, {"GPU": 4.0})


def test_forwarded_variables_join_upstream_runtime_env(tmp_path, monkeypatch):
    """Issue 27: under a cluster started beforehand, the metrics file's variable reaches the trainer through the
    runtime env of upstream's ray.init (its own env_vars kept; relative paths made absolute)."""
    monkeypatch.chdir(tmp_path)
    upstream = {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}}
    environ = {"MRTPO_METRICS_JSONL": "runs/x/metrics.jsonl", "MRTPO_SQL_TIMEOUT_S": "2", "HOME": "/home/u"}
    env = with_forwarded_env(upstream, environ)
    assert env["env_vars"] == {
        "TOKENIZERS_PARALLELISM": "true",
        "NCCL_DEBUG": "WARN",
        "MRTPO_METRICS_JSONL": os.path.join(str(tmp_path), "runs/x/metrics.jsonl"),
        "MRTPO_SQL_TIMEOUT_S": "2",
    }
    assert upstream["env_vars"] == {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}  # not modified
    # a value the runtime env already sets (ray job submit --runtime-env-json) wins
    submitted = with_forwarded_env({"env_vars": {"MRTPO_METRICS_JSONL": "/shared/m.jsonl"}}, environ)
    assert submitted["env_vars"]["MRTPO_METRICS_JSONL"] == "/shared/m.jsonl"
    assert with_forwarded_env(None, {}) == {}
    names, paths = forwarded_env()
    assert "MRTPO_METRICS_JSONL" in names and "MRTPO_SQL_DB_ROOT" in names and "MRTPO_SQL_DB_ROOT" in paths


@pytest.mark.parametrize("value", ["", None])
def test_unset_variables_are_not_forwarded(value):
    environ = {} if value is None else {"MRTPO_METRICS_JSONL": value}
    assert with_forwarded_env({"env_vars": {"A": "1"}}, environ) == {"env_vars": {"A": "1"}}


def test_hooked_ray_init_forwards_and_checks_right_after_joining(monkeypatch):
    """``hook_ray_init`` around a stand-in for Ray's own ``ray.init`` and ``cluster_resources`` (no Ray started
    here; the real join runs in tests/cpu/test_cluster_paths.py): upstream's runtime env gains the forwarded
    variables, a cluster short of GPUs ends the driver with the one line, hooking twice wraps Ray's init once."""
    import ray

    from mrtpo_openrlhf.adapter.cluster import hook_ray_init

    # parsed first: parse_upstream undoes the monkeypatches made before it (the stand-ins below go at teardown)
    args = flat(monkeypatch, "--actor.num_gpus_per_node", "8", "--vllm.num_engines", "8", "--train.colocate_all")
    calls, resources = [], {"GPU": 4.0}

    def joined(*args, **kwargs):
        calls.append(kwargs)
        return SimpleNamespace(address_info={"gcs_address": "10.0.0.1:6379"})

    monkeypatch.setattr(ray, "init", joined)
    monkeypatch.setattr(ray, "cluster_resources", lambda: resources)
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append("shutdown"))
    monkeypatch.setenv("MRTPO_METRICS_JSONL", "/shared/run/metrics.jsonl")
    monkeypatch.delenv("MRTPO_SKIP_GPU_CHECK", raising=False)
    hook_ray_init(args)
    hook_ray_init(args)
    assert ray.init._mrtpo_original is joined
    with pytest.raises(SystemExit) as stop:
        ray.init(runtime_env={"env_vars": {"NCCL_DEBUG": "WARN"}})
    assert str(stop.value).startswith("mrtpo: the Ray cluster at 10.0.0.1:6379 has 4 GPUs, the flags need 8")
    assert calls == [
        {"runtime_env": {"env_vars": {"NCCL_DEBUG": "WARN", "MRTPO_METRICS_JSONL": "/shared/run/metrics.jsonl"}}},
        "shutdown",
    ]
    resources["GPU"] = 8.0
    assert ray.init(runtime_env={}).address_info["gcs_address"] == "10.0.0.1:6379"
    resources["GPU"] = 0.0
    monkeypatch.setenv("MRTPO_SKIP_GPU_CHECK", "1")
    ray.init()  # an autoscaling cluster: no check
    monkeypatch.delenv("MRTPO_SKIP_GPU_CHECK")
    hook_ray_init(args, check_gpus=False)  # the CPU layer's fake GPUs are not counted
    ray.init()
