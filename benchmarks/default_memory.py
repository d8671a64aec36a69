"""Peak memory and step time of the embedded default, and of a study run's shape, at two commits side by side.

    python benchmarks/default_memory.py --before ee17695^ [--after .] [--shape default study] [--steps 3]
    python benchmarks/default_memory.py --before . --env-after MRTPO_CPU_KV_CACHE_MB=256   # one knob, one commit
    python benchmarks/default_memory.py --before . --flag-after=--actor.gradient_checkpointing_enable

Each side runs ``python -m mrtpo_openrlhf.launch.default`` (the entry every checkout has) from its own checkout
(``--before REF`` is checked out into a temporary git worktree that shares this checkout's .venv and model cache;
``--after .`` is this checkout), one after the other, shape by shape; ``--env-before`` / ``--env-after NAME=VALUE``
add variables to one side and ``--flag-before`` / ``--flag-after=--FLAG`` a training flag (appended last, so it
wins), so a setting can be tried on one commit side by side. This process is the
child subreaper of everything the runs start (Ray's daemons included), so it samples the PSS of every process of
the run, whatever the commit's own launcher records, and MemAvailable, once a second. It prints, per shape and side:
the peak PSS and its largest holders, the fall in MemAvailable, the median step time (``timing/step_total``, steps 2
on) and the last step's rewards, so "same results" and "no step slower by 10%" can be read beside the memory. Run it
on an otherwise idle machine: Ray's workers run at a low priority and anything else busy slows them several-fold.

Shapes: ``default`` is the README's main job (SQL, MRTPO, 2 prompts x 4 samples); ``study`` is the tool study's
shape (tool task, 2 prompts x 8 samples, 160 new tokens, micro-batches of 4).
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mrtpo_openrlhf.launch.memory import MemoryTrace  # noqa: E402
from mrtpo_openrlhf.launch.runner import owned_pids  # noqa: E402
from mrtpo_openrlhf.metrics import read_metrics  # noqa: E402

PR_SET_CHILD_SUBREAPER = 36
SHAPES = {
    "default": ["--task", "sql", "--estimator", "mrtpo"],
    "study": [
        "--task", "tool", "--estimator", "mrtpo", "--prompts-per-step", "2", "--samples-per-prompt", "8",
        "--max-new-tokens", "160", "--train.micro_batch_size", "4", "--rollout.micro_batch_size", "4",
    ],
}  # fmt: skip


def checkout(ref: str, keep: list) -> Path:
    """``.`` is this checkout; any other ref gets a temporary worktree sharing .venv and .cache."""
    if ref == ".":
        return REPO
    folder = Path(tempfile.mkdtemp(prefix="mrtpo-bench-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(folder), ref], check=True)
    for shared in (".venv", ".cache"):
        if (REPO / shared).exists() and not (folder / shared).exists():
            (folder / shared).symlink_to(REPO / shared)
    keep.append(folder)
    return folder


def run_side(root: Path, shape: str, steps: int, out: Path, extra_env: dict | None = None, flags: tuple = ()) -> dict:
    command = [
        str(REPO / ".venv" / "bin" / "python"), "-m", "mrtpo_openrlhf.launch.default",
        *SHAPES[shape][:4], "--steps", str(steps), "--out", str(out), *SHAPES[shape][4:], *flags,
    ]  # fmt: skip
    env = dict(os.environ, MRTPO_SKIP_MEMORY_CHECK="1", **(extra_env or {}))
    t0 = time.time()
    with open(out.parent / f"{out.name}.log", "w") as log:
        proc = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
        # this process group and everything below it: orphans (Ray's daemons) are reparented to this subreaper
        with MemoryTrace(None, lambda: owned_pids([os.getpgrp()], None)) as trace:
            proc.wait()
    rows = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    step_times = [r["timing/step_total"] for r in rows[1:] if "timing/step_total" in r]
    last = rows[-1] if rows else {}
    summary = trace.summary()
    return dict(
        exit=proc.returncode,
        wall_s=round(time.time() - t0, 1),
        steps=len(rows),
        peak_pss_gib=summary.get("peak_pss_gib"),
        peak_by_role_gib=summary.get("peak_by_role_gib"),
        role_peak_gib=summary.get("role_peak_gib"),
        role_peak_rss_gib=summary.get("role_peak_rss_gib"),
        available_drop_gib=summary.get("available_drop_gib"),
        median_step_s=round(statistics.median(step_times), 1) if step_times else None,
        last_rewards={k: round(v, 3) for k, v in last.items() if k.startswith("reward/") and k.endswith("/mean")},
        last_vllm_kl=last.get("vllm_kl"),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="git ref of the 'before' side (e.g. ee17695^)")
    parser.add_argument("--after", default=".", help="git ref of the 'after' side; '.' is this checkout")
    parser.add_argument("--shape", nargs="+", choices=sorted(SHAPES), default=["default", "study"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="runs/bench-default-memory", help="run folders and results.json")
    for side in ("before", "after"):
        parser.add_argument(
            f"--env-{side}", action="append", default=[], metavar="NAME=VALUE", help=f"a variable for the {side} side"
        )
        parser.add_argument(
            f"--flag-{side}", action="append", default=[], metavar="--FLAG", help=f"a training flag for the {side} side"
        )
    args = parser.parse_args()
    side_env = {}
    for side in ("before", "after"):
        pairs = [item.partition("=") for item in getattr(args, f"env_{side}")]
        bad = [name for name, sep, _ in pairs if not sep or not name]
        if bad:
            parser.error(f"--env-{side}: expected NAME=VALUE, got {bad[0]!r}")
        side_env[side] = {name: value for name, _, value in pairs}
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl(PR_SET_CHILD_SUBREAPER) failed: this benchmark needs Linux")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    worktrees: list = []
    results: dict = {}
    try:
        sides = {"before": checkout(args.before, worktrees), "after": checkout(args.after, worktrees)}
        for shape in args.shape:
            for side, root in sides.items():
                ref = args.before if side == "before" else args.after
                flags = tuple(getattr(args, f"flag_{side}"))
                extra = " ".join([*(f"{k}={v}" for k, v in side_env[side].items()), *flags])
                print(f"[bench] {shape} / {side} ({ref}{', ' + extra if extra else ''}) ...", flush=True)
                res = run_side(root, shape, args.steps, out / f"{shape}-{side}", side_env[side], flags)
                results[f"{shape}/{side}"] = res
                roles = ", ".join(f"{k} {v:.2f}" for k, v in list((res["peak_by_role_gib"] or {}).items())[:5])
                own = ", ".join(f"{k} {v:.2f}" for k, v in list((res["role_peak_rss_gib"] or {}).items())[:5])
                print(
                    f"  exit {res['exit']}, {res['steps']} steps, peak {res['peak_pss_gib']} GiB PSS "
                    f"(MemAvailable -{res['available_drop_gib']} GiB), median step {res['median_step_s']} s\n"
                    f"  at the peak: {roles}\n  each role's own peak RSS (VmHWM): {own}\n"
                    f"  last step: {res['last_rewards']}, vllm_kl {res['last_vllm_kl']}",
                    flush=True,
                )
    finally:
        for folder in worktrees:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(folder)], check=False)
    record = dict(before=args.before, after=args.after, env_before=side_env["before"], env_after=side_env["after"])
    record.update(flags_before=args.flag_before, flags_after=args.flag_after)
    (out / "results.json").write_text(json.dumps(dict(record, **results), indent=2))
    print(f"{'shape/side':<16}{'peak GiB':>10}{'step s':>9}")
    for key, res in results.items():
        print(f"{key:<16}{res['peak_pss_gib'] or 0:>10.2f}{res['median_step_s'] or 0:>9.1f}")
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
