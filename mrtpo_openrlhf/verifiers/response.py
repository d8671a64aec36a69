"""The model's response inside OpenRLHF's ``query`` (the decoded prompt + response), shared by every task."""

from __future__ import annotations

import logging
import os
import threading

#: Longest response (in characters) a verifier reads; a longer one scores 0 on every reward, with the reason.
#: About 8k tokens of English, four times the shipped scripts' 2048 new tokens; raise it with
#: MRTPO_MAX_RESPONSE_CHARS for longer generations (the verifiers are linear, the cost grows in proportion).
MAX_RESPONSE_CHARS_ENV = "MRTPO_MAX_RESPONSE_CHARS"
MAX_RESPONSE_CHARS = int(os.environ.get(MAX_RESPONSE_CHARS_ENV, 32_768))

logger = logging.getLogger(__name__)
_oversize_lock = threading.Lock()
_oversize_seen = 0

END_OF_TURN_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<|end|>", "<end_of_turn>")


def strip_end_markers(text: str) -> str:
    """Remove end-of-turn special tokens at the end; they can be stacked (``<|im_end|>\\n<|endoftext|>``).

    Index arithmetic, no copies per marker: a response ending in 100k stacked markers costs one pass.
    """
    end = len(text)
    while True:
        while end > 0 and text[end - 1].isspace():
            end -= 1
        marker = next((m for m in END_OF_TURN_MARKERS if text.endswith(m, 0, end)), None)
        if marker is None:
            return text[:end]
        end -= len(marker)


PROMPT_OPENING_CHARS = 32


def _holds_opening(query: str, prompt: str) -> bool:
    """Whether ``query`` holds the first ``PROMPT_OPENING_CHARS`` non-space characters of ``prompt``."""
    opening = "".join(prompt.split())[:PROMPT_OPENING_CHARS]
    return not opening or opening in "".join(query.split())


def response_from_query(query: str, prompt: str) -> str:
    """The response part of ``query``, end-of-turn markers removed.

    ``query`` normally starts with ``prompt``. When detokenization changed the prompt slightly, the text after
    the last occurrence of the stripped prompt, then of its last line, then of the last assistant header is
    used; failing all, the whole query. The prompt itself (which quotes the format instructions and their
    tags) is never part of the result. A query without the prompt's opening (``PROMPT_OPENING_CHARS`` of it,
    spaces aside) is a completion sent alone (a client other than OpenRLHF): it is not cut after the prompt's last line,
    which it may happen to contain (a prompt ending in ``<think>``: the response would lose its opening).
    """
    if not isinstance(query, str):
        return ""
    prompt = prompt if isinstance(prompt, str) else ""
    stripped = prompt.strip()
    last_line = prompt.rstrip().rsplit("\n", 1)[-1].strip()
    if prompt and query.startswith(prompt):
        response = query[len(prompt) :]
    elif stripped and stripped in query:
        response = query.rsplit(stripped, 1)[1]
    elif last_line and last_line in query and _holds_opening(query, stripped):
        response = query.rsplit(last_line, 1)[1]
    elif "<|im_start|>assistant" in query:
        response = query.rsplit("<|im_start|>assistant", 1)[1]
    else:
        response = query
    return strip_end_markers(response.strip())


def oversize_reason(response: str, task: str) -> str:
    """ "" when a verifier may read ``response``; else the reason every reward of it is 0 (logged, rate-limited)."""
    global _oversize_seen
    if len(response) <= MAX_RESPONSE_CHARS:
        return ""
    reason = (
        f"response of {len(response)} characters is longer than the {MAX_RESPONSE_CHARS} a verifier reads "
        "(MRTPO_MAX_RESPONSE_CHARS)"
    )
    with _oversize_lock:
        _oversize_seen += 1
        seen = _oversize_seen
    if seen == 1 or seen % 100 == 0:
        logger.warning("%s reward: %s; scored 0 (%d such responses so far)", task, reason, seen)
    return reason
