"""The training CLI on a machine without CUDA: --help and flag checks work; training stops with one line."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
CLI = [sys.executable, "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]


def run(*args):
    env = {k: v for k, v in os.environ.items() if k != "MRTPO_CPU"}
    repo = Path(__file__).resolve().parents[2]  # the relative paths below are the repo's
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300, cwd=repo)


def test_help_lists_our_flags_without_flash_attn():
    res = run("--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "--algo.mrtpo.beta" in res.stdout and "mrtpo" in res.stdout


def test_bad_flags_are_rejected_before_the_device_check():
    res = run("--algo.advantage.estimator", "mrtpo", "--rollout.n_samples_per_prompt", "1")
    assert res.returncode == 2 and "n_samples_per_prompt must be >= 2" in res.stderr


def test_valid_flags_without_cuda_say_how_to_run_on_cpu():
    res = run(
        "--algo.advantage.estimator",
        "mrtpo",
        "--rollout.n_samples_per_prompt",
        "4",
        "--reward.remote_url",
        "reward_funcs/sql.py",
        # data the pre-flight check (which runs first, and needs no device) accepts
        "--data.prompt_dataset",
        "mrtpo_openrlhf/data/sql/train_mini.jsonl",
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "label",
        "--rollout.batch_size",
        "2",
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith("mrtpo: no CUDA device on this machine")
    assert "cli.default" in res.stderr


@pytest.mark.parametrize("value", ["1", "true"])
def test_cli_with_the_cpu_layer_on_does_not_stop_for_want_of_a_gpu(value, monkeypatch):
    """Issue 23: with ``MRTPO_CPU=true`` the CPU patches are applied (``sitecustomize``), so the CLI must count the
    layer as on too, not stop saying there is no GPU (it read only ``"1"``)."""
    from mrtpo_openrlhf.adapter import cluster
    from mrtpo_openrlhf.cli import train_ppo_ray

    seen = []
    monkeypatch.setattr(cluster, "cluster_address", lambda: None)
    monkeypatch.setattr(cluster, "hook_ray_init", lambda args, check_gpus: seen.append(check_gpus))
    monkeypatch.setenv("MRTPO_CPU", value)
    train_ppo_ray.require_device(SimpleNamespace())
    assert seen == [False]  # the layer's fake GPUs are not counted
    monkeypatch.setenv("MRTPO_CPU", "0")
    with pytest.raises(SystemExit, match="no CUDA device"):
        train_ppo_ray.require_device(SimpleNamespace())


def test_no_cuda_message_names_what_the_doctor_found(monkeypatch, tmp_path):
    """Issue 47 item 2: a GPU node whose driver is too old for torch's CUDA 13 build was sent to the CPU demo; the
    message now names the driver and its fix (a fake nvidia-smi on PATH, torch's CUDA build faked)."""
    from mrtpo_openrlhf.cli import train_ppo_ray

    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho '550.54.15, NVIDIA H100 80GB HBM3, 81559'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/bin")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    text = train_ppo_ray.no_device_message()
    assert text.startswith("mrtpo: no CUDA device on this machine: NVIDIA driver: 550.54.15; torch ")
    assert "upgrade the NVIDIA driver to >= 580" in text and "cli.default" not in text
    monkeypatch.setattr(torch.version, "cuda", None)  # a new driver, a CPU torch wheel
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\necho '580.65.06, NVIDIA H100 80GB HBM3, 81559'\n")
    text = train_ppo_ray.no_device_message()
    assert "torch: " in text and "a CPU-only build -> bash scripts/install_gpu.sh" in text and "cli.default" not in text
