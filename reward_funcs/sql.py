"""OpenRLHF entry point for the text-to-SQL rewards: ``--reward.remote_url reward_funcs/sql.py``.

OpenRLHF loads this file by path, so it must import the installed package (no relative imports).
"""

from mrtpo_openrlhf.tasks.sql.reward import reward_func

__all__ = ["reward_func"]
