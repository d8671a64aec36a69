"""Reward-vector transport: from the reward function's ``extra_logs`` to the experience maker.

Upstream's ``_process_response_into_experience`` turns every ``extra_logs`` value into a tensor
(strings raise). We pop the MRTPO keys first and store them in ``Experience.info`` in shapes that
``Experience.concat_experiences`` merges correctly:

- ``info[VALUES]``: (1, K) float tensor -> (B, K_max), right-padded with 0.
- ``info[PRESENT]``: (1, K) ones -> (B, K_max), 0 where a row has fewer rewards.
- ``info[NAMES]``, ``info[BLOCKS]``: [list[str]] -> list of B lists.
- ``info[SPANS]``: [K [start, end] or None] -> list of B entries; [None] when the reward function records no
  spans. Optional ``extra_logs`` key ``mrtpo_reward_spans``: for each block, its character span in the prompt
  the reward function received where the task put it, or None for a block the prompt does not hold.

The experience maker pops all four before experiences are sent to the actors (which accept only
numeric (B,) info tensors).
"""

from __future__ import annotations

from typing import Any

import torch

from ..rewards.contract import MRTPO_KEYS, SPANS_KEY, parse_extra_logs

VALUES = "mrtpo_values"
PRESENT = "mrtpo_present"
NAMES = "mrtpo_names"
BLOCKS = "mrtpo_blocks"
SPANS = "mrtpo_spans"
INFO_KEYS = (VALUES, PRESENT, NAMES, BLOCKS, SPANS)


def split_extra_logs(extra_logs: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(upstream-safe logs, MRTPO entries)."""
    extra_logs = dict(extra_logs or {})
    ours = {k: extra_logs.pop(k) for k in (*MRTPO_KEYS, SPANS_KEY) if k in extra_logs}
    return extra_logs, ours


def scalar(value: Any) -> float | None:
    """A reward as one float: a number, a one-element tensor or list (the HTTP server's JSON ``[x]``), or None."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.flatten().tolist()
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(f"expected one reward per response, got {len(value)}: {value!r}")
        (value,) = value
    return float(value)


def fill_missing_logs(experiences) -> list[str]:
    """Give every experience each numeric info key some other one has (value 0.0), so a response whose reward
    function returned fewer logs (a verifier failure) cannot break upstream's batching. Returns the keys filled."""
    keys: dict[str, None] = {}
    for e in experiences:
        keys.update(dict.fromkeys(k for k, v in e.info.items() if isinstance(v, torch.Tensor) and k not in INFO_KEYS))
    filled = set()
    for e in experiences:
        for k in keys:
            if k not in e.info:
                e.info[k] = torch.zeros(len(e.sequences), dtype=torch.float32)
                filled.add(k)
    return sorted(filled)


def attach_reward_vector(experience, ours: dict[str, Any], scalar_reward: float | None) -> None:
    """Store one response's reward vector in ``experience.info`` (see module docstring).

    A reward function without MRTPO keys gives one reward named ``reward`` (its scalar) and no block.
    """
    vec = parse_extra_logs(ours) if ours else None
    if vec is None or not vec.items:
        names, values, blocks = ["reward"], [scalar(scalar_reward) or 0.0], [""]
    else:
        names, values, blocks = vec.names, vec.values, [it.block for it in vec.items]
    experience.info[VALUES] = torch.tensor([values], dtype=torch.float32)
    experience.info[PRESENT] = torch.ones((1, len(values)), dtype=torch.float32)
    experience.info[NAMES] = [list(names)]
    experience.info[BLOCKS] = [list(blocks)]
    spans = ours.get(SPANS_KEY) if vec is not None and vec.items else None
    if spans is not None and len(spans) != len(blocks):
        raise ValueError(f"{SPANS_KEY} has {len(spans)} entries for {len(blocks)} rewards")
    experience.info[SPANS] = [None if spans is None else [None if sp is None else tuple(sp) for sp in spans]]


def pop_reward_vectors(experience) -> dict[str, Any]:
    """Remove and return our entries from a (concatenated) experience's info."""
    return {k: experience.info.pop(k) for k in INFO_KEYS if k in experience.info}
