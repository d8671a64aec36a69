"""``python -m mrtpo_openrlhf.diagnose``: relevance diagnostics (the code lives in ``mrtpo_openrlhf.diagnostics``)."""

import sys

from mrtpo_openrlhf.diagnostics.cli import main

if __name__ == "__main__":
    sys.exit(main())
