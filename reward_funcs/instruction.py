"""OpenRLHF ``--reward.remote_url`` entry for instruction following (one reward per constraint)."""

from mrtpo_openrlhf.rewards.instruction import reward_func  # noqa: F401
