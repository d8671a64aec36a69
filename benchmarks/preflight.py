"""What the training pre-flight check costs a start, on each bundled training set, before and after it ran ahead of
upstream's imports, side by side in one run (in turn within each repeat, best of the repeats):

    python benchmarks/preflight.py                 # every task's bundled set(s), 3 repeats
    python benchmarks/preflight.py --repeats 5 --tasks sql

- before: the check after upstream's module-level imports (Ray, DeepSpeed, vLLM, transformers), in a CLI process of
  its own: what the CLI cost until 2026-12-02 (its parse hook ran the check after ``runpy`` imported everything),
  and what the embedded default's own pre-flight process cost it (``launch.runner.run_preflight`` started one);
- CLI: ``python -m mrtpo_openrlhf.cli.train_ppo_ray <flags> --preflight-only`` now (upstream's imports deferred
  until after the check);
- launcher: ``launch.runner.run_preflight`` in a process that has imported what ``cli.default`` imports
  before it calls it (torch included), timed around the call alone: what the embedded default adds now;
- parse only: the CLI with ``--preflight-only --preflight-skip`` (start, imports and parse, no check);
- the CLI's own ``preflight: ok in X s`` figure (timed around the check inside the process).
Wall times of whole processes except the launcher column. Nothing starts Ray. Prints the CPU
(``torch.backends.cpu.get_cpu_capability()``) and one JSON line for the record.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OK = re.compile(r"^preflight: ok in ([0-9.]+)s", re.M)


def cli_flags(task) -> list[list[str]]:
    """The embedded default's flag sets for ``task``, one per distinct bundled set (CPU rows, mini rows)."""
    out = []
    for data in dict.fromkeys([task.cpu_train_data_path(), task.train_data_path()]):
        flags = [
            "--actor.model_name_or_path", "unused/model", "--reward.remote_url", str(task.reward_path()),
            "--data.prompt_dataset", str(data), "--data.input_key", "prompt", "--data.label_key", "label",
            "--data.apply_chat_template", "--rollout.batch_size", "2", "--rollout.n_samples_per_prompt", "4",
            "--algo.advantage.estimator", "mrtpo",
        ]  # fmt: skip
        out.append(flags)
    return out


CLI = "mrtpo_openrlhf.cli.train_ppo_ray"
# The CLI as it was: upstream's module imported in full (runpy), the check in its parse hook.
BEFORE = """
import importlib.util, runpy, sys
from mrtpo_openrlhf.adapter.args import ParserHook
from mrtpo_openrlhf.cli import preflight, train_ppo_ray as cli
from mrtpo_openrlhf.cpu import flash_attn_stub
if importlib.util.find_spec("flash_attn") is None:
    flash_attn_stub.install()
cli.install_upstream_overrides()
with ParserHook(after=preflight.run, extend=preflight.add_arguments):
    runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
"""
# The embedded default now: its imports, the dtype line (torch), then the in-process check, timed alone.
LAUNCHER = f"""
import sys, time
from mrtpo_openrlhf.launch import default
from mrtpo_openrlhf.launch.runner import dtype_choice, dtype_record, run_preflight
dtype_record(dtype_choice())
t0 = time.perf_counter()
status = run_preflight("{CLI}", sys.argv[1:])
print(f"launcher preflight {{time.perf_counter() - t0:.3f}}", file=sys.stderr)
sys.exit(status)
"""
LAUNCHER_TIME = re.compile(r"^launcher preflight ([0-9.]+)", re.M)


def time_process(command: list[str]) -> tuple[float, str]:
    """(wall seconds, stderr) of one run that must exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MRTPO_CPU")}
    t0 = time.perf_counter()
    res = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{command[:3]} failed (exit {res.returncode}): {res.stderr[-2000:]}")
    return wall, res.stderr


def measure(flags: list[str]) -> dict[str, float]:
    """One repeat of every variant on one set (seconds)."""
    only = [*flags, "--preflight-only"]
    before, _ = time_process([sys.executable, "-c", BEFORE, *only])
    cli, err = time_process([sys.executable, "-m", CLI, *only])
    _, launcher_err = time_process([sys.executable, "-c", LAUNCHER, *flags])
    parse, _ = time_process([sys.executable, "-m", CLI, *only, "--preflight-skip"])
    return {
        "before_s": before,
        "cli_s": cli,
        "launcher_s": float(LAUNCHER_TIME.search(launcher_err).group(1)),
        "parse_only_s": parse,
        "check_s": float(OK.search(err).group(1)),
    }


def main(argv=None) -> int:
    import torch

    from mrtpo_openrlhf.tasks import TASKS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", nargs="*", default=sorted(TASKS))
    args = ap.parse_args(argv)
    print(f"CPU: torch capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")
    print("| set | rows | before (check after upstream's imports) | CLI now | launcher now (in-process) "
          "| CLI parse only | the check's own figure | before / CLI |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    record = []
    for name in args.tasks:
        for flags in cli_flags(TASKS[name]):
            data = Path(flags[flags.index("--data.prompt_dataset") + 1])
            runs = [measure(flags) for _ in range(args.repeats)]
            best = {key: min(r[key] for r in runs) for key in runs[0]}
            rows = sum(1 for line in data.read_text().splitlines() if line.strip())
            print(
                f"| {name} {data.name} | {rows} | {best['before_s']:.2f} s | {best['cli_s']:.2f} s "
                f"| {best['launcher_s']:.2f} s | {best['parse_only_s']:.2f} s | {best['check_s']:.3f} s "
                f"| {best['before_s'] / best['cli_s']:.1f}x |"
            )
            record.append({"task": name, "data": data.name, "rows": rows, **best})
    print(json.dumps({"benchmark": "preflight", "cpu": torch.backends.cpu.get_cpu_capability(), "sets": record}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
