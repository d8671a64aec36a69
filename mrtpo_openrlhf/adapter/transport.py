"""Reward-vector transport: from the reward function's ``extra_logs`` to the experience maker.

One response's rewards are one ``rewards.contract.RewardVector`` everywhere: the reward function builds it, it
crosses Ray or HTTP as ``extra_logs`` (``RewardVector.to_extra_logs``, the only wire form), and the samples
generator turns it back into a RewardVector that rides in ``Experience.info[VECTOR]`` as a one-element list, which
upstream's ``concat_experiences`` joins into the micro-batch's list of B vectors. The experience maker pops that
list and builds the batch's tensors from it (``RewardBatch.from_vectors``).

Upstream's ``_process_response_into_experience`` turns every ``extra_logs`` value into a tensor (strings raise),
so the MRTPO keys are split off before it runs; the actors accept only numeric (B,) info tensors, so the
experience maker pops ``info[VECTOR]`` before experiences are sent to them.
"""

from __future__ import annotations

from typing import Any

import torch

from ..rewards.contract import MRTPO_KEYS, SETUP_ERROR_KEY, SPANS_KEY, RewardItem, RewardVector, parse_extra_logs

VECTOR = "mrtpo_reward_vector"  # info key: list of B RewardVectors


def split_extra_logs(extra_logs: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(upstream-safe logs, MRTPO entries)."""
    extra_logs = dict(extra_logs or {})
    ours = {k: extra_logs.pop(k) for k in (*MRTPO_KEYS, SPANS_KEY, SETUP_ERROR_KEY) if k in extra_logs}
    return extra_logs, ours


class RewardSetupError(RuntimeError):
    """A reward function reported that it cannot score where it runs (``rewards.contract.SetupError``)."""


def raise_setup_error(ours: dict[str, Any]) -> None:
    """Stop the run with the reward function's setup error, if it reported one (e.g. a database missing on the
    rollout node that scored this response)."""
    message = ours.get(SETUP_ERROR_KEY)
    if message:
        raise RewardSetupError(message[0] if isinstance(message, list) else str(message))


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
        keys.update(dict.fromkeys(k for k, v in e.info.items() if isinstance(v, torch.Tensor) and k != VECTOR))
    filled = set()
    for e in experiences:
        for k in keys:
            if k not in e.info:
                e.info[k] = torch.zeros(len(e.sequences), dtype=torch.float32)
                filled.add(k)
    return sorted(filled)


def attach_reward_vector(experience, ours: dict[str, Any], scalar_reward: float | None) -> RewardVector:
    """Store one response's RewardVector in ``experience.info[VECTOR]`` and return it.

    A reward function without MRTPO keys gives one reward named ``reward`` (its scalar) and no block.
    """
    vec = parse_extra_logs(ours) if ours else None
    if vec is None or not vec.items:
        vec = RewardVector([RewardItem("reward", scalar(scalar_reward) or 0.0)])
    experience.info[VECTOR] = [vec]
    return vec


def pop_reward_vectors(experience) -> list[RewardVector]:
    """Remove and return a (concatenated) experience's B reward vectors, in row order ([] when absent)."""
    return list(experience.info.pop(VECTOR, []))
