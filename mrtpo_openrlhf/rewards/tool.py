"""The documented ``python -m mrtpo_openrlhf.rewards.tool`` command line: ``python -m mrtpo_openrlhf.cli.task tool``
(the tool task lives in ``mrtpo_openrlhf/tasks/tool/``)."""

import sys

from mrtpo_openrlhf.cli.task import main

if __name__ == "__main__":
    sys.exit(main(["tool", *sys.argv[1:]], prog="python -m mrtpo_openrlhf.rewards.tool"))
