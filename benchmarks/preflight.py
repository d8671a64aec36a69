"""What the training pre-flight check adds to a start, on each bundled training set, through the real CLI.

    python benchmarks/preflight.py                 # every task's bundled set(s), 3 repeats
    python benchmarks/preflight.py --repeats 5 --tasks sql

For each set, side by side in one run and in turn within each repeat: the CLI with ``--preflight-only`` (parse the
flags, then the check) and with ``--preflight-only --preflight-skip`` (parse the flags only; the same process start,
imports and parse). The difference of the best wall times is what the check adds; the CLI's own ``preflight: ok in
X s`` figure (timed around the check inside the process) is printed next to it. The first column is also what the
embedded default's own pre-flight process costs it (``launch.default`` runs the check before its Ray head, in a CLI
process of its own). Nothing starts Ray. Prints the CPU
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


def time_cli(flags: list[str], skip: bool) -> tuple[float, float | None]:
    """(wall seconds of one CLI run, the check's own figure or None)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MRTPO_CPU")}
    command = [sys.executable, "-m", "mrtpo_openrlhf.cli.train_ppo_ray", *flags, "--preflight-only"]
    command += ["--preflight-skip"] if skip else []
    t0 = time.perf_counter()
    res = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=600)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"the CLI failed (exit {res.returncode}): {res.stderr[-2000:]}")
    found = OK.search(res.stderr)
    return wall, float(found.group(1)) if found else None


def main(argv=None) -> int:
    import torch

    from mrtpo_openrlhf.tasks import TASKS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", nargs="*", default=sorted(TASKS))
    args = ap.parse_args(argv)
    print(f"CPU: torch capability {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores")
    print("| set | rows | CLI with the check (best) | CLI, parse only (best) | added | the check's own figure |")
    print("|---|---|---|---|---|---|")
    record = []
    for name in args.tasks:
        for flags in cli_flags(TASKS[name]):
            data = Path(flags[flags.index("--data.prompt_dataset") + 1])
            checked, parsed, own = [], [], []
            for _ in range(args.repeats):
                wall, figure = time_cli(flags, skip=False)
                checked.append(wall)
                own.append(figure)
                parsed.append(time_cli(flags, skip=True)[0])
            rows = sum(1 for line in data.read_text().splitlines() if line.strip())
            added = min(checked) - min(parsed)
            best_own = min(f for f in own if f is not None)
            print(
                f"| {name} {data.name} | {rows} | {min(checked):.2f} s | {min(parsed):.2f} s | {added:+.2f} s "
                f"| {best_own:.3f} s |"
            )
            record.append({"task": name, "data": data.name, "rows": rows, "added_s": added, "check_s": best_own})
    print(json.dumps({"benchmark": "preflight", "cpu": torch.backends.cpu.get_cpu_capability(), "sets": record}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
