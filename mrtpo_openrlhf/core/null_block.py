"""The null block: a neutral sentence no reward reads, removed or added the way a verifier block is.

One setting per task (``tasks.Task.null_block``: its text and position), read by both of its users:
- the diagnostics (``diagnostics.runner``, ``study localize``) add it to every replayed response as one more
  "reward" and compare each reward's relevance with the null's (``with_null_blocks``: an inline null where the
  response has blocks in the prompt, an appended one where it has appended blocks);
- the ``js-contrast`` relevance measure (``core.relevance``) replays, per response, one more context, ``full`` with
  the null block added at the task's position (``null_kind``), and subtracts its distance from each reward's.

Positions: ``inline``: ``text + " "`` inserted just before the first block that sits in the prompt (among the
constraints; cutting it leaves the same stray space a cut constraint leaves); ``appended``: one more block after the
block separator at the end of the last user message, after the verifier blocks added there. A response with no
block in the prompt gets an appended null whatever the position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# A sentence no shipped reward reads (no constraint, no format, no tag, no SQL, no function).
NULL_TEXT = "The old museum in the town centre opens at nine in the morning."
INLINE, APPENDED = "inline", "appended"
NULL_POSITIONS = (INLINE, APPENDED)
NULL_INLINE, NULL_APPENDED = "null:inline", "null:appended"  # the diagnostics' names of the two nulls
NULL_NAMES = {INLINE: NULL_INLINE, APPENDED: NULL_APPENDED}


@dataclass(frozen=True)
class NullBlock:
    """A task's null block: its text (empty: none) and where it goes (``inline`` or ``appended``)."""

    text: str = NULL_TEXT
    position: str = INLINE

    def __post_init__(self):
        if self.position not in NULL_POSITIONS:
            raise ValueError(f"null block position {self.position!r}: choose from {NULL_POSITIONS}")


DEFAULT_NULL_BLOCK = NullBlock()


def _spans_in_head(head: str, blocks: Sequence[str], spans) -> list[list[int] | None]:
    """Each block's span in the prompt head (recorded, or where its text first occurs as ``context_texts``
    then cuts it), None for an appended block."""
    if spans is None:
        return [[head.find(b), head.find(b) + len(b)] if b and b in head else None for b in blocks]
    return [None if sp is None else [int(sp[0]), int(sp[1])] for sp in spans]


def null_kind(null: NullBlock, prompt: str, suffix: str, blocks: Sequence[str], spans=None) -> str:
    """Where ``null`` goes for this response: its position, except ``inline`` -> ``appended`` where no non-empty
    block sits in the prompt."""
    head = prompt[: len(prompt) - len(suffix)] if suffix and prompt.endswith(suffix) else prompt
    in_prompt = [sp is not None and b for b, sp in zip(blocks, _spans_in_head(head, blocks, spans))]
    return INLINE if null.position == INLINE and any(in_prompt) else APPENDED


def with_null_blocks(
    prompt: str,
    suffix: str,
    blocks: Sequence[str],
    spans: Sequence[Sequence[int] | None] | None,
    null_text: str = NULL_TEXT,
    kinds: Sequence[str] = NULL_POSITIONS,
) -> tuple[str, list[str], list[list[int] | None], dict[str, int]]:
    """The replay inputs of one response with null blocks added, each removable the same way as a verifier block.

    Of ``kinds``: an inline null (``text + " "`` before the first block in the prompt, its span on the text alone)
    where the response has a non-empty block in the prompt (a recorded span; without spans, where the text first
    occurs), an appended null (one more block, span None) where it has a non-empty appended block.

    Returns (prompt, blocks + nulls, spans + the nulls' spans, {null name: its block index}).
    """
    head = prompt[: len(prompt) - len(suffix)] if suffix and prompt.endswith(suffix) else prompt
    new_spans = _spans_in_head(head, blocks, spans)
    new_blocks = list(blocks)
    live = [k for k, b in enumerate(blocks) if b]
    inline = [k for k in live if new_spans[k] is not None]
    nulls: dict[str, int] = {}
    if null_text and inline and INLINE in kinds:
        at = min(new_spans[k][0] for k in inline)
        insert = null_text + " "
        prompt = prompt[:at] + insert + prompt[at:]
        new_spans = [sp if sp is None or sp[0] < at else [sp[0] + len(insert), sp[1] + len(insert)] for sp in new_spans]
        nulls[NULL_INLINE] = len(new_blocks)
        new_blocks.append(null_text)
        new_spans.append([at, at + len(null_text)])
    if null_text and any(new_spans[k] is None for k in live) and APPENDED in kinds:
        nulls[NULL_APPENDED] = len(new_blocks)
        new_blocks.append(null_text)
        new_spans.append(None)
    return prompt, new_blocks, new_spans, nulls
