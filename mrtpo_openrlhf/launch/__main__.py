"""``python -m mrtpo_openrlhf.launch``: the command is ``mrtpo_openrlhf.cli.launch``."""

import sys

from mrtpo_openrlhf.cli.launch import main

if __name__ == "__main__":
    sys.exit(main())
