"""CLI: ``python -m mrtpo_openrlhf.launch [options] -- MODULE [ARGS...]``.

Example:
    python -m mrtpo_openrlhf.launch --workdir runs/demo -- openrlhf.cli.train_ppo_ray --actor.model_name_or_path ...
Exit status: the command's (124 when it timed out; 128 + N after signal N: 130 Ctrl-C, 143 SIGTERM).
"""

import argparse
import sys

from ..launch.memory import NotEnoughMemory
from ..launch.runner import Interrupted, run_openrlhf_cpu
from ..launch.watchdog import STALL_SECONDS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mrtpo_openrlhf.launch",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workdir", required=True, help="run folder (train.log, metrics.jsonl, cwd)")
    parser.add_argument("--num-cpus", type=int, default=8, help="Ray CPU resources of the private head")
    parser.add_argument("--num-gpus", type=int, default=4, help="fake GPUs: one per actor rank / vLLM engine")
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_SECONDS,
        help="stop after this many seconds without output, a new metrics row or Ray log growth",
    )
    parser.add_argument("--timeout", type=float, default=None, help="optional wall limit in seconds (default: none)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra env for all")
    parser.add_argument("--dry-run", action="store_true", help="print the environment and commands only")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- MODULE [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the module to run after --, e.g. -- openrlhf.cli.train_ppo_ray ...")
    extra = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--env wants KEY=VALUE, got {item!r}")
        extra[key] = value
    try:
        result = run_openrlhf_cpu(
            command[0],
            command[1:],
            args.workdir,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            timeout=args.timeout,
            extra_env=extra,
            dry_run=args.dry_run,
            stall_timeout=args.stall_timeout,
        )
    except Interrupted as interrupted:
        return interrupted.exit_status
    except NotEnoughMemory as err:
        print(f"[mrtpo.launch] {err}", file=sys.stderr)
        return 2
    if result is None:
        return 0
    return 124 if result.timed_out else result.returncode


if __name__ == "__main__":
    sys.exit(main())
