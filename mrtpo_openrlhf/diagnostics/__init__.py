"""Relevance diagnostics: where each reward's replay distance lands (``python -m mrtpo_openrlhf.diagnose``).

- ``runner``: responses (sampled or read) -> rewards -> replay of every pair -> records and summary -> files.
- ``spans``: the character spans a verifier reads (tags, SELECT list, tool arguments, constraint targets) and
  their mapping onto response tokens.
- ``stats``: per-pair and aggregated localization statistics (80% mass, top-20% share, span ratios).
- ``html``: the self-contained heatmap page.
"""

from .runner import DiagnoseError, Sample, diagnose, run, write_outputs
from .spans import (
    SPAN_KINDS,
    TARGET_IDS,
    constraint_target_spans,
    locate_spans,
    select_column_spans,
    spans_to_token_mask,
    tag_spans,
    token_char_offsets,
    tool_argument_spans,
)
from .stats import aggregate, pair_stats, span_share, summarize

__all__ = [name for name in dir() if not name.startswith("_")]
