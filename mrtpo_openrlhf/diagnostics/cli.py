"""Kept for imports of ``mrtpo_openrlhf.diagnostics.cli``: the command is ``mrtpo_openrlhf.cli.diagnose``."""

from mrtpo_openrlhf.cli.diagnose import build_parser, main

__all__ = ["build_parser", "main"]
