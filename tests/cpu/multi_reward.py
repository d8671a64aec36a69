"""A deterministic two-reward function for the CPU end-to-end runs (random tiny models vary on both).

Loaded by OpenRLHF inside the vLLM rollout actor (``--reward.remote_url <this file>``), so it imports the
installed package only. A random model's 32 tokens are always long and rarely hold a digit, so the rewards
are coin flips on its text: ``even`` (an even number of words), ``vowel`` (the first word starts with a
vowel); each with its own verifier block, which the prompt does not hold (the replay adds it to ``full``).
"""

from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, make_reward_func

NAMES = ["even", "vowel"]


def score(query, prompt, label):
    text = query[len(prompt) :] if query.startswith(prompt) else query
    return RewardVector(
        [
            RewardItem("even", float(len(text.split()) % 2 == 0), "Use an even number of words."),
            RewardItem("vowel", float(text.strip()[:1].lower() in set("aeiou")), "Start with a vowel."),
        ],
        primary="even",
    )


reward_func = make_reward_func(score, lambda label: NAMES)
