"""The documented ``python -m mrtpo_openrlhf.rewards.instruction`` command line: ``python -m mrtpo_openrlhf.cli.task
instruction`` (the instruction task lives in ``mrtpo_openrlhf/tasks/instruction/``)."""

import sys

from mrtpo_openrlhf.cli.task import main

if __name__ == "__main__":
    sys.exit(main(["instruction", *sys.argv[1:]], prog="python -m mrtpo_openrlhf.rewards.instruction"))
