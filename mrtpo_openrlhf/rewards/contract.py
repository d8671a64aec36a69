"""The reward-vector contract between reward functions and the MRTPO experience maker.

``RewardVector`` is the one type of a response's rewards, end to end: reward functions build it, ``extra_logs``
(below) is its wire form across Ray and HTTP, the samples generator parses it back (``parse_extra_logs``) and
the experience maker batches the vectors into tensors (``adapter.experience_maker.RewardBatch.from_vectors``).

OpenRLHF 0.11.2 calls ``reward_func(queries, prompts, labels)`` with one-element lists and expects
``{"rewards": Tensor(1,), "scores": Tensor(1,), "extra_logs": {...}}``. MRTPO needs more per response:
K named rewards and, for each, the verifier text block the replay removes. They travel in
``extra_logs`` under the keys below; the MRTPO experience maker pops them before upstream sees them
(upstream rejects string values there).

Keys (one response, K rewards, K may differ between prompts but not inside a prompt's group):

- ``mrtpo_reward_names``: list[str], K stable names in a fixed order (e.g. ``format``, ``executable``,
  ``execution``; for instruction following the constraint ids).
- ``mrtpo_reward_values``: list[float], K values (binary 0/1 in the shipped tasks).
- ``mrtpo_reward_blocks``: list[str], K verifier text blocks; ``""`` means the verifier used no text
  for this response (the replay then gives that reward uniform placement).
- ``mrtpo_reward_reasons``: list[str], K short reasons; ``""`` when the reward was earned.

``rewards`` is the plain sum of the K values (what GRPO sees); ``scores`` is the task's primary reward.
Numeric per-task logs (same keys for every response of a task) may be added as floats.
"""

from __future__ import annotations

import json
import logging
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

logger = logging.getLogger(__name__)

NAMES_KEY = "mrtpo_reward_names"
VALUES_KEY = "mrtpo_reward_values"
BLOCKS_KEY = "mrtpo_reward_blocks"
REASONS_KEY = "mrtpo_reward_reasons"
MRTPO_KEYS = (NAMES_KEY, VALUES_KEY, BLOCKS_KEY, REASONS_KEY)
# Optional: per reward, [start, end) of its block in the prompt the reward function received, where the task put
# it (``RewardItem.inline``), or None for a block the prompt does not hold (the replay appends those).
SPANS_KEY = "mrtpo_reward_spans"
# Reasons that say a response was scored without its label (unreadable label, or a verifier that raised on it):
# the reward server logs a warning for each such response.
BAD_LABEL = "bad label"
VERIFIER_ERROR = "verifier error"

# Optional: the reward function cannot score on the node it runs on (``SetupError``); the samples generator stops
# the run with this text instead of training on zeros.
SETUP_ERROR_KEY = "mrtpo_setup_error"


class SetupError(Exception):
    """What a reward function needs is missing where it runs (a database on this rollout node): not a 0 reward."""


@dataclass
class RewardItem:
    """One reward of one response: its value, the verifier block, and why it was lost (if it was)."""

    name: str
    value: float
    block: str = ""
    reason: str = ""
    inline: bool = False  # the task put this block in the prompt: the replay cuts it there (never appends it)


@dataclass
class RewardVector:
    """All K rewards of one response, in the task's fixed order."""

    items: list[RewardItem]
    primary: str | None = None  # name of the reward reported as OpenRLHF's "score"
    logs: dict[str, float] = field(default_factory=dict)  # extra numeric logs, same keys per task
    spans: list[list[int] | None] | None = None  # SPANS_KEY, set by ``make_reward_func`` from ``inline``

    @property
    def names(self) -> list[str]:
        return [it.name for it in self.items]

    @property
    def values(self) -> list[float]:
        return [float(it.value) for it in self.items]

    @property
    def total(self) -> float:
        return float(sum(self.values))

    def primary_value(self) -> float:
        if self.primary is None:
            return self.total
        for it in self.items:
            if it.name == self.primary:
                return float(it.value)
        return 0.0

    def to_extra_logs(self) -> dict[str, Any]:
        logs: dict[str, Any] = {k: float(v) for k, v in self.logs.items()}
        logs[NAMES_KEY] = self.names
        logs[VALUES_KEY] = self.values
        logs[BLOCKS_KEY] = [it.block for it in self.items]
        logs[REASONS_KEY] = [it.reason for it in self.items]
        if self.spans is not None:
            logs[SPANS_KEY] = self.spans
        return logs


def to_openrlhf(vec: RewardVector) -> dict[str, Any]:
    """RewardVector -> the dict OpenRLHF's remote reward executor expects."""
    import torch

    return {
        "rewards": torch.tensor([vec.total], dtype=torch.float32),
        "scores": torch.tensor([vec.primary_value()], dtype=torch.float32),
        "extra_logs": vec.to_extra_logs(),
    }


def parse_extra_logs(extra_logs: dict[str, Any]) -> RewardVector | None:
    """Inverse of ``to_extra_logs`` (None when the MRTPO keys are absent); numeric logs are not read back."""
    if NAMES_KEY not in extra_logs:
        return None
    names = list(extra_logs[NAMES_KEY])
    values = [float(v) for v in extra_logs[VALUES_KEY]]
    blocks = list(extra_logs.get(BLOCKS_KEY, [""] * len(names)))
    reasons = list(extra_logs.get(REASONS_KEY, [""] * len(names)))
    if not (len(names) == len(values) == len(blocks) == len(reasons)):
        raise ValueError(
            f"MRTPO reward vector lengths disagree: names={len(names)} values={len(values)} "
            f"blocks={len(blocks)} reasons={len(reasons)}"
        )
    spans = extra_logs.get(SPANS_KEY)
    if spans is not None:
        if len(spans) != len(names):
            raise ValueError(f"{SPANS_KEY} has {len(spans)} entries for {len(names)} rewards")
        spans = [None if sp is None else [int(sp[0]), int(sp[1])] for sp in spans]
    items = [RewardItem(n, v, b, r) for n, v, b, r in zip(names, values, blocks, reasons)]
    return RewardVector(items, spans=spans)


def safe_reward_call(
    score_one: Callable[[str, str, Any], RewardVector],
    fallback_names: Callable[[Any], Sequence[str]],
    query: str,
    prompt: str,
    label: Any,
    log_keys: Sequence[str] = (),
) -> RewardVector:
    """Run a verifier and never raise: on any exception every reward is 0 with the reason logged.

    ``fallback_names(label)`` gives the reward names to use when scoring failed, so K stays the
    same inside a prompt's group even on failure. The fallback also carries the task's numeric logs
    (``log_keys``, each 0.0): upstream stacks every response's logs, so a missing key in one response
    would make the batch's info entries differ in length.
    """
    try:
        return score_one(query, prompt, label)
    except Exception as exc:  # noqa: BLE001 - a reward function must never raise into OpenRLHF
        reason = f"{VERIFIER_ERROR}: {type(exc).__name__}: {exc}"
        logger.warning("%s\n%s", reason, traceback.format_exc(limit=3))
        try:
            names = list(fallback_names(label))
        except Exception:  # noqa: BLE001
            names = ["reward"]
        return RewardVector([RewardItem(n, 0.0, "", reason) for n in names], logs={k: 0.0 for k in log_keys})


def check_batch_arguments(queries: Any, prompts: Any, labels: Any) -> tuple[list, list, list]:
    """Validate ``reward_func``'s arguments for the whole call: three lists (or tuples) of one length.

    Raises TypeError/ValueError naming the problem, so a call either gets one result per query or a clear
    error; lists are never silently cut to the shortest. Elements are not checked here: a non-string query
    or prompt scores as an empty response, a bad label as a reason on that response.
    """
    args = {"queries": queries, "prompts": prompts, "labels": labels}
    for name, value in args.items():
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"reward_func: {name} must be a list (one entry per response), got {type(value).__name__}")
    lengths = {name: len(value) for name, value in args.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            "reward_func: queries, prompts and labels must have one entry per response; got lengths "
            + ", ".join(f"{k}={v}" for k, v in lengths.items())
        )
    return list(queries), list(prompts), list(labels)


def label_object(label: Any, expected: str = "an object") -> dict:
    """A dataset label as a dict: a string is decoded as JSON (rows may carry the label as JSON text).

    Raises ValueError ``label is a string but not JSON: ...`` or ``label must be <expected>, got <type>``;
    each task's ``parse_label`` starts here and then checks its own fields.
    """
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as exc:
            raise ValueError(f"label is a string but not JSON: {exc.msg}") from None
    if not isinstance(label, dict):
        raise ValueError(f"label must be {expected}, got {type(label).__name__}")
    return label


def merge_extra_logs(per: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-response extra_logs -> one dict of per-response lists over the union of keys.

    A response that lacks a numeric log another response has (its verifier failed) gets 0.0 there, so a batch
    mixing valid and malformed labels still answers instead of raising ``KeyError``.
    """
    keys: list[str] = []
    for logs in per:
        keys.extend(k for k in logs if k not in keys)
    return {key: [logs.get(key, None if key == SPANS_KEY else 0.0) for logs in per] for key in keys}


def block_spans(items: Sequence[RewardItem], prompt: str) -> list[list[int] | None]:
    """Where each inline block sits in ``prompt``: its last occurrence (the task writes blocks into the user turn,
    after any system prompt that might quote the same text); None for other blocks and for blocks not found."""
    spans: list[list[int] | None] = []
    for it in items:
        start = prompt.rfind(it.block) if it.inline and it.block else -1
        spans.append([start, start + len(it.block)] if start >= 0 else None)
    return spans


def setup_error_result(message: str, n: int) -> dict[str, Any]:
    """The answer of a reward function that hit a ``SetupError``: zeros, and the message under SETUP_ERROR_KEY
    (upstream swallows a raised exception into a missing reward, so it travels in-band)."""
    import torch

    zeros = torch.zeros(n, dtype=torch.float32)
    logs = {SETUP_ERROR_KEY: message if n == 1 else [message] * n}
    return {"rewards": zeros, "scores": zeros.clone(), "extra_logs": logs}


def make_reward_func(
    score_one: Callable[[str, str, Any], RewardVector],
    fallback_names: Callable[[Any], Sequence[str]],
    check_label: Callable[[Any], None] | None = None,
) -> Callable[..., dict[str, Any]]:
    """Build an OpenRLHF ``reward_func(queries, prompts, labels)`` from a per-response scorer.

    OpenRLHF passes one-element lists; longer lists are scored too, but then only the batch's
    totals and scores are tensors of length B and the MRTPO keys hold lists of per-response lists.
    Arguments that are not three equal-length lists raise (``check_batch_arguments``).
    ``check_label(label)`` raises ``SetupError`` where this node cannot score the label (the call then answers
    ``setup_error_result``, which stops the run); the scorer itself never sees such a label.
    """

    seen_log_keys: dict[str, None] = {}  # numeric log keys of this task's successful calls, in order

    def score(query, prompt, label) -> RewardVector:
        vec = safe_reward_call(score_one, fallback_names, query, prompt, label, tuple(seen_log_keys))
        seen_log_keys.update(dict.fromkeys(vec.logs))
        if any(it.inline for it in vec.items):
            vec.spans = block_spans(vec.items, prompt if isinstance(prompt, str) else "")
        return vec

    def reward_func(queries, prompts, labels, **_: Any) -> dict[str, Any]:
        queries, prompts, labels = check_batch_arguments(queries, prompts, labels)
        try:
            for label in labels if check_label is not None else ():
                check_label(label)
        except SetupError as exc:
            logger.error("%s", exc)
            return setup_error_result(str(exc), len(queries))
        vecs = [score(query, prompt, label) for query, prompt, label in zip(queries, prompts, labels)]
        if len(vecs) == 1:
            return to_openrlhf(vecs[0])
        import torch

        return {
            "rewards": torch.tensor([v.total for v in vecs], dtype=torch.float32),
            "scores": torch.tensor([v.primary_value() for v in vecs], dtype=torch.float32),
            "extra_logs": merge_extra_logs([v.to_extra_logs() for v in vecs]),
        }

    return reward_func
