"""Deterministic reward for the CPU end-to-end GRPO test: the response's length, saturating.

Loaded by OpenRLHF inside the vLLM rollout actor through ``--reward.remote_url <this file>``; it must never
raise (upstream turns an exception into a missing reward far from the cause), hence the broad fallback.
reward = min(len(response_chars), TARGET) / TARGET, in [0, 1].
"""

TARGET = 512


def response_text(query: str, prompt: str) -> str:
    """The generated part of ``query`` (prompt + response, decoded with special tokens)."""
    return query[len(prompt):] if query.startswith(prompt) else query


def length_reward(text: str) -> float:
    return min(len(text), TARGET) / TARGET


def reward_func(queries, prompts, labels):
    rewards = []
    for query, prompt in zip(queries, prompts):
        try:
            rewards.append(length_reward(response_text(query, prompt)))
        except Exception:  # never raise into the rollout executor
            rewards.append(0.0)
    return {"rewards": rewards[0], "scores": rewards[0], "extra_logs": {"length_reward": rewards[0]}}
