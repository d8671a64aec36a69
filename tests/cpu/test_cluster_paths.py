"""The cluster user's path on CPU, against private Ray heads started beforehand (slow; issue 26 items 2 and 4,
issue 27's runtime env):

- a relaunch of the GPU-script command form (``RAY_JOB_ADDRESS=... bash examples/scripts/train_mrtpo_if.sh``,
  paper-scale flags, CPU overrides appended) after its job was stopped past a checkpoint resumes at that checkpoint's
  step by default, and the metrics file holds each step once;
- the training CLI run straight against a running cluster (``RAY_ADDRESS``, no ``ray job submit``) whose raylet does
  not have ``MRTPO_METRICS_JSONL``: the driver's variable reaches the trainer through the runtime env;
- a driver without CUDA and without the CPU layer against a cluster with fewer GPUs than the flags place: one line
  naming both counts, right after ``ray.init``.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrtpo_openrlhf.launch import cpu_grpo_args, write_prompt_jsonl
from mrtpo_openrlhf.launch.runner import cpu_env, start_ray_head
from mrtpo_openrlhf.metrics import read_metrics
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
pytest.importorskip("vllm")
RAY = str(Path(sys.executable).with_name("ray"))
CLI = [sys.executable, "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
REWARD = Path(__file__).with_name("multi_reward.py")
STEPS = 3  # room after the step-1 checkpoint (2 steps, ~20 s at 16 new tokens), so the stop lands before the end


def ray_job(*args, address):
    out = subprocess.run([RAY, "job", *args, "--address", address], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def head_env():
    env = cpu_env()
    env.pop("MRTPO_METRICS_JSONL", None)
    env["PATH"] = os.pathsep.join([str(Path(RAY).parent), env.get("PATH", "")])
    return env


def test_relaunch_of_the_gpu_script_form_resumes_from_its_checkpoint(tmp_path):
    model = make_tiny_model(tmp_path / "model", seed=0)
    out_dir = tmp_path / "run"
    env = head_env()
    dashboard = free_port()
    head = start_ray_head(env, num_cpus=8, num_gpus=2, dashboard_port=dashboard)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        job_env = dict(
            env, RAY_JOB_ADDRESS=address, MODEL=str(model), OUT=str(out_dir), NUM_GPUS="1", N_SAMPLES="4",
            ROLLOUT_BATCH="2", MAX_NEW_TOKENS="16", MAX_LEN="256", LR="1e-2", WARMUP="0", SAVE_STEPS="1",
            DATA=str(REPO_ROOT / "mrtpo_openrlhf" / "data" / "instructions" / "train_mini.jsonl"),
        )  # fmt: skip
        cpu_overrides = [
            "--ds.attn_implementation", "sdpa", "--vllm.sync_backend", "gloo", "--vllm.enforce_eager",
            "--data.max_samples", str(2 * STEPS), "--train.micro_batch_size", "8", "--rollout.micro_batch_size", "8",
        ]  # fmt: skip
        command = ["bash", str(REPO_ROOT / "examples" / "scripts" / "train_mrtpo_if.sh"), *cpu_overrides]
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        first = subprocess.Popen(command, env=job_env, cwd=tmp_path, **quiet)
        latest = out_dir / "ckpt" / "_actor" / "latest"
        deadline = time.time() + 700
        job_ids = set()
        while not job_ids:  # found while the job starts, so that only the stop is left when the checkpoint lands
            assert first.poll() is None and time.time() < deadline, "the first job ended before it was listed"
            job_ids = set(re.findall(r"raysubmit_\w+", ray_job("list", address=address)))
        (job_id,) = job_ids
        # DeepSpeed writes `latest` after the checkpoint's files: stop at once, so that steps are left to resume
        while not (latest.exists() and latest.read_text().strip() == "global_step1"):
            assert first.poll() is None and time.time() < deadline, "the first job ended before its step-1 checkpoint"
            time.sleep(0.1)
        ray_job("stop", job_id, address=address)  # a crash or a preemption
        first.wait(timeout=180)
        saved = int(latest.read_text().strip().removeprefix("global_step"))
        assert 1 <= saved < STEPS, f"the first job was not stopped before its last step (checkpoint {saved})"
        partial = read_metrics(out_dir / "metrics.jsonl")
        assert [m["step"] for m in partial][:saved] == list(range(1, saved + 1)) and len(partial) <= saved + 1, partial

        again = subprocess.run(command, env=job_env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        log = again.stdout + again.stderr
        assert again.returncode == 0, log[-6000:]
        assert "--ckpt.load_enable" in log and f"resuming at step {saved}" in log, log[-6000:]
        steps = read_metrics(out_dir / "metrics.jsonl")
        assert [m["step"] for m in steps] == list(range(1, STEPS + 1)), steps  # one file, no gap, no repeat
        moved = list(out_dir.glob("metrics.jsonl.superseded-*"))
        assert len(moved) == (len(partial) > saved)  # a step logged past the checkpoint was set aside, not deleted
    finally:
        assert head.stop() == 0


def test_driver_variables_reach_the_trainer_on_a_started_cluster(tmp_path):
    model = make_tiny_model(tmp_path / "model", seed=0)
    prompts = write_prompt_jsonl(tmp_path / "prompts.jsonl", ["Say hello.", "Count to five."])
    args = cpu_grpo_args(model, prompts, REWARD, tmp_path / "ckpt", num_prompts=2, estimator="mrtpo")
    env = head_env()
    head = start_ray_head(env, num_cpus=8, num_gpus=2)
    try:
        metrics = tmp_path / "metrics" / "metrics.jsonl"
        driver_env = dict(env, RAY_ADDRESS=head.address, MRTPO_METRICS_JSONL=str(metrics))
        res = subprocess.run([*CLI, *args], env=driver_env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, (res.stdout + res.stderr)[-6000:]
        (step,) = read_metrics(metrics)
        assert step["step"] == 1 and any(k.startswith("reward/") for k in step), step
    finally:
        assert head.stop() == 0


def test_a_cluster_short_of_gpus_stops_the_driver_with_one_line(tmp_path):
    env = head_env()
    head = start_ray_head(env, num_cpus=4, num_gpus=1)
    try:
        driver_env = {k: v for k, v in env.items() if k != "MRTPO_CPU"}
        driver_env["RAY_ADDRESS"] = head.address
        flags = [
            "--actor.model_name_or_path", "m", "--reward.remote_url", str(REWARD), "--algo.advantage.estimator",
            "mrtpo", "--rollout.n_samples_per_prompt", "4", "--actor.num_gpus_per_node", "2", "--vllm.num_engines", "2",
            "--train.colocate_all", "--preflight-skip",  # the model "m" does not exist: this is about the GPUs
        ]  # fmt: skip
        res = subprocess.run([*CLI, *flags], env=driver_env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 1
        line = res.stderr.strip().splitlines()[-1]
        assert line.startswith("mrtpo: the Ray cluster at") and "has 1 GPUs, the flags need 2" in line, res.stderr
    finally:
        assert head.stop() == 0
