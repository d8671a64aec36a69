"""Run each argv (a JSON list on stdin) as ``python -m MOD ...`` / ``python FILE ...`` runs it (runpy, as
``__main__``), each in a child forked from this process, which imports torch once: torch's import is most of every
command's start-up, and 40 ``--help`` runs paid it 40 times (217 s against 32 s on the loaded 2-core machine, same
exit codes and output). Prints a JSON list of [exit code, stdout + stderr], in order; ``DOCS_HELP_JOBS`` children
at a time (default 2)."""

import json
import os
import runpy
import sys
import tempfile

import torch  # noqa: F401  imported once, before the forks

jobs = json.load(sys.stdin)
results, running, slots = [None] * len(jobs), {}, int(os.environ.get("DOCS_HELP_JOBS", "2"))


def start(i, argv):
    fd, path = tempfile.mkstemp()
    pid = os.fork()
    if pid:
        os.close(fd)
        running[pid] = (i, path)
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001  a crash is this command's result: reported, not raised
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def reap():
    pid, status = os.wait()
    i, path = running.pop(pid)
    with open(path, errors="replace") as f:
        results[i] = [os.waitstatus_to_exitcode(status), f.read()]
    os.unlink(path)


for i, argv in enumerate(jobs):
    while len(running) >= slots:
        reap()
    start(i, argv)
while running:
    reap()
json.dump(results, sys.stdout)
