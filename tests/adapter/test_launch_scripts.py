"""The paper-scale launch scripts produce command lines that upstream's parser (with our hook) accepts."""

import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_args import parse_upstream

from mrtpo_openrlhf.core.settings import DEFAULT_BETA, DEFAULT_WARMUP_STEPS

SCRIPTS = Path(__file__).resolve().parents[2] / "examples" / "scripts"
DATA = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data"
# A dry run also runs the CLI's pre-flight check with the command's `python` (this venv's), on real rows.
VENV_BIN = str(Path(sys.executable).parent)
BUNDLED = {
    "sql": DATA / "sql/train_mini.jsonl",
    "if": DATA / "instructions/train_mini.jsonl",
    "tool": DATA / "tool/train_mini.jsonl",
}


def test_gpu_script_passes_the_method_settings_it_is_given(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{fake}:{VENV_BIN}:{os.environ['PATH']}",
        DRY_RUN="1",
        DATA=str(BUNDLED["if"]),
        ROLLOUT_BATCH="2",
        OUT=str(tmp_path / "out"),
        BETA="0.25",
        PLACEMENT="joint",
        RELEVANCE="loggap",
        CAP="none",
    )
    out = subprocess.run(
        ["bash", str(SCRIPTS / "train_mrtpo_if.sh")], env=env, capture_output=True, text=True, check=True
    ).stdout
    args = vars(parse_upstream(shlex.split(out.strip().splitlines()[-1])[3:], monkeypatch))
    assert args["algo.mrtpo.beta"] == 0.25 and args["algo.mrtpo.placement"] == "joint"
    assert args["algo.mrtpo.relevance"] == "loggap"
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
        PATH=f"{fake}:{VENV_BIN}:{os.environ['PATH']}",
        DRY_RUN="1",
        DATA=str(BUNDLED[script.split("_")[2].removesuffix(".sh")]),
        ROLLOUT_BATCH="2",
        OUT=str(tmp_path / "out"),
    )
    out = subprocess.run(["bash", str(SCRIPTS / script)], env=env, capture_output=True, text=True, check=True).stdout
    argv = shlex.split(out.strip().splitlines()[-1])
    assert argv[0] == str(REPO / ".venv" / "bin" / "python")  # PYTHON unset: the repo's .venv where there is one
    assert argv[1:3] == ["-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
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


REPO = SCRIPTS.parents[1]


def script_env(tmp_path, **overrides):
    """The environment of a user without GPUs (no nvidia-smi on PATH) and without any layout variable set; the
    scripts run this worktree's package (PYTHONPATH), whatever the virtualenv has installed."""
    drop = {"NUM_NODES", "NUM_GPUS", "VLLM_TP", "TRAIN_BATCH", "RUN_NAME", "ROLLOUT_BATCH", "N_SAMPLES", "RESUME"}
    drop |= {"RAY_JOB_ADDRESS", "MRTPO_GPU", "MRTPO_CPU", "DRY_RUN", "MODEL", "DATA", "OUT", "BETA", "PLACEMENT"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists())
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(overrides)
    return env


def gpu_command(tmp_path, monkeypatch, script="train_mrtpo_sql.sh", args=(), **overrides):
    env = script_env(tmp_path, MRTPO_GPU="1", DRY_RUN="print", DATA=str(tmp_path / "rows.jsonl"), **overrides)
    res = subprocess.run(["bash", str(SCRIPTS / script), *args], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    line = res.stdout.strip().splitlines()[-1]
    return res.stdout, line, vars(parse_upstream(shlex.split(line)[3:], monkeypatch))


@pytest.mark.parametrize("nodes, gpus", [(1, 8), (2, 8), (4, 8)])
def test_gpu_layouts_dry_run(tmp_path, monkeypatch, nodes, gpus):
    """Issue 26 item 7: NUM_NODES x NUM_GPUS; the batch sizes come out whole on every GPU and the cluster check
    (``adapter.cluster.gpus_needed``) asks for exactly those GPUs."""
    from mrtpo_openrlhf.adapter.cluster import gpus_needed

    _, _, args = gpu_command(tmp_path, monkeypatch, NUM_NODES=str(nodes), NUM_GPUS=str(gpus))
    world = nodes * gpus
    assert args["actor.num_nodes"] == args["ref.num_nodes"] == nodes
    assert args["actor.num_gpus_per_node"] == args["ref.num_gpus_per_node"] == gpus
    assert args["vllm.num_engines"] * args["vllm.tensor_parallel_size"] == world
    responses = args["rollout.batch_size"] * args["rollout.n_samples_per_prompt"]
    assert responses == args["train.batch_size"] == 512
    per_gpu = args["train.batch_size"] // world
    assert args["train.batch_size"] % world == 0 and per_gpu % args["train.micro_batch_size"] == 0
    # DeepSpeed's gradient accumulation (upstream's formula) is whole, upstream's rollout assertion holds
    assert (
        args["train.batch_size"] // args["train.micro_batch_size"] // world * args["train.micro_batch_size"] * world
        == 512
    )
    assert (
        responses // args["rollout.micro_batch_size"] >= world
        and (responses // world) % args["rollout.micro_batch_size"] == 0
    )
    assert gpus_needed(SimpleNamespace(**args))[0] == world


@pytest.mark.parametrize(
    "layout, hint",
    [
        ({"NUM_GPUS": "6"}, "set ROLLOUT_BATCH to a multiple of 3 (e.g. 63 or 66)"),
        ({"NUM_NODES": "3", "NUM_GPUS": "8"}, "set ROLLOUT_BATCH to a multiple of 3 (e.g. 63 or 66)"),
        ({"NUM_GPUS": "8", "TRAIN_BATCH": "100"}, "does not divide the 512 responses of a step"),
        ({"NUM_GPUS": "6", "TRAIN_BATCH": "256"}, "set TRAIN_BATCH to a multiple of 6"),
        ({"NUM_NODES": "two"}, "NUM_NODES must be a positive whole number, got 'two'"),
        ({"VLLM_TP": "3"}, "VLLM_TP 3 does not divide the 8 GPUs"),
    ],
)
def test_gpu_counts_that_do_not_divide_the_batch_stop_with_one_line(tmp_path, layout, hint):
    env = script_env(tmp_path, MRTPO_GPU="1", DRY_RUN="print", DATA=str(tmp_path / "rows.jsonl"), **layout)
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("[mrtpo] ") and hint in line


@pytest.mark.parametrize(
    "layout", [{"NUM_GPUS": "6", "ROLLOUT_BATCH": "48"}, {"NUM_NODES": "3", "ROLLOUT_BATCH": "66"}]
)
def test_the_suggested_batch_works(tmp_path, monkeypatch, layout):
    _, _, args = gpu_command(tmp_path, monkeypatch, **layout)
    world = args["actor.num_nodes"] * args["actor.num_gpus_per_node"]
    assert args["train.batch_size"] % (world * args["train.micro_batch_size"]) == 0


def test_cluster_submission_never_runs_the_cpu_demo(tmp_path, monkeypatch):
    """Issue 26 item 1: RAY_JOB_ADDRESS on a login node without nvidia-smi (MRTPO_CPU=1 even, as the CPU layer sets
    it) takes the GPU command line, never the local demo; the job's paths are named inside the shipped repo."""
    env = script_env(
        tmp_path, RAY_JOB_ADDRESS="http://127.0.0.1:9", MRTPO_CPU="1", DRY_RUN="print", OUT=str(tmp_path / "shared"),
        DATA=str(REPO / "mrtpo_openrlhf" / "data" / "sql" / "train_mini.jsonl"), MODEL="Qwen/Qwen2.5-Coder-3B-Instruct",
    )  # fmt: skip
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    argv = shlex.split(res.stdout.strip().splitlines()[-1])
    argv = argv[argv.index("--") + 1 :]  # the job's entrypoint
    assert (
        argv[:3] == ["python3", "-m", "mrtpo_openrlhf.cli.train_ppo_ray"] and "CPU embedded default" not in res.stdout
    )
    args = vars(parse_upstream(argv[3:], monkeypatch))
    assert args["reward.remote_url"] == "reward_funcs/sql.py"
    assert args["data.prompt_dataset"] == "mrtpo_openrlhf/data/sql/train_mini.jsonl"
    assert args["actor.model_name_or_path"] == "Qwen/Qwen2.5-Coder-3B-Instruct"  # a hub id stays as it is
    assert args["ckpt.path"] == str(tmp_path / "shared" / "ckpt")
    # without OUT the checkpoints and metrics would land on whichever node: one line asks for shared storage
    env.pop("OUT")
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "set OUT" in res.stderr


def test_relaunch_resumes_by_default_and_paths_are_normalised(tmp_path, monkeypatch):
    """Issue 26 item 4 (the command form: upstream resumes where a checkpoint is, else starts at step 0) and issue 27
    (printed paths without ``examples/scripts/../../``; a relative OUT made absolute against the caller's folder)."""
    out, line, args = gpu_command(tmp_path, monkeypatch, OUT="runs/../my-run")
    assert args["ckpt.load_enable"] is True and args["ckpt.path"] == str(tmp_path / "my-run" / "ckpt")
    assert args["reward.remote_url"] == str(REPO / "reward_funcs" / "sql.py")
    assert "/../" not in out and "/./" not in out
    assert f"metrics: {tmp_path / 'my-run' / 'metrics.jsonl'}" in out
    _, _, fresh = gpu_command(tmp_path, monkeypatch, RESUME="0")
    assert fresh["ckpt.load_enable"] is False


def test_reward_weights_reach_the_gpu_command(tmp_path, monkeypatch):
    _, _, args = gpu_command(tmp_path, monkeypatch, REWARD_WEIGHTS="format=0.5,execution=2")
    assert args["algo.mrtpo.reward_weights"] == (("format", 0.5), ("execution", 2.0))


def cpu_dry_run(tmp_path, monkeypatch, args=(), **overrides):
    """The CPU branch up to the command it would run (cli.default --dry-run: no Ray, no training)."""
    from mrtpo_openrlhf.models import make_tiny_model

    model = make_tiny_model(tmp_path / "model", seed=0)
    env = script_env(tmp_path, MRTPO_CPU="1", MODEL=str(model), **overrides)
    res = subprocess.run(
        ["bash", str(SCRIPTS / "train_mrtpo_sql.sh"), "--dry-run", *args],
        env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    (line,) = [x for x in res.stdout.splitlines() if "-m mrtpo_openrlhf.cli.train_ppo_ray" in x]
    argv = shlex.split(line.split(" && ", 1)[1])
    argv = argv[argv.index("mrtpo_openrlhf.cli.train_ppo_ray") + 1 :]
    return model, vars(parse_upstream(argv, monkeypatch))


def test_cpu_branch_takes_the_documented_variables_and_extra_flags(tmp_path, monkeypatch):
    """Issue 27: MODEL, DATA, OUT, BETA (and the other method settings) work on the CPU branch, and extra flags pass
    through to the training CLI as on the GPU branch (``--logger.tensorboard_dir`` was refused)."""
    data = REPO / "mrtpo_openrlhf" / "data" / "sql" / "train_mini.jsonl"
    model, args = cpu_dry_run(
        tmp_path, monkeypatch, ["--logger.tensorboard_dir", str(tmp_path / "tb"), "--algo.mrtpo.cap", "2"],
        DATA=str(data), OUT=str(tmp_path / "out"), BETA="0.3", PLACEMENT="joint", LR="1e-5", REWARD_WEIGHTS="format=2",
        RELEVANCE="js-contrast",
    )  # fmt: skip
    assert args["actor.model_name_or_path"] == str(model) and args["data.prompt_dataset"] == str(data)
    assert args["ckpt.output_dir"] == str(tmp_path / "out" / "model")
    assert args["algo.mrtpo.beta"] == 0.3 and args["algo.mrtpo.placement"] == "joint"
    assert args["actor.adam.lr"] == 1e-5 and args["algo.mrtpo.reward_weights"] == (("format", 2.0),)
    assert args["algo.mrtpo.relevance"] == "js-contrast"
    assert args["logger.tensorboard_dir"] == str(tmp_path / "tb") and args["algo.mrtpo.cap"] == 2.0


@pytest.mark.parametrize("var", ["NUM_GPUS", "NUM_NODES", "TRAIN_BATCH"])
def test_cpu_branch_refuses_what_does_not_apply_in_one_line(tmp_path, var):
    env = script_env(tmp_path, MRTPO_CPU="1", **{var: "8"})
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"[mrtpo] {var} does not apply to the CPU embedded default") and "MRTPO_GPU=1" in line


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
    assert args[args.index("--") + 1 : args.index("--") + 4] == ["python3", "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]


def test_gpu_script_defaults_are_the_gpu_run_settings(tmp_path, monkeypatch):
    """``RUN_SETTINGS["gpu"]`` (core/settings.py) is what the GPU script runs when no variable is set: the study
    config and the docs read the former, a cluster run gets the latter."""
    from mrtpo_openrlhf.core.settings import RUN_SETTINGS

    _, _, args = gpu_command(tmp_path, monkeypatch)
    gpu = RUN_SETTINGS["gpu"]
    assert args["rollout.temperature"] == gpu.temperature
    assert args["actor.adam.lr"] == gpu.lr
    assert args["rollout.batch_size"] == gpu.prompts_per_step
    assert args["rollout.n_samples_per_prompt"] == gpu.samples_per_prompt
    assert args["actor.gradient_checkpointing_enable"] == gpu.gradient_checkpointing


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " yes ", "On", "0", "false", "", "2", "enabled"])
def test_scripts_read_the_switches_as_the_python_side_does(value):
    from mrtpo_openrlhf.env_flags import flag_on

    shell = f'source "{SCRIPTS / "_platform.sh"}"; flag_on MRTPO_GPU && echo on || echo off'
    env = dict(os.environ, MRTPO_GPU=value)
    res = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, check=True)
    assert (res.stdout.strip() == "on") == flag_on("MRTPO_GPU", {"MRTPO_GPU": value})


def test_cluster_dry_run_prints_the_complete_submit_line(tmp_path, monkeypatch):
    """Issue 49 item 2: DRY_RUN=print with RAY_JOB_ADDRESS printed a bare `python -m ...` without `ray job submit`, its
    runtime env or MRTPO_METRICS_JSONL (the only way metrics.jsonl gets written). Now it is the one line to paste."""
    import json

    env = script_env(
        tmp_path, RAY_JOB_ADDRESS="http://head:8265", DRY_RUN="print", OUT=str(tmp_path / "shared"),
        DATA=str(BUNDLED["sql"]), MRTPO_SQL_DB_ROOT="/shared/bird/train_databases",
    )  # fmt: skip
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    argv = shlex.split(res.stdout.strip().splitlines()[-1])
    assert argv[:5] == ["ray", "job", "submit", "--address", "http://head:8265"]
    assert argv[5] == "--runtime-env-json" and argv[7] == "--"
    runtime_env = json.loads(argv[6])
    assert runtime_env["working_dir"] == str(REPO)
    assert runtime_env["env_vars"]["MRTPO_METRICS_JSONL"] == str(tmp_path / "shared" / "metrics.jsonl")
    assert runtime_env["env_vars"]["MRTPO_SQL_DB_ROOT"] == "/shared/bird/train_databases"
    assert argv[8:11] == ["python3", "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
    args = vars(parse_upstream(argv[11:], monkeypatch))
    assert args["ckpt.path"] == str(tmp_path / "shared" / "ckpt") and args["ckpt.max_num"] == 3


def test_gpu_dry_run_with_a_python_without_torch_is_one_line(tmp_path):
    """Issue 49 item 2: `DRY_RUN=1 MRTPO_GPU=1` ended in a traceback (`No module named 'torch'`) from the python on
    PATH. The Python is PYTHON, else .venv's, else python3; one without torch is named with the fix."""
    fake = tmp_path / "python"  # a Python whose `import torch` fails, as a bare system python3's does
    fake.write_text(
        f'#!/bin/sh\nif [ "$1" = -c ] && [ "$2" = \'import torch\' ]; then exit 1; fi\nexec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    env = script_env(tmp_path, MRTPO_GPU="1", DRY_RUN="1", DATA=str(BUNDLED["sql"]), PYTHON=str(fake))
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"[mrtpo] {fake} has no torch: install the GPU stack (bash scripts/install_gpu.sh")


def smoke_lines(tmp_path, gpus=2, **overrides):
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    listing = "\\n".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i})" for i in range(gpus))
    (fake / "nvidia-smi").write_text(f"#!/bin/sh\nprintf '{listing}\\n'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = script_env(tmp_path, SMOKE="1", DRY_RUN="print", OUT=str(tmp_path / "smoke"), **overrides)
    env["PATH"] = f"{fake}:{env['PATH']}"
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-3:]


def test_smoke_run_command_lines_flag_by_flag(tmp_path, monkeypatch):
    """Issue 47: SMOKE=1 is the bundled rows, a 0.5B public instruct model, this node's 1-2 GPUs, STEPS=3 steps: the
    first 2 with a checkpoint at step 2, then the same command resumed for step 3, then launch/smoke.py's checks.
    Each training line goes through upstream's parser (with our hook), flag by flag."""
    first, second, check = (shlex.split(line) for line in smoke_lines(tmp_path))
    one = vars(parse_upstream(first[3:], monkeypatch))
    two = vars(parse_upstream(second[3:], monkeypatch))
    assert one["actor.model_name_or_path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert one["data.prompt_dataset"] == str(BUNDLED["sql"]) and one["rollout.max_new_tokens"] == 256
    assert one["actor.num_gpus_per_node"] == 2 and one["vllm.num_engines"] == 2 and one["actor.num_nodes"] == 1
    assert one["rollout.batch_size"] == 4 and one["rollout.n_samples_per_prompt"] == 4
    assert one["data.max_samples"] == 8 and one["ckpt.save_steps"] == 2  # steps 1-2, a checkpoint at 2
    assert two["data.max_samples"] == 12 and two["ckpt.load_enable"] is True  # step 3, resumed from it
    assert one["ckpt.path"] == two["ckpt.path"] == str(tmp_path / "smoke" / "ckpt") and one["ckpt.max_num"] == 1
    world = one["actor.num_nodes"] * one["actor.num_gpus_per_node"]
    assert one["train.batch_size"] % (world * one["train.micro_batch_size"]) == 0
    assert one["algo.advantage.estimator"] == "mrtpo" and one["ds.attn_implementation"] == "flash_attention_2"
    assert set(one) == set(two) and {k for k in one if one[k] != two[k]} == {
        "data.max_samples", "ckpt.save_steps", "ckpt.load_enable"
    } - ({"ckpt.load_enable"} if one["ckpt.load_enable"] else set())  # fmt: skip
    assert check[1:] == ["-m", "mrtpo_openrlhf.launch.smoke", "--out", str(tmp_path / "smoke"), "--estimator",
                         "mrtpo", "--steps", "3"]  # fmt: skip
    (single,) = {vars(parse_upstream(shlex.split(smoke_lines(tmp_path, gpus=1)[0])[3:], monkeypatch))[
        "actor.num_gpus_per_node"]}  # fmt: skip
    assert single == 1
    sdpa = vars(parse_upstream(shlex.split(smoke_lines(tmp_path, ATTN_IMPL="sdpa")[0])[3:], monkeypatch))
    assert sdpa["ds.attn_implementation"] == "sdpa"


def test_steps_and_kept_checkpoints_reach_both_branches(tmp_path, monkeypatch):
    """Issue 49 item 11: STEPS=2 was silently ignored. GPU: the first STEPS x ROLLOUT_BATCH prompts; CPU: --steps."""
    _, _, args = gpu_command(tmp_path, monkeypatch, STEPS="5", ROLLOUT_BATCH="16", KEEP_CKPTS="2")
    assert args["data.max_samples"] == 80 and args["ckpt.max_num"] == 2
    env = script_env(tmp_path, MRTPO_GPU="1", DRY_RUN="print", DATA="x.jsonl", STEPS="5", EPISODES="2")
    res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 2 and "STEPS counts the steps of one pass" in res.stderr


@pytest.mark.parametrize(
    "var, expected",
    [
        ("NUM_GPU", "[mrtpo] NUM_GPU is not read by the scripts: set NUM_GPUS"),
        ("MAX_STEPS", "[mrtpo] MAX_STEPS is not read by the scripts: set STEPS"),
        ("MRTPO_GPUS", "[mrtpo] MRTPO_GPUS is not a variable mrtpo-openrlhf reads: did you mean MRTPO_GPU?"),
        ("MRTPO_SQL_DBROOT", "[mrtpo] MRTPO_SQL_DBROOT is not a variable mrtpo-openrlhf reads: did you mean "
                             "MRTPO_SQL_DB_ROOT?"),
    ],
)  # fmt: skip
def test_a_variable_the_scripts_would_ignore_stops_them(tmp_path, var, expected):
    """Issue 49 item 11: a misspelt variable was silently ignored; both branches now stop before anything runs."""
    for branch in ({"MRTPO_GPU": "1", "DRY_RUN": "print", "DATA": "x.jsonl"}, {"MRTPO_CPU": "1"}):
        env = script_env(tmp_path, **branch, **{var: "2"})
        res = subprocess.run(["bash", str(SCRIPTS / "train_mrtpo_sql.sh")], env=env, capture_output=True, text=True)
        assert res.returncode == 2 and res.stdout == "", res.stdout
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(expected) and line.endswith("; unset it to go on")


def test_the_variable_lists_cover_what_the_code_reads():
    """``script_vars``: every MRTPO_* name in the package and scripts is known, and every variable the scripts read
    from the environment is listed (docs/gpu.md's table is this list)."""
    import re

    from mrtpo_openrlhf.script_vars import MISSPELLINGS, MRTPO_VARS, SCRIPT_VARS

    sources = [*REPO.glob("mrtpo_openrlhf/**/*.py"), *REPO.glob("reward_funcs/*.py"), *REPO.glob("benchmarks/*.py")]
    sources += [*REPO.glob("eval/**/*.py"), *REPO.glob("scripts/*"), *REPO.glob("examples/**/*.sh")]
    sources += [*REPO.glob("docs/**/*.sh"), *REPO.glob("benchmarks/*.sh")]
    sources = [p for p in sources if p.name != "script_vars.py" and p.is_file()]  # not the list itself
    read = {name for path in sources for name in re.findall(r"\bMRTPO_[A-Z0-9_]+", path.read_text())}
    assert read - MRTPO_VARS == set()
    scripts = "".join(p.read_text() for p in SCRIPTS.glob("*.sh"))
    internal = {
        "HERE",
        "ROOT",
        "PWD",
        "PYTHONPATH",
        "WORLD",
        "RESPONSES",
        "TRAIN_MICRO",
        "ROLLOUT_MICRO",
        "BASH_SOURCE",
    }
    env_read = set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)(?::[-?+=])", scripts)) - internal
    assert {v for v in env_read if not v.startswith("MRTPO_")} - set(SCRIPT_VARS) == set()
    assert set(MISSPELLINGS.values()) <= set(SCRIPT_VARS) and not set(MISSPELLINGS) & set(SCRIPT_VARS)
