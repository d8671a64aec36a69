"""Task name -> reward module. Modules are imported lazily so one broken task does not break the others."""
from __future__ import annotations

import importlib
from typing import Any, Callable

TASKS: dict[str, str] = {
    "sql": "mrtpo_openrlhf.rewards.sql",
    "instruction": "mrtpo_openrlhf.rewards.instruction",
    "tool": "mrtpo_openrlhf.rewards.tool",
}


def get_reward_module(task: str) -> Any:
    """Import and return the reward module of ``task``; ValueError for an unknown task name."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(sorted(TASKS))}")
    return importlib.import_module(TASKS[task])


def get_reward_func(task: str) -> Callable[..., dict[str, Any]]:
    """The OpenRLHF ``reward_func(queries, prompts, labels)`` of ``task``."""
    module = get_reward_module(task)
    func = getattr(module, "reward_func", None)
    if not callable(func):
        raise AttributeError(f"{TASKS[task]} has no callable reward_func")
    return func


def warm_up(task: str) -> None:
    """Make the task's ``WARM_UP_CALL`` (if it has one), so one-time loads happen before the first real call."""
    module = get_reward_module(task)
    call = getattr(module, "WARM_UP_CALL", None)
    if call is not None:
        module.reward_func(*call)
