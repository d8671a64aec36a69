"""``study run``: train every (arm, seed) of a config through the real OpenRLHF path, resumably.

Layout of a study folder (default ``runs/study/<name>``)::

    study.json                      the config as run
    <arm>/seed<k>/config.json       the resolved settings of this run
    <arm>/seed<k>/command.txt       the exact command line (and environment) that ran
    <arm>/seed<k>/metrics.jsonl     per-step metrics (the trainer's MRTPO_METRICS_JSONL)
    <arm>/seed<k>/result.json       written last, only when the run finished and checked out: its presence
                                    is what "done" means, so an interrupted run is rerun from scratch
    <arm>/seed<k>/train.log, model/ the full log and the final checkpoint (not for committing)

CPU backend: the embedded default's flags and private-Ray launcher (``launch.default``/``launch.runner``).
GPU backend: ``examples/scripts/train_*_<task>.sh`` with the config as environment (the paper-scale scripts).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from mrtpo_openrlhf.core.estimators import ADVANTAGE_ESTIMATORS
from mrtpo_openrlhf.core.settings import DEFAULT_PLACEMENT
from mrtpo_openrlhf.launch.runner import raise_interrupted, run_openrlhf_cpu, set_stop_signal_handlers, stop_processes
from mrtpo_openrlhf.launch.watchdog import STALL_SECONDS, RunWatchdog, fmt_minutes, stop_advice
from mrtpo_openrlhf.tasks import get_task

from .config import ARMS, REPO_ROOT, StudyConfig

RESULT = "result.json"


class BaseModelMismatch(RuntimeError):
    """The base model the arms would start from is not the one ``--expect-base`` names."""


def run_dir(root: Path, arm: str, seed: int) -> Path:
    return root / arm / f"seed{seed}"


def is_done(path: Path, results: Path | None = None) -> bool:
    """Done here, or done in another sitting and committed under ``results/runs/<arm>/seed<k>``."""
    return (path / RESULT).is_file() or (results is not None and (results / RESULT).is_file())


def publish(out: Path, results: Path) -> None:
    """Copy a finished run's small files (never the checkpoint) to the committed results folder."""
    from .report.runs import SMALL_FILES

    results.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES:
        if (out / name).is_file():
            shutil.copy2(out / name, results / name)


def seed_prompts(cfg: StudyConfig, root: Path, seed: int, results: Path | None = None) -> Path:
    """The training prompts of ``seed``: the config's data (``prompt_draw = "first"``), or (``per_seed``) the
    ``steps * prompts_per_step`` rows drawn without replacement from it by the seed alone, written to
    ``<root>/prompts/seed<k>.jsonl``; their pool indices and ids go to ``prompts/seed<k>.json`` (also under
    ``results``, committed)."""
    if cfg.prompt_draw == "first":
        return cfg.data_path()
    import hashlib
    import random

    from mrtpo_openrlhf.data.jsonl import read_jsonl, write_jsonl

    pool = read_jsonl(cfg.data_path())
    need = cfg.steps * cfg.prompts_per_step
    if need > len(pool):
        raise ValueError(f"{cfg.data_path()}: {len(pool)} rows, a run needs {need} (steps x prompts_per_step)")
    picked = random.Random(f"prompts-{seed}").sample(range(len(pool)), need)
    path = root / "prompts" / f"seed{seed}.jsonl"
    write_jsonl(path, [pool[i] for i in picked])
    record = {
        "seed": seed,
        "pool": cfg.data,
        "pool_rows": len(pool),
        "indices": picked,
        "ids": [pool[i].get("id", i) for i in picked],
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    for folder in [root, *([results] if results else [])]:
        (folder / "prompts").mkdir(parents=True, exist_ok=True)
        (folder / "prompts" / f"seed{seed}.json").write_text(json.dumps(record) + "\n")
    return path


def cpu_flags(cfg: StudyConfig, arm: str, seed: int, out: Path, model: Path, data: Path | None = None) -> list[str]:
    from mrtpo_openrlhf.launch.default import mrtpo_cpu_args

    spec = ARMS[arm]
    flags = mrtpo_cpu_args(
        cfg.task,
        spec.estimator,
        model,
        out,
        cfg.steps,
        cfg.prompts_per_step,
        cfg.samples_per_prompt,
        cfg.max_new_tokens,
        cfg.beta,
        cfg.warmup_steps,
        data or cfg.data_path(),
        lr=cfg.lr,
        temperature=cfg.temperature,
        seed=seed,
    )
    return flags + spec.flags() + list(cfg.extra_args)


def gpu_command(cfg: StudyConfig, arm: str, seed: int, out: Path) -> tuple[list[str], dict[str, str]]:
    """The paper-scale script and its environment for one run (MRTPO_GPU=1: never the CPU fallback)."""
    spec = ARMS[arm]
    script_name = get_task(cfg.task).gpu_script
    if script_name is None:
        raise ValueError(f"task {cfg.task!r} has no GPU script (gpu_script in mrtpo_openrlhf/tasks/<name>/__init__.py)")
    script = REPO_ROOT / "examples" / "scripts" / script_name
    # The placement settings only where the estimator reads them (the CLI warns about flags without effect).
    method = (
        {
            "PLACEMENT": spec.placement or DEFAULT_PLACEMENT,
            **({"RELEVANCE": spec.relevance} if spec.relevance else {}),
            "BETA": str(cfg.beta),
            "WARMUP": str(cfg.warmup_steps),
        }
        if "placement" in getattr(ADVANTAGE_ESTIMATORS.get(spec.estimator), "reads", ())
        else {}
    )
    env = {
        "MRTPO_GPU": "1",
        "ESTIMATOR": spec.estimator,
        **method,
        "MODEL": cfg.model,
        "DATA": str(cfg.data_path()),
        "OUT": str(out),
        "SEED": str(seed),
        "LR": str(cfg.lr),
        "N_SAMPLES": str(cfg.samples_per_prompt),
        "ROLLOUT_BATCH": str(cfg.prompts_per_step),
        "MAX_NEW_TOKENS": str(cfg.max_new_tokens),
        "RUN_NAME": f"{cfg.name}-{arm}-seed{seed}",
        **{k: str(v) for k, v in cfg.env.items()},
    }
    args = [
        "--data.max_samples",
        str(cfg.steps * cfg.prompts_per_step),
        "--rollout.temperature",
        str(cfg.temperature),
        *(["--algo.mrtpo.relevance", spec.relevance] if spec.relevance else []),  # whatever the script reads
        *cfg.extra_args,
    ]
    return ["bash", str(script), *args], env


def run_study(
    cfg: StudyConfig,
    root: Path,
    dry_run: bool = False,
    only: list[str] | None = None,
    seeds: list[int] | None = None,
    timeout: float | None = None,
    say: Callable[[str], None] = print,
    results: Path | None = None,
    stall_timeout: float | None = STALL_SECONDS,
    expect_base: str | None = None,
    until: float | None = None,
    run_minutes: float | None = None,
) -> int:
    """Run what is not done yet; return the number of runs that failed (0: every selected run is done).

    until, run_minutes: a seed's runs go back to back on one machine, so a seed is started only when all of its
    runs left fit before ``until`` (a time.time() value), each taking ``run_minutes`` (else the mean of the runs
    finished in this call); the study stops before a seed that does not fit.

    expect_base: a prefix of the weights sha256 every arm must start from (CPU backend); another base model is
    refused before any run starts (``BaseModelMismatch``), since its runs would not pair with those already made.

    results: the committed results folder (``docs/results/<name>``): each finished run's small files are copied to
    ``results/runs/<arm>/seed<k>`` at once, and a run found there counts as done, so a study spans sittings and
    machines through git.
    """
    root = Path(root).resolve()
    pub = (lambda a, s: run_dir(Path(results).resolve() / "runs", a, s)) if results else (lambda a, s: None)
    runs = [(a, s) for a, s in cfg.runs() if (not only or a in only) and (not seeds or s in seeds)]
    todo = [(a, s) for a, s in runs if not is_done(run_dir(root, a, s), pub(a, s))]
    say(
        f"[study] {cfg.name}: {len(runs)} runs ({len(runs) - len(todo)} already done), backend {cfg.backend}, "
        f"folder {root}"
    )
    if not dry_run:
        root.mkdir(parents=True, exist_ok=True)
        (root / "study.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
        if results:
            Path(results).mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / "study.json", Path(results) / "study.json")
        # SIGTERM/SIGHUP between runs stop the study like Ctrl-C (the launcher itself handles them during a run)
        set_stop_signal_handlers(raise_interrupted)
    model, base = None, None
    if cfg.backend == "cpu" and not dry_run:
        from mrtpo_openrlhf.evaluation.generation import resolve_model

        from .cold_start import weights_sha256

        model = Path(resolve_model(cfg.model_ref()))
        base = {"path": str(model), "weights_sha256": weights_sha256(model)}  # what every arm starts from
        say(f"[study] base model {model}: weights sha256 {base['weights_sha256'][:12]}")
        if expect_base and not base["weights_sha256"].startswith(expect_base.lower()):
            raise BaseModelMismatch(
                f"base model {model} has weights sha256 {base['weights_sha256'][:12]}, not the expected "
                f"{expect_base.lower()[:12]}: its runs would not pair with the ones made on that base (rebuild it, "
                "or amend the plan and drop --expect-base)"
            )
    failed, durations, t_start = 0, [], time.time()
    for i, (arm, seed) in enumerate(todo):
        if until is not None and (i == 0 or todo[i - 1][1] != seed):
            left = sum(1 for _, s in todo[i:] if s == seed)
            per_run = run_minutes * 60 if run_minutes else (sum(durations) / len(durations) if durations else None)
            if per_run is None:
                raise ValueError("--until needs --run-minutes before any run of this call has finished")
            if time.time() + left * per_run > until:
                say(
                    f"[study] seed {seed}: {left} runs of ~{fmt_minutes(per_run)} do not fit in the "
                    f"{fmt_minutes(max(0.0, until - time.time()))} left; not started (run the same command later)"
                )
                break
        out = run_dir(root, arm, seed)
        eta = f", ETA ~{fmt_minutes(sum(durations) / len(durations) * (len(todo) - i))}" if durations else ""
        say(f"[study] run {i + 1}/{len(todo)}: {arm} seed {seed} (elapsed {fmt_minutes(time.time() - t_start)}{eta})")
        data = seed_prompts(cfg, root, seed, Path(results) if results else None) if not dry_run else None
        ok = _run_one(cfg, arm, seed, out, model, dry_run, timeout, stall_timeout, say, data, base)
        if dry_run:
            continue
        if ok and results:
            publish(out, pub(arm, seed))
        durations.append(float(json.loads((out / RESULT).read_text())["seconds"]) if ok else time.time() - t_start)
        failed += not ok
    if not dry_run:
        say(
            f"[study] finished in {fmt_minutes(time.time() - t_start)}: {len(durations) - failed} ran, {failed} "
            f"failed, {len(todo) - len(durations)} not started; report: python -m mrtpo_openrlhf.study report {root}"
        )
    return failed


def score_heldout(cfg: StudyConfig, out: Path, say: Callable[[str], None]) -> bool:
    """Score the run's final checkpoint on the held-out prompts (``study heldout``, in its own process so vLLM's
    memory is returned) into ``<run>/heldout.json``; False (and the run is not done) if that fails."""
    from .heldout import HELDOUT

    command = [
        sys.executable, "-m", "mrtpo_openrlhf.study", "heldout", "--task", cfg.task, "--data", str(cfg.heldout_path()),
        "--model", str(out / "model"), "--prompts", str(cfg.heldout_prompts), "--samples", str(cfg.heldout_samples),
        "--temperature", str(cfg.temperature), "--max-new-tokens", str(cfg.max_new_tokens), "--out", str(out / HELDOUT),
    ]  # fmt: skip
    say(f"[study]   held-out scoring: {cfg.heldout_prompts} prompts x {cfg.heldout_samples} samples")
    with open(out / "heldout.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0 or not (out / HELDOUT).is_file():
        say(f"[study]   held-out scoring failed (exit {done.returncode}; log: {out / 'heldout.log'})")
        return False
    result = json.loads((out / HELDOUT).read_text())
    per_reward = ", ".join(f"{k} {v:.3f}" for k, v in result["rewards"].items())
    say(f"[study]   held-out: total {result['total']:.3f}, {per_reward}")
    return True


def _run_one(
    cfg: StudyConfig,
    arm: str,
    seed: int,
    out: Path,
    model: Path | None,
    dry_run: bool,
    timeout: float | None,
    stall_timeout: float | None,
    say: Callable[[str], None],
    data: Path | None = None,
    base: dict | None = None,
) -> bool:
    if cfg.backend == "gpu":
        command, env = gpu_command(cfg, arm, seed, out)
        if dry_run:  # the script's own DRY_RUN=print prints the exact OpenRLHF command line it would run
            proc = subprocess.run(
                command, env={**os.environ, **env, "DRY_RUN": "print"}, capture_output=True, text=True, check=False
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{shlex.join(command)} --dry-run failed: {proc.stderr.strip()[-500:]}")
            say(proc.stdout.strip().splitlines()[-1])
            return True
    else:
        flags = cpu_flags(cfg, arm, seed, out, model or Path(cfg.model), data)
        command, env = [sys.executable, "-m", "mrtpo_openrlhf.cli.train_ppo_ray", *flags], {}
        if dry_run:
            say(shlex.join(command))
            return True
    _write_run_files(cfg, arm, seed, out, data, base, command, env)
    t0, load_start = time.time(), os.getloadavg()[1]
    label = f"[study]   {arm} seed {seed}"
    if cfg.backend == "gpu":
        ok, returncode, peak = _train_gpu(cfg, command, env, out, label, timeout, stall_timeout, say)
    else:
        ok, returncode, peak = _train_cpu(cfg, arm, flags, out, label, timeout, stall_timeout, say)
    seconds = time.time() - t0
    steps = (
        sum(1 for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip())
        if (out / "metrics.jsonl").exists()
        else 0
    )
    if ok and steps < cfg.steps:
        say(f"[study]   {arm} seed {seed}: only {steps}/{cfg.steps} steps were logged")
        ok = False
    if ok and cfg.heldout and cfg.backend == "cpu":  # before result.json: a run is done once it is scored
        ok = score_heldout(cfg, out, say)
    if ok:
        _write_result(out, returncode, seconds, steps, peak, load_start)
        say(f"[study]   {arm} seed {seed}: done in {fmt_minutes(seconds)}")
    return ok


def _write_run_files(cfg, arm, seed, out: Path, data, base, command: list[str], env: dict[str, str]) -> None:
    """A fresh run folder (an interrupted run starts from scratch) with its config.json and command.txt."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "config.json").write_text(
        json.dumps(
            {
                "study": cfg.to_dict(),
                "arm": arm,
                "seed": seed,
                "estimator": ARMS[arm].estimator,
                "placement": ARMS[arm].placement,
                **({"relevance": ARMS[arm].relevance} if ARMS[arm].relevance else {}),
                "data": str(data or cfg.data_path()),
                "base_model": base,
            },
            indent=2,
        )
        + "\n"
    )
    (out / "command.txt").write_text(
        " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(command) + "\n"
    )


def _train_gpu(cfg, command, env, out: Path, label, timeout, stall_timeout, say) -> tuple[bool, int, int]:
    """The paper-scale script under the watchdog: (ok, exit status, peak memory: 0, not measured)."""
    with open(out / "train.log", "w") as log:
        proc = subprocess.Popen(
            command, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        watchdog = RunWatchdog(
            out / "metrics.jsonl",
            lambda: stop_processes([proc.pid], None, 10.0),
            say,
            label=label,
            total_steps=cfg.steps,
            stall_seconds=stall_timeout,
            wall_seconds=timeout,
            watch=[out],
        )
        try:
            with watchdog:
                proc.wait()
        finally:
            if proc.poll() is None:  # interrupted: the script's process group must not outlive the study
                stop_processes([proc.pid], None, 10.0)
    ok = proc.returncode == 0 and watchdog.reason is None
    if not ok:
        why = f" ({watchdog.reason})" if watchdog.reason else ""
        say(f"{label}: exit {proc.returncode}{why} (log: {out / 'train.log'})")
    return ok, proc.returncode, 0


def _train_cpu(cfg, arm, flags, out: Path, label, timeout, stall_timeout, say) -> tuple[bool, int, int]:
    """The embedded default's launcher, then ``check_run``: (ok, exit status, peak memory in bytes)."""
    from mrtpo_openrlhf.launch.default import check_run

    res = run_openrlhf_cpu(
        "mrtpo_openrlhf.cli.train_ppo_ray",
        flags,
        out,
        num_cpus=8,
        num_gpus=2,
        timeout=timeout,
        echo=False,
        stall_timeout=stall_timeout,
        total_steps=cfg.steps,
        label=label,
        progress=say,
    )
    problems = (
        check_run(res.metrics_path, ARMS[arm].estimator, res.sync_path)
        if res.ok
        else [f"exit {res.returncode}" + (f" ({res.stopped}: {stop_advice(res.stopped)})" if res.stopped else "")]
    )
    for p in problems:
        say(f"{label}: {p} (log: {res.log_path})")
    return not problems, res.returncode, res.peak_memory_bytes


def _write_result(out: Path, returncode: int, seconds: float, steps: int, peak: int, load_start: float) -> None:
    """result.json, written last: its presence is what "done" means."""
    import torch

    (out / RESULT).write_text(
        json.dumps(
            {
                "returncode": returncode,
                "seconds": round(seconds, 1),
                "steps": steps,
                "peak_memory_gib": round(peak / 2**30, 2),
                "cpu": torch.backends.cpu.get_cpu_capability(),
                # other work on the machine slows Ray's low-priority workers
                "loadavg_5min_start_end": [load_start, os.getloadavg()[1]],
                "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
            },
            indent=2,
        )
        + "\n"
    )
