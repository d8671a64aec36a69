"""The GPU launch defaults of a registered task as shell assignments, for ``examples/scripts/train.sh``:
``python -m mrtpo_openrlhf.cli.task_defaults TASK`` prints ``default_model=...``, ``default_new_tokens=...`` and
``make_data=...`` (``Task.gpu_model``, ``gpu_max_new_tokens``, ``make_data``; empty where the task declares none),
or one line naming the registered tasks and exits 2."""

from __future__ import annotations

import shlex
import sys
from typing import Sequence

from mrtpo_openrlhf.tasks import TASKS


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv in (["-h"], ["--help"]):
        print(f"usage: python -m mrtpo_openrlhf.cli.task_defaults TASK\n\n{__doc__}\nTASK: {', '.join(TASKS)}")
        return 0
    if len(argv) != 1 or argv[0] not in TASKS:
        given = f"TASK={argv[0]}" if argv else "no TASK"
        print(f"[mrtpo] {given}: choose a registered task ({', '.join(TASKS)})", file=sys.stderr)
        return 2
    task = TASKS[argv[0]]
    values = {
        "default_model": task.gpu_model or "",
        "default_new_tokens": "" if task.gpu_max_new_tokens is None else str(task.gpu_max_new_tokens),
        "make_data": task.make_data or f"python -m mrtpo_openrlhf.cli.task {task.name} --help",
    }
    print("\n".join(f"{name}={shlex.quote(value)}" for name, value in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
