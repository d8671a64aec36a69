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

from dataclasses import dataclass

from mrtpo_openrlhf.verifiers.response import response_from_query  # noqa: F401 - re-exported for the SQL reward

SQL_FORMAT_BLOCK = (
    "Output format: first reason inside <think> and </think>. Right after </think>, give exactly one SQLite "
    "query in a ```sql fenced code block, and write nothing after the block."
)

THINK_OPEN, THINK_CLOSE, FENCE = "<think>", "</think>", "```"
# End-of-turn markers a decoded rollout may end with (OpenRLHF decodes with skip_special_tokens=False): the fixed
# ones, and any ``<|name|>`` with a name of 1-40 characters that are not ``<``, ``>``, ``|`` or whitespace.
_FIXED_END_TOKENS = ("</s>", "<eos>", "<end_of_turn>")
_SPECIAL_NAME_MAX = 40
_SQL_INFO_STRINGS = frozenset({"sql", "sqlite", ""})
_INFO_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-")

# Everything below scans with str.find/str.strip and index arithmetic: linear in the response, whatever it holds
# (the regular expressions these replace were quadratic in runs of whitespace).


@dataclass(frozen=True)
class FormatCheck:
    ok: bool
    reason: str  # "" when ok, else the first rule broken


def _end_token_start(text: str, end: int) -> int:
    """Start of the special token that ends ``text[:end]``, or -1."""
    for token in _FIXED_END_TOKENS:
        if text.startswith(token, end - len(token), end) and end >= len(token):
            return end - len(token)
    if end >= 4 and text.startswith("|>", end - 2, end):
        start = text.rfind("<|", max(0, end - 4 - _SPECIAL_NAME_MAX), end - 2)
        name = text[start + 2 : end - 2] if start >= 0 else ""
        if name and not any(ch in "<>|" or ch.isspace() for ch in name):
            return start
    return -1


def strip_trailing_special_tokens(text: str) -> str:
    """Remove end-of-turn special tokens (``<|im_end|>``, ``<|endoftext|>``, ``</s>``...) at the end, with the
    whitespace around them; a text that does not end with one is returned unchanged."""
    end, stripped = len(text), False
    while True:
        cut = end
        while cut > 0 and text[cut - 1].isspace():
            cut -= 1
        start = _end_token_start(text, cut)
        if start < 0:
            break
        end, stripped = start, True
    return text[:end].rstrip() if stripped else text


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
    think_start = text.index(THINK_OPEN) + len(THINK_OPEN)
    think_end = text.index(THINK_CLOSE)
    after = text[think_end + len(THINK_CLOSE) :].lstrip()
    layout_error = FormatCheck(False, "after </think> expected only a ```sql block and nothing after it")
    if think_end < think_start or not after.startswith(FENCE + "sql"):
        return layout_error
    header_end = len(FENCE) + 3
    while header_end < len(after) and after[header_end] in " \t":
        header_end += 1
    if not after.startswith("\n", header_end):
        return layout_error
    close = after.rfind(FENCE)  # the closing fence is the last one (a ```` run may end the block)
    if close <= header_end or after[close + len(FENCE) :].strip():
        return layout_error
    body = after[header_end + 1 : close].rstrip(" \t")
    sql = body[:-1] if body.endswith("\n") else body  # the layout allows one newline before the closing fence
    if not text[think_start:think_end].strip():
        return FormatCheck(False, "empty <think> block")
    if not sql.strip():
        return FormatCheck(False, "empty sql block")
    return FormatCheck(True, "")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every closed fenced block: ```` ```info\nbody``` ````, scanned left to right.

    The opening line is the fence, optional spaces/tabs, an info string of ``[A-Za-z0-9_+-]`` and optional
    spaces/tabs; a candidate whose line is not of that form is skipped and the search goes on one character later.
    """
    blocks: list[tuple[str, str]] = []
    pos = 0
    while True:
        fence = text.find(FENCE, pos)
        if fence < 0:
            return blocks
        i = fence + len(FENCE)
        while i < len(text) and text[i] in " \t":
            i += 1
        info_start = i
        while i < len(text) and text[i] in _INFO_CHARS:
            i += 1
        info_end = i
        while i < len(text) and text[i] in " \t":
            i += 1
        if not text.startswith("\n", i):
            pos = fence + 1
            continue
        close = text.find(FENCE, i + 1)
        if close < 0:
            return blocks  # no closing fence after this header, so none after any later one either
        blocks.append((text[info_start:info_end], text[i + 1 : close]))
        pos = close + len(FENCE)


def extract_sql(response: str) -> str | None:
    """The SQL of the last closed ``sql``/``sqlite``/plain fenced block, preferring blocks after ``</think>``.

    Returns None when the response holds no such block.
    """
    text = response or ""
    after_think = text.rsplit(THINK_CLOSE, 1)[-1] if THINK_CLOSE in text else text
    for region in (after_think, text):
        bodies = [body.strip() for info, body in fenced_blocks(region) if info.lower() in _SQL_INFO_STRINGS]
        bodies = [b for b in bodies if b]
        if bodies:
            return bodies[-1]
    return None
