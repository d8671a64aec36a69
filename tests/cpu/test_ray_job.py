"""The README's cluster form, submitted for real: ``RAY_JOB_ADDRESS=http://HEAD:8265 bash
examples/scripts/train_mrtpo_if.sh`` against a private CPU Ray head whose dashboard/job server listens on 127.0.0.1.
The script's ``ray job submit`` ships the repo (package + reward_funcs/) as the runtime env's working_dir; the job
trains 1 step of MRTPO through the paper-scale command line (colocate_all, reference model with KL loss, both
sleep modes: DeepSpeed's turned off on CPU, vLLM's kept; CPU overrides appended), and its status and logs are read
back with ``ray job list/status/logs``."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mrtpo_openrlhf.launch.runner import cpu_env, start_ray_head
from mrtpo_openrlhf.metrics import read_metrics
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("vllm")
RAY = str(Path(sys.executable).with_name("ray"))


def ray_job(*args, address):
    out = subprocess.run([RAY, "job", *args, "--address", address], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_ray_job_submit_trains_on_a_local_head(tmp_path):
    model = make_tiny_model(tmp_path / "model", seed=0)
    out_dir = tmp_path / "run"
    env = cpu_env()
    # the job's entrypoint is `python -m ...` as on a cluster: this environment's python, for the head and the script
    env["PATH"] = os.pathsep.join([str(Path(RAY).parent), env.get("PATH", "")])
    dashboard = free_port()
    head = start_ray_head(env, num_cpus=8, num_gpus=2, dashboard_port=dashboard)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        job_env = dict(
            env, RAY_JOB_ADDRESS=address, MRTPO_GPU="1", MODEL=str(model), OUT=str(out_dir), NUM_GPUS="1",
            N_SAMPLES="4", ROLLOUT_BATCH="2", MAX_NEW_TOKENS="32", MAX_LEN="256", LR="1e-2", WARMUP="0",
            DATA=str(REPO_ROOT / "mrtpo_openrlhf" / "data" / "instructions" / "train_mini.jsonl"),
        )  # fmt: skip
        cpu_overrides = [
            "--ds.attn_implementation", "sdpa", "--vllm.sync_backend", "gloo", "--vllm.enforce_eager",
            "--data.max_samples", "2", "--train.micro_batch_size", "8", "--rollout.micro_batch_size", "8",
            "--ckpt.save_steps", "-1",
        ]  # fmt: skip
        submit = subprocess.run(
            ["bash", str(REPO_ROOT / "examples" / "scripts" / "train_mrtpo_if.sh"), *cpu_overrides],
            env=job_env, capture_output=True, text=True, timeout=840, cwd=tmp_path,
        )  # fmt: skip
        log = submit.stdout + submit.stderr
        assert submit.returncode == 0, log[-6000:]  # `ray job submit` waits and returns the job's status
        assert "_ray_pkg_" in log  # the runtime env's working_dir: the repo was packed and uploaded
        assert "--reward.remote_url reward_funcs/instruction.py" in log  # named inside the shipped copy
        listing = ray_job("list", address=address)
        ids = set(re.findall(r"raysubmit_\w+", listing))
        assert len(ids) == 1, listing
        (job_id,) = ids
        assert "succeeded" in ray_job("status", job_id, address=address).lower()
        logs = ray_job("logs", job_id, address=address)
        assert "Global step 1" in logs and "replay_relevance" in logs, logs[-4000:]
        # both sleeps run on CPU: DeepSpeed's frees the gradient buffers while vLLM generates, vLLM's its KV cache
        assert "GiB of gradient buffers released" in logs and "setting --vllm.enable_sleep off" not in logs
        assert "seconds to fall asleep" in logs, logs[-4000:]
        (step,) = read_metrics(out_dir / "metrics.jsonl")  # the runtime env's env_vars reached the trainer
        assert step["step"] == 1 and any(k.startswith("reward/") and k.endswith("/mean") for k in step), step
    finally:
        left = head.stop()
        assert left == 0
