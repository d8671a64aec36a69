"""The documented ``python -m mrtpo_openrlhf.rewards.sql`` command line: ``python -m mrtpo_openrlhf.cli.task sql``
(the sql task lives in ``mrtpo_openrlhf/tasks/sql/``)."""

import sys

from mrtpo_openrlhf.cli.task import main

if __name__ == "__main__":
    sys.exit(main(["sql", *sys.argv[1:]], prog="python -m mrtpo_openrlhf.rewards.sql"))
