"""OpenRLHF ``--reward.remote_url reward_funcs/tool.py``: the tool-calling multi-reward function."""

from mrtpo_openrlhf.tasks.tool.reward import reward_func  # noqa: F401
