"""``python -m mrtpo_openrlhf.diagnose``: the command is ``mrtpo_openrlhf.cli.diagnose``."""

import sys

from mrtpo_openrlhf.cli.diagnose import main

if __name__ == "__main__":
    sys.exit(main())
