"""The required response layout, its strict format check, and lenient SQL extraction.

Layout (the one and only accepted form; ``SQL_FORMAT_BLOCK`` is the text shown to the model)::

    <think>
    ...reasoning...
    </think>
    ```sql
    SELECT ...
    ```

The format reward is strict (``check_format``). Extraction for execution is lenient (``extract_sql``): a
response with a broken layout can still earn the executable/execution rewards if it contains a closed ``sql``
fence, so the three rewards stay separate signals.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..response import response_from_query  # noqa: F401 - re-exported for the SQL reward

SQL_FORMAT_BLOCK = (
    "Output format: first reason inside <think> and </think>. Right after </think>, give exactly one SQLite "
    "query in a ```sql fenced code block, and write nothing after the block."
)

THINK_OPEN, THINK_CLOSE, FENCE = "<think>", "</think>", "```"
# End-of-turn markers a decoded rollout may end with (OpenRLHF decodes with skip_special_tokens=False).
_TRAILING_SPECIAL_RE = re.compile(r"(?:\s*(?:<\|[^<>|\s]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*\Z")
# A closed fenced block; group 1 = info string, group 2 = body.
_FENCED_RE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_STRICT_RE = re.compile(
    r"\A\s*<think>(?P<think>.*?)</think>\s*```sql[ \t]*\n(?P<sql>.*?)\n?[ \t]*```\s*\Z", re.DOTALL
)
_SQL_INFO_STRINGS = frozenset({"sql", "sqlite", ""})


@dataclass(frozen=True)
class FormatCheck:
    ok: bool
    reason: str  # "" when ok, else the first rule broken


def strip_trailing_special_tokens(text: str) -> str:
    """Remove end-of-turn special tokens (``<|im_end|>``, ``<|endoftext|>``, ``</s>``...) at the end."""
    return _TRAILING_SPECIAL_RE.sub("", text)


def check_format(response: str) -> FormatCheck:
    """1 iff the response is exactly one think block then exactly one ```sql block and nothing else."""
    text = strip_trailing_special_tokens(response or "")
    if not text.strip():
        return FormatCheck(False, "empty response")
    n_open, n_close = text.count(THINK_OPEN), text.count(THINK_CLOSE)
    if n_open != 1 or n_close != 1:
        return FormatCheck(False, f"expected one <think> and one </think>, found {n_open} and {n_close}")
    if text.count(FENCE) != 2:
        return FormatCheck(False, f"expected exactly one fenced code block, found {text.count(FENCE)} fence marks")
    if not text.lstrip().startswith(THINK_OPEN):
        return FormatCheck(False, "the response must start with <think>")
    match = _STRICT_RE.match(text)
    if match is None:
        return FormatCheck(False, "after </think> expected only a ```sql block and nothing after it")
    if not match.group("think").strip():
        return FormatCheck(False, "empty <think> block")
    if not match.group("sql").strip():
        return FormatCheck(False, "empty sql block")
    return FormatCheck(True, "")


def extract_sql(response: str) -> str | None:
    """The SQL of the last closed ``sql``/``sqlite``/plain fenced block, preferring blocks after ``</think>``.

    Returns None when the response holds no such block.
    """
    text = response or ""
    after_think = text.rsplit(THINK_CLOSE, 1)[-1] if THINK_CLOSE in text else text
    for region in (after_think, text):
        bodies = [m.group(2) for m in _FENCED_RE.finditer(region) if m.group(1).lower() in _SQL_INFO_STRINGS]
        bodies = [b.strip() for b in bodies if b.strip()]
        if bodies:
            return bodies[-1]
    return None
