"""OpenRLHF ``--reward.remote_url`` entry for instruction following (one reward per constraint)."""

from mrtpo_openrlhf.tasks.instruction.reward import reward_func  # noqa: F401
