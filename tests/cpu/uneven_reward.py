"""Two rewards that vary only for prompts labelled "vary" (multi_reward.py's coin flips); a "const" prompt gets 1.0
on both, so its group has nothing to replay. With one prompt of each kind per step and two actor ranks, all the
replay lands on one rank and the other only pads: the uneven case ZeRO-3's collectives must survive."""

from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, make_reward_func

NAMES = ["even", "vowel"]


def score(query, prompt, label):
    text = query[len(prompt) :] if query.startswith(prompt) else query
    even, vowel = float(len(text.split()) % 2 == 0), float(text.strip()[:1].lower() in set("aeiou"))
    if label != "vary":
        even = vowel = 1.0
    return RewardVector(
        [
            RewardItem("even", even, "Use an even number of words."),
            RewardItem("vowel", vowel, "Start with a vowel."),
        ],
        primary="even",
    )


reward_func = make_reward_func(score, lambda label: NAMES)
