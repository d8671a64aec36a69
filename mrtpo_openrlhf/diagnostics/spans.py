"""Character spans of a response that a verifier reads, and their mapping onto response tokens.

All locators take the raw decoded response text (special tokens included, nothing stripped) and return
sorted, non-overlapping ``(start, end)`` character intervals into that same text, so they line up with
``token_char_offsets``. A locator that cannot find its span robustly returns ``[]`` (the span is then
left out of the statistics, never guessed).

Span kinds:

- ``tags``: the layout tags the task's format verifier checks: ``<think>`` and ``</think>`` always; for SQL
  the code fences (the opening fence with its info string, e.g. ```` ```sql ````, and the closing fence);
  for tool calling ``<tool_call>`` and ``</tool_call>``.
- ``select_columns`` (SQL): the SELECT list of the outermost statement of the extracted query, from after
  ``SELECT [DISTINCT|ALL]`` up to its top-level ``FROM`` (or the end of the statement).
- ``function_name`` (tool calling): the ``"name"`` value of every call in the ``<tool_call>`` block after
  ``</think>`` (what the function reward reads); none when the block is not valid JSON.
- ``tool_arguments`` (tool calling): every argument value (the JSON text of the value) of every call in
  the ``<tool_call>`` block after ``</think>``; none when the block is not valid JSON.
- ``target`` (instruction following, the constraint's own reward only), for these ids:
  ``startend:end_checker`` (last occurrence of the end phrase), ``detectable_format:title`` (the first
  ``<<title>>``), ``detectable_content:postscript`` (the marker through the end of its line),
  ``keywords:existence`` / ``keywords:frequency`` / ``keywords:forbidden_words`` (every case-insensitive
  literal occurrence of a keyword; whole words only for forbidden words, as their checker matches),
  ``startend:quotation`` (the opening and closing double quotes), ``punctuation:no_comma`` (every comma),
  ``detectable_content:number_placeholders`` (every ``[...]``), ``detectable_format:number_bullet_lists`` (the
  marker of every ``*``/``-`` bullet line), ``detectable_format:number_highlighted_sections`` (every ``*...*`` and
  ``**...**``), ``change_case:capital_word_frequency`` (every word in capitals),
  ``words:keywords_specific_position`` in the first sentence (the answer's first word). Other constraints have no
  target span. A satisfied ``no_comma`` has no comma, so no span: the span a checker reads is where its verdict
  can change, and a response without the thing it counts has none (left out of the statistics).
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from mrtpo_openrlhf.core.replay import common_prefix_length
from mrtpo_openrlhf.tasks import TASKS, get_task
from mrtpo_openrlhf.tasks.sql.verifier import extract_sql
from mrtpo_openrlhf.tasks.sql.verifier.lexer import tokenize as sql_tokenize

Span = tuple[int, int]

# Which kinds a task measures, and its layout tags, are in its registry entry (``mrtpo_openrlhf.tasks``).
SPAN_KINDS = ("tags", "select_columns", "function_name", "tool_arguments", "target")
TARGET_IDS = (
    "startend:end_checker",
    "detectable_format:title",
    "detectable_content:postscript",
    "keywords:existence",
    "keywords:frequency",
    "keywords:forbidden_words",
    "startend:quotation",
    "punctuation:no_comma",
    "detectable_content:number_placeholders",
    "detectable_format:number_bullet_lists",
    "detectable_format:number_highlighted_sections",
    "change_case:capital_word_frequency",
    "words:keywords_specific_position",
)
# the checkers' own patterns (tasks/instruction/verifier/ifeval.py), located rather than counted
_BULLET_MARKER_RE = re.compile(r"^[^\S\n]*(\*(?!\*)|-)", flags=re.MULTILINE)
_HIGHLIGHT_RE = re.compile(r"\*[^\n\*]*\*")
_BOLD_RE = re.compile(r"\*\*[^\n\*]*\*\*")
_CAPITAL_WORD_RE = re.compile(r"\b[A-Z][A-Z0-9]*\b")
_FIRST_WORD_RE = re.compile(r"[^\W_]+")

_END_MARKER_RE = re.compile(r"(?:\s*(?:<\|[^<>|\s]{1,40}\|>|</s>|<eos>|<end_of_turn>))+\s*\Z")
_THINK_CLOSE = "</think>"


def merge_spans(spans: Sequence[Span]) -> list[Span]:
    """Sort, drop empty intervals and merge overlapping/touching ones."""
    out: list[Span] = []
    for start, end in sorted((s, e) for s, e in spans if e > s):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def content_end(text: str) -> int:
    """End of the response's content: trailing end-of-turn markers and whitespace excluded."""
    match = _END_MARKER_RE.search(text)
    end = match.start() if match else len(text)
    return len(text[:end].rstrip())


# ---------------------------------------------------------------------------------------------- tags
def tag_spans(text: str, task: str | None = None) -> list[Span]:
    """Layout tags of ``task`` (its registry ``format_tags``: think tags everywhere, code fences for sql,
    tool_call tags for tool); ``task=None``: every registered task's tags."""
    tasks = TASKS.values() if task is None else [get_task(task)]
    patterns = dict.fromkeys(p for t in tasks for p in t.format_tags)
    return merge_spans([m.span() for m in re.compile("|".join(patterns)).finditer(text)]) if patterns else []


# ---------------------------------------------------------------------------------------------- SQL
def _select_list(sql: str) -> Span | None:
    """(start, end) of the SELECT list of the first top-level SELECT in ``sql``, whitespace trimmed."""
    pos = depth = 0
    start = None
    end = None
    previous = ""
    for tok in sql_tokenize(sql):
        tok_start, pos = pos, pos + len(tok.text)
        if tok.kind in ("ws", "comment"):
            continue
        if tok.kind == "punct" and tok.text in "()":
            depth += 1 if tok.text == "(" else -1
        elif depth == 0 and tok.kind == "word":
            word = tok.upper
            if start is None and word == "SELECT":
                start = pos
            elif start is not None and previous == "SELECT" and word in ("DISTINCT", "ALL"):
                start = pos
            elif start is not None and word == "FROM":
                end = tok_start
                break
            previous = word
            continue
        elif depth == 0 and tok.kind == "punct" and tok.text == ";" and start is not None:
            end = tok_start
            break
        previous = ""
    if start is None:
        return None
    end = len(sql) if end is None else end
    piece = sql[start:end]
    lead = len(piece) - len(piece.lstrip())
    span = (start + lead, start + len(piece.rstrip()))
    return span if span[1] > span[0] else None


def select_column_spans(text: str) -> list[Span]:
    """The SELECT list of the query ``extract_sql`` (the reward's own extraction) takes from ``text``."""
    sql = extract_sql(text)
    if not sql:
        return []
    at = text.rfind(sql)
    inner = _select_list(sql)
    if at < 0 or inner is None:
        return []
    return [(at + inner[0], at + inner[1])]


# ---------------------------------------------------------------------------------------------- tool
_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


def _skip_ws(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def json_value_tree(text: str, i: int = 0) -> tuple[Any, int]:
    """Parse one JSON value at ``text[i:]`` keeping character spans.

    Returns ``(node, end)``; a node is ``("obj", start, end, {key: node})``, ``("arr", start, end,
    [node, ...])`` or ``("val", start, end, None)``. Raises ValueError on invalid JSON.
    """
    i = _skip_ws(text, i)
    if i >= len(text):
        raise ValueError("unexpected end of JSON")
    if text[i] == "{":
        children: dict[str, Any] = {}
        j = _skip_ws(text, i + 1)
        if j < len(text) and text[j] == "}":
            return ("obj", i, j + 1, children), j + 1
        while True:
            key, j = _DECODER.raw_decode(text, _skip_ws(text, j))
            if not isinstance(key, str):
                raise ValueError("object key is not a string")
            j = _skip_ws(text, j)
            if j >= len(text) or text[j] != ":":
                raise ValueError("expected ':'")
            children[key], j = json_value_tree(text, j + 1)
            j = _skip_ws(text, j)
            if j < len(text) and text[j] == ",":
                j += 1
                continue
            if j < len(text) and text[j] == "}":
                return ("obj", i, j + 1, children), j + 1
            raise ValueError("expected ',' or '}'")
    if text[i] == "[":
        items: list[Any] = []
        j = _skip_ws(text, i + 1)
        if j < len(text) and text[j] == "]":
            return ("arr", i, j + 1, items), j + 1
        while True:
            node, j = json_value_tree(text, j)
            items.append(node)
            j = _skip_ws(text, j)
            if j < len(text) and text[j] == ",":
                j += 1
                continue
            if j < len(text) and text[j] == "]":
                return ("arr", i, j + 1, items), j + 1
            raise ValueError("expected ',' or ']'")
    _, end = _DECODER.raw_decode(text, i)
    return ("val", i, end, None), end


_CALL_BLOCK_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def _tool_calls(text: str) -> list[Any]:
    """The call objects (``json_value_tree`` nodes) of the (single) ``<tool_call>`` block after ``</think>``;
    [] when there is no such block or it is not valid JSON."""
    offset = text.index(_THINK_CLOSE) + len(_THINK_CLOSE) if _THINK_CLOSE in text else 0
    blocks = list(_CALL_BLOCK_RE.finditer(text, offset))
    if len(blocks) != 1:
        return []
    body_start, body_end = blocks[0].span(1)
    body = text[:body_end]  # parse in place so spans are offsets into ``text``
    try:
        tree, end = json_value_tree(body, body_start)
    except ValueError:
        return []
    if body[end:].strip():
        return []
    return [call for call in (tree[3] if tree[0] == "arr" else [tree]) if call[0] == "obj"]


def tool_argument_spans(text: str) -> list[Span]:
    """Argument values of the calls in the (single) ``<tool_call>`` block after ``</think>``."""
    spans: list[Span] = []
    for call in _tool_calls(text):
        args = call[3].get("arguments")
        if args is not None and args[0] == "obj":
            spans.extend((node[1], node[2]) for node in args[3].values())
    return merge_spans(spans)


def tool_function_name_spans(text: str) -> list[Span]:
    """The ``"name"`` value (the JSON string, quotes included) of each call in the (single) ``<tool_call>`` block
    after ``</think>``: what the function reward reads."""
    names = [call[3].get("name") for call in _tool_calls(text)]
    return merge_spans([(node[1], node[2]) for node in names if node is not None and node[0] == "val"])


# ---------------------------------------------------------------------------------------------- instruction
def _literal_spans(text: str, needles: Sequence[str], limit: int, whole_words: bool = False) -> list[Span]:
    spans: list[Span] = []
    for needle in needles:
        needle = str(needle).strip()
        if needle:
            pattern = rf"\b{re.escape(needle)}\b" if whole_words else re.escape(needle)
            spans.extend(m.span() for m in re.finditer(pattern, text[:limit], flags=re.IGNORECASE))
    return merge_spans(spans)


def _answer_start(text: str) -> int:
    """Instruction checkers read the answer after a leading think block (see rewards.instruction)."""
    return text.index(_THINK_CLOSE) + len(_THINK_CLOSE) if _THINK_CLOSE in text else 0


def constraint_target_spans(text: str, instruction_id: str, kwargs: dict | None) -> list[Span]:
    """The part of ``text`` the constraint's checker reads (ids in ``TARGET_IDS``; else ``[]``)."""
    kwargs = kwargs or {}
    begin, end = _answer_start(text), content_end(text)
    if end <= begin:
        return []
    if instruction_id == "startend:end_checker":
        phrase = str(kwargs.get("end_phrase", "")).strip()
        if not phrase:
            return []
        at = text.lower().rfind(phrase.lower(), begin, end)
        return [(at, at + len(phrase))] if at >= 0 else []
    if instruction_id == "detectable_format:title":
        match = re.compile(r"<<[^\n]+?>>").search(text, begin, end)
        return [match.span()] if match else []
    if instruction_id == "detectable_content:postscript":
        marker = str(kwargs.get("postscript_marker", "")).strip()
        if not marker:
            return []
        spans = []
        for m in re.finditer(re.escape(marker), text[:end], flags=re.IGNORECASE):
            if m.start() >= begin:
                line_end = text.find("\n", m.end(), end)
                spans = [(m.start(), end if line_end < 0 else line_end)]  # the last marker is the postscript
        return spans
    if instruction_id == "keywords:existence":
        return [s for s in _literal_spans(text, kwargs.get("keywords") or [], end) if s[0] >= begin]
    if instruction_id == "keywords:frequency":
        return [s for s in _literal_spans(text, [kwargs.get("keyword", "")], end) if s[0] >= begin]
    if instruction_id == "keywords:forbidden_words":
        words = kwargs.get("forbidden_words") or []
        return [s for s in _literal_spans(text, words, end, whole_words=True) if s[0] >= begin]
    if instruction_id == "startend:quotation":
        body = text[begin:end]
        lead = len(body) - len(body.lstrip())
        first, last = begin + lead, end - 1
        if last > first and text[first] == '"' and text[last] == '"':
            return [(first, first + 1), (last, last + 1)]
        return []
    if instruction_id == "punctuation:no_comma":
        return [(i, i + 1) for i in range(begin, end) if text[i] == ","]
    if instruction_id == "detectable_content:number_placeholders":
        return [m.span() for m in re.finditer(r"\[[^\[\]\n]*\]", text[:end]) if m.start() >= begin]
    if instruction_id == "detectable_format:number_bullet_lists":
        return [m.span(1) for m in _BULLET_MARKER_RE.finditer(text, begin, end)]
    if instruction_id == "detectable_format:number_highlighted_sections":
        single = [m for m in _HIGHLIGHT_RE.finditer(text, begin, end) if m.group(0).strip("*").strip()]
        double = [m for m in _BOLD_RE.finditer(text, begin, end) if m.group(0)[2:-2].strip()]
        return merge_spans([m.span() for m in single + double])
    if instruction_id == "change_case:capital_word_frequency":
        return [m.span() for m in _CAPITAL_WORD_RE.finditer(text, begin, end)]
    if instruction_id == "words:keywords_specific_position":
        if int(kwargs.get("n", 0)) != 1 or int(kwargs.get("m", 0)) != 1:
            return []  # only the first word of the first sentence is located
        match = _FIRST_WORD_RE.search(text, begin, end)
        return [match.span()] if match else []
    return []


# ---------------------------------------------------------------------------------------------- tokens
def token_char_offsets(tokenizer: Any, token_ids: Sequence[int]) -> tuple[str, list[Span]]:
    """Decoded text of ``token_ids`` and each token's ``(start, end)`` in it.

    Offsets come from decoding growing prefixes (special tokens kept), so they agree with the text the
    reward saw even where single-token decodes differ (merged spaces, multi-byte characters split over
    tokens: the character goes to the token that completes it). Offsets are monotone and cover the text.
    """
    ids = list(token_ids)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    offsets: list[Span] = []
    prev = 0
    for i in range(len(ids)):
        prefix = tokenizer.decode(ids[: i + 1], skip_special_tokens=False)
        # A trailing replacement char is an incomplete multi-byte character: not this token's yet.
        stable = len(prefix.rstrip("\ufffd")) if i + 1 < len(ids) else len(text)
        if not text.startswith(prefix[:stable]):
            stable = common_prefix_length(prefix, text)
        end = min(max(prev, stable), len(text))
        offsets.append((prev, end))
        prev = end
    return text, offsets


def spans_to_token_mask(offsets: Sequence[Span], spans: Sequence[Span]) -> list[bool]:
    """True for each token whose character interval overlaps any span (empty intervals never do)."""
    spans = merge_spans(spans)
    mask = []
    for start, end in offsets:
        mask.append(end > start and any(s < end and start < e for s, e in spans))
    return mask


def locate_spans(task: str, text: str, instruction: tuple[str, dict] | None = None) -> dict[str, list[Span]]:
    """All span kinds measured for one (response, reward) pair of ``task``.

    ``instruction``: (instruction id, kwargs) of the reward, for instruction following's ``target``.
    Returns kind -> character spans (possibly empty).
    """
    kinds = get_task(task).span_kinds
    unknown = [kind for kind in kinds if kind not in SPAN_KINDS]
    if unknown:
        raise ValueError(f"task {task!r}: unknown span kinds {unknown}; choose from {', '.join(SPAN_KINDS)}")
    out: dict[str, list[Span]] = {}
    for kind in kinds:
        if kind == "tags":
            out[kind] = tag_spans(text, task)
        elif kind == "select_columns":
            out[kind] = select_column_spans(text)
        elif kind == "function_name":
            out[kind] = tool_function_name_spans(text)
        elif kind == "tool_arguments":
            out[kind] = tool_argument_spans(text)
        elif kind == "target":
            out[kind] = constraint_target_spans(text, *instruction) if instruction else []
    return out
