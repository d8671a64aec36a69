"""``python -m mrtpo_openrlhf.plot``: the command is ``mrtpo_openrlhf.cli.plot``."""

import sys

from mrtpo_openrlhf.cli.plot import main

if __name__ == "__main__":
    sys.exit(main())
