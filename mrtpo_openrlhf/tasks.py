"""The task registry: the one place a training task is declared; everything that is per task reads it.

A task is a reward family with its data. Its entry names the reward module (OpenRLHF's ``reward_func`` and the
task's helpers), the bundled data, the prompt builder, the eval benchmarks, the diagnostic spans and the embedded
CPU default's settings. Readers: the reward path (``get_reward_func``, the reward server's ``--task``), the embedded
default (``python -m mrtpo_openrlhf.launch.default --task``), the diagnostics (``diagnose --task/--data``, the
label's task, the spans), the study (``task = ...``, its GPU script), eval (benchmark names, training-format
prompts) and ``benchmarks/rewards.py``. Adding a task is one reward module plus one ``register(Task(...))`` here
(docs/tasks.md). Nothing is imported until it is used, so one broken task does not break the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .paths import DATA_DIR, PACKAGE_ROOT, REPO_ROOT  # noqa: F401 - re-exported for task modules

# Layout tags the format verifiers check, as regular expressions (the diagnostics' ``tags`` spans).
THINK_TAGS = r"</?think>"
CODE_FENCES = r"```[A-Za-z0-9_+-]*"
TOOL_CALL_TAGS = r"</?tool_call>"


@dataclass(frozen=True)
class Task:
    """One task. Paths are relative (data to ``mrtpo_openrlhf/data``, files to the repo root) or absolute;
    functions are attribute names in ``reward_module``.

    name: the ``--task`` value.
    reward_module: importable module with ``reward_func(queries, prompts, labels)`` (optionally ``WARM_UP_CALL``).
    train_data: bundled mini training rows (``prompt``/``label``): ``diagnose --data <name>``, the benchmarks.
    label_keys: a label with any of these keys belongs to this task (``diagnose`` without ``--task``).
    reward_file: the ``--reward.remote_url`` file OpenRLHF loads by path (None: the reward module's own file).
    cpu_train_data: rows the embedded CPU default trains on (None: ``train_data``).
    cpu_max_new_tokens: the embedded CPU default's ``--rollout.max_new_tokens``.
    prompt_builder: function that writes a training-format prompt (eval builds its prompts with it).
    benchmarks: ``eval/run.py --benchmark`` names that score this task's skill (loaders in ``evaluation``).
    span_kinds: ``diagnostics.spans`` kinds measured for every reward (``target``: per constraint).
    format_tags: regular expressions of the layout tags the format verifier checks (the ``tags`` spans).
    constraint_specs: function ``(label, n_rewards) -> [(constraint id, kwargs) | None]`` (``target`` spans).
    example_responses: function ``(row) -> [response, ...]``, a right and a wrong one (benchmarks/rewards.py).
    gpu_script: ``examples/scripts/`` script with the paper-scale settings (the study's GPU backend).
    label_parser: function ``(label) -> parsed`` the reward's scorer opens each label with (ValueError: bad label);
        the training pre-flight parses every row's label with it.
    unearnable: function ``(label) -> [(reward name, reason)]``: the rewards no response can earn under that label
        (a missing database, a constraint that cannot be checked); the pre-flight stops on them.
    """

    name: str
    reward_module: str
    train_data: str
    label_keys: tuple[str, ...]
    reward_file: str | None = None
    cpu_train_data: str | None = None
    cpu_max_new_tokens: int = 96
    prompt_builder: str | None = None
    benchmarks: tuple[str, ...] = ()
    span_kinds: tuple[str, ...] = ("tags",)
    format_tags: tuple[str, ...] = (THINK_TAGS,)
    constraint_specs: str | None = None
    example_responses: str | None = None
    gpu_script: str | None = None
    label_parser: str = "parse_label"
    unearnable: str | None = None

    def module(self) -> Any:
        return importlib.import_module(self.reward_module)

    def function(self, field: str) -> Callable[..., Any] | None:
        """The reward module's function named by ``field`` (e.g. ``"prompt_builder"``); None when not declared."""
        attr = getattr(self, field)
        if attr is None:
            return None
        func = getattr(self.module(), attr, None)
        if not callable(func):
            raise AttributeError(f"task {self.name!r}: {self.reward_module} has no function {attr!r} ({field})")
        return func

    def reward_func(self) -> Callable[..., dict[str, Any]]:
        """The OpenRLHF ``reward_func(queries, prompts, labels)``."""
        func = getattr(self.module(), "reward_func", None)
        if not callable(func):
            raise AttributeError(f"{self.reward_module} has no callable reward_func")
        return func

    def reward_path(self) -> Path:
        """The file for ``--reward.remote_url`` (found without importing the module)."""
        if self.reward_file is not None:
            return REPO_ROOT / self.reward_file
        spec = importlib.util.find_spec(self.reward_module)
        if spec is None or not spec.origin:
            raise ValueError(f"task {self.name!r}: reward module {self.reward_module} not found")
        return Path(spec.origin)

    def train_data_path(self) -> Path:
        return DATA_DIR / self.train_data

    def cpu_train_data_path(self) -> Path:
        return DATA_DIR / (self.cpu_train_data or self.train_data)


TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add ``task`` to the registry (names are unique)."""
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is already registered")
    if not task.label_keys:
        raise ValueError(f"task {task.name!r}: label_keys must name at least one label field")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task ``name``; ValueError listing the tasks for an unknown name."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(sorted(TASKS))}")
    return TASKS[name]


def get_reward_module(task: str) -> Any:
    """Import and return the reward module of ``task``."""
    return get_task(task).module()


def get_reward_func(task: str) -> Callable[..., dict[str, Any]]:
    """The OpenRLHF ``reward_func(queries, prompts, labels)`` of ``task``."""
    return get_task(task).reward_func()


def warm_up(task: str) -> None:
    """Make the task's ``WARM_UP_CALL`` (if it has one), so one-time loads happen before the first real call."""
    module = get_reward_module(task)
    call = getattr(module, "WARM_UP_CALL", None)
    if call is not None:
        module.reward_func(*call)


def task_of_reward(remote_url: str | Path, reward_func: Callable[..., Any] | None = None) -> Task | None:
    """The task whose reward ``remote_url`` is: its reward file (``reward_file``) or its reward module's own file,
    compared as resolved paths, or else (a copy of the repo, e.g. a Ray job's working_dir) the task whose
    ``reward_func`` is the loaded file's ``reward_func``. None for any other reward (a user's own)."""
    target = Path(remote_url).resolve()
    for task in TASKS.values():
        try:
            spec = importlib.util.find_spec(task.reward_module)
            candidates = [task.reward_path()] + ([Path(spec.origin)] if spec and spec.origin else [])
        except (ImportError, ValueError):
            continue
        if any(path.resolve() == target for path in candidates):
            return task
    for task in TASKS.values() if reward_func is not None else ():
        try:
            if task.reward_func() is reward_func:
                return task
        except (ImportError, AttributeError):
            continue
    return None


def task_of_label(label: dict) -> list[str]:
    """The tasks whose ``label_keys`` the label (a dict) has, in registry order."""
    return [t.name for t in TASKS.values() if any(key in label for key in t.label_keys)]


register(
    Task(
        name="sql",
        reward_module="mrtpo_openrlhf.rewards.sql",
        reward_file="reward_funcs/sql.py",
        train_data="sql/train_mini.jsonl",
        # the CPU default's prompts carry a worked example of the layout; SmolLM2-135M follows nothing less
        cpu_train_data="sql/train_mini_oneshot.jsonl",
        label_keys=("gold",),
        prompt_builder="build_prompt",
        benchmarks=("spider", "bird"),
        span_kinds=("tags", "select_columns"),
        format_tags=(THINK_TAGS, CODE_FENCES),
        example_responses="example_responses",
        gpu_script="train_mrtpo_sql.sh",
        unearnable="unearnable_rewards",
    )
)
register(
    Task(
        name="instruction",
        reward_module="mrtpo_openrlhf.rewards.instruction",
        reward_file="reward_funcs/instruction.py",
        train_data="instructions/train_mini.jsonl",
        label_keys=("instruction_id_list", "constraints"),
        benchmarks=("ifeval", "ifbench", "muldimif"),
        span_kinds=("tags", "target"),
        format_tags=(THINK_TAGS,),
        constraint_specs="constraint_specs",
        example_responses="example_responses",
        gpu_script="train_mrtpo_if.sh",
        unearnable="unearnable_rewards",
    )
)
register(
    Task(
        name="tool",
        reward_module="mrtpo_openrlhf.rewards.tool",
        reward_file="reward_funcs/tool.py",
        train_data="tool/train_mini.jsonl",
        label_keys=("functions", "ground_truth"),
        prompt_builder="build_prompt",
        benchmarks=("bfcl",),
        span_kinds=("tags", "tool_arguments"),
        format_tags=(THINK_TAGS, TOOL_CALL_TAGS),
        example_responses="example_responses",
        gpu_script="train_mrtpo_tool.sh",
        unearnable="unearnable_rewards",
    )
)
