"""The runtime env of a ``ray job submit`` (JSON on stdout): the repo as working_dir, the verifier variables set
here (``rewards/env.py``), plus ``--env`` ones. ``examples/scripts/_launch_gpu.sh`` calls it.

    python -m mrtpo_openrlhf.cli.job_env --working-dir REPO [--env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import sys

from mrtpo_openrlhf.rewards.env import job_runtime_env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.cli.job_env", description=__doc__.split("\n")[0])
    ap.add_argument("--working-dir", required=True)
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="another variable to set")
    args = ap.parse_args(argv)
    extra = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep or not name:
            ap.error(f"--env {item!r}: expected NAME=VALUE")
        extra[name] = value
    print(json.dumps(job_runtime_env(args.working_dir, extra)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
