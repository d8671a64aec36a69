"""A deterministic two-reward function for the CPU end-to-end runs (random tiny models vary on both).

Loaded by OpenRLHF inside the vLLM rollout actor (``--reward.remote_url <this file>``), so it imports the
installed package only. Rewards: ``long`` (more than 40 characters), ``digit`` (contains a digit); each
with its own verifier block, which the prompt does not hold (the replay adds it to the ``full`` context).
"""
from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, make_reward_func

NAMES = ["long", "digit"]


def score(query, prompt, label):
    text = query[len(prompt):] if query.startswith(prompt) else query
    return RewardVector(
        [
            RewardItem("long", float(len(text) > 40), "Write more than 40 characters."),
            RewardItem("digit", float(any(c.isdigit() for c in text)), "Include at least one digit."),
        ],
        primary="long",
    )


reward_func = make_reward_func(score, lambda label: NAMES)
