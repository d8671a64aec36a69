"""``python -m mrtpo_openrlhf.study``: the command is ``mrtpo_openrlhf.cli.study``."""

import sys

from mrtpo_openrlhf.cli.study import main

if __name__ == "__main__":
    sys.exit(main())
