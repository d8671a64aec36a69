"""A task's own command line (its converter, its row check): ``python -m mrtpo_openrlhf.cli.task TASK COMMAND ...``,
e.g. ``python -m mrtpo_openrlhf.cli.task sql convert --format bird --input train.json --db-root DIR --out rows.jsonl``.
Each task declares the function (``Task.command`` in ``mrtpo_openrlhf/tasks/<name>/__init__.py``)."""

from __future__ import annotations

import sys
from typing import Sequence

from mrtpo_openrlhf.tasks import TASKS

PROG = "python -m mrtpo_openrlhf.cli.task"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run task ``argv[0]``'s command with the rest of ``argv``; 2 with one line for an unknown task."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with_command = [name for name, task in TASKS.items() if task.command is not None]
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} {{{','.join(with_command)}}} COMMAND ... (COMMAND --help for its flags)")
        return 0 if argv else 2
    if argv[0] not in with_command:
        print(f"{PROG}: error: task {argv[0]!r}: choose from {', '.join(with_command)}", file=sys.stderr)
        return 2
    return TASKS[argv[0]].function("command")(argv[1:], prog=prog or f"{PROG} {argv[0]}")


if __name__ == "__main__":
    sys.exit(main())
