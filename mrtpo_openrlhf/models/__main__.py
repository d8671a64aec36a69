"""``python -m mrtpo_openrlhf.models``: the command is ``mrtpo_openrlhf.cli.models``."""

from mrtpo_openrlhf.cli.models import main

if __name__ == "__main__":
    main()
