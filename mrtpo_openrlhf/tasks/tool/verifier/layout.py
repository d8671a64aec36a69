"""The tool-calling response layout: the format instructions, the tag check, strict call parsing.

Layout (``TOOL_FORMAT_BLOCK`` is the one source of truth; the format reward's verifier block is that
exact string):

    <think>
    ...reasoning...
    </think>
    <tool_call>
    JSON
    </tool_call>

JSON is either one object ``{"name": str, "arguments": {...}}`` (one call) or a list of such
objects (parallel calls, any order); ``[]`` means "no function fits the request". ``arguments``
may be omitted for a call without arguments. No other keys, nothing after the closing tag.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_FORMAT_BLOCK = (
    "Answer in exactly this format. First reason inside <think>...</think>. Then write the function "
    "call(s) inside one <tool_call>...</tool_call> block as JSON: one object "
    '{"name": <function name>, "arguments": {<parameter>: <value>, ...}} for a single call, or a '
    "JSON list of such objects for several calls. If none of the functions fits the request, write "
    "<tool_call>[]</tool_call>. Write nothing after </tool_call>."
)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
_TAGS = (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE)
_LAYOUT_RE = re.compile(r"<think>(.*?)</think>\s*<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the function name and its keyword arguments (JSON values)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedCalls:
    """Result of parsing a response: ``calls`` is None when the response holds no parseable call block."""

    calls: list[ToolCall] | None
    reason: str = ""  # why parsing failed; "" when it succeeded

    @property
    def ok(self) -> bool:
        return self.calls is not None


def check_format(response: str) -> tuple[bool, str]:
    """Tag-only format check (the JSON inside is not parsed: that is the correctness reward's job).

    Passes iff the stripped response is exactly one ``<think>`` block followed by one
    ``<tool_call>`` block, with only whitespace between and no stray tag inside either block.
    """
    if not isinstance(response, str):
        return False, f"response is {type(response).__name__}, not text"
    text = response.strip()
    if not text:
        return False, "empty response"
    counts = {tag: text.count(tag) for tag in _TAGS}
    wrong = [f"{tag} x{n}" for tag, n in counts.items() if n != 1]
    if wrong:
        return False, "each tag must appear exactly once; found " + ", ".join(wrong)
    match = _LAYOUT_RE.fullmatch(text)
    if match is None:
        if not text.startswith(THINK_OPEN):
            return False, "response must start with <think>"
        if not text.endswith(CALL_CLOSE):
            return False, "response must end with </tool_call>"
        return False, "expected <think>...</think> followed by <tool_call>...</tool_call>"
    return True, ""


def call_blocks(text: str) -> list[str]:
    """Bodies of the ``<tool_call>...</tool_call>`` blocks, left to right, each ending at the first closing tag.

    A scan with str.find (linear): the regular expression it replaces restarted at every unclosed opening tag.
    """
    blocks: list[str] = []
    pos = 0
    while True:
        start = text.find(CALL_OPEN, pos)
        if start < 0:
            return blocks
        end = text.find(CALL_CLOSE, start + len(CALL_OPEN))
        if end < 0:  # no closing tag after this opening one, so none after any later one either
            return blocks
        blocks.append(text[start + len(CALL_OPEN) : end])
        pos = end + len(CALL_CLOSE)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _to_call(obj: Any, where: str) -> ToolCall:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    extra = sorted(set(obj) - {"name", "arguments"})
    if extra:
        raise ValueError(f"{where}: unexpected key(s) {extra}; only 'name' and 'arguments' are allowed")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: 'name' must be a non-empty string")
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ValueError(f"{where}: 'arguments' must be a JSON object, got {type(arguments).__name__}")
    return ToolCall(name, arguments)


def parse_tool_calls(response: str) -> ParsedCalls:
    """Parse the calls of a response with strict JSON (trailing garbage, NaN, comments are rejected).

    The call block is searched after the first ``</think>`` (so reasoning may mention the tags);
    exactly one ``<tool_call>`` block must be there. Never raises.
    """
    if not isinstance(response, str):
        return ParsedCalls(None, f"response is {type(response).__name__}, not text")
    text = response
    if THINK_CLOSE in text:
        text = text.split(THINK_CLOSE, 1)[1]
    blocks = call_blocks(text)
    if not blocks:
        return ParsedCalls(None, "no <tool_call>...</tool_call> block")
    if len(blocks) > 1:
        return ParsedCalls(None, f"expected one <tool_call> block, found {len(blocks)}")
    body = blocks[0].strip()
    if not body:
        return ParsedCalls(None, "empty <tool_call> block")
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return ParsedCalls(None, f"invalid JSON in <tool_call>: {exc.msg} at char {exc.pos}")
    except (ValueError, RecursionError) as exc:
        return ParsedCalls(None, f"invalid JSON in <tool_call>: {exc}")
    try:
        if isinstance(data, list):
            calls = [_to_call(item, f"call {i}") for i, item in enumerate(data)]
        else:
            calls = [_to_call(data, "call")]
    except ValueError as exc:
        return ParsedCalls(None, str(exc))
    return ParsedCalls(calls, "")


def render_calls(calls: list[ToolCall]) -> str:
    """The ``<tool_call>`` block a model should write for ``calls`` (one object, or a list if not exactly one)."""
    objs = [{"name": c.name, "arguments": c.arguments} for c in calls]
    payload = objs[0] if len(objs) == 1 else objs
    return f"{CALL_OPEN}\n{json.dumps(payload, ensure_ascii=False)}\n{CALL_CLOSE}"
