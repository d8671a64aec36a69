"""The task registry: the one place a training task is declared; everything that is per task reads it.

A task is a package ``mrtpo_openrlhf/tasks/<name>/``: its reward (``reward.py``: OpenRLHF's ``reward_func``, the
label parser, the prompt builder, the converter), its verifier (``verifier/``), its benchmarks (``benchmarks.py``:
loader, scorer, summary) and, in its ``__init__.py``, its ``TASK = Task(...)`` entry naming them, the bundled data,
the diagnostic spans and the embedded CPU default's settings. ``TASK_PACKAGES`` below lists the built-in ones;
``register`` adds any other (names, benchmark names and label keys are unique). Readers: the reward path
(``get_reward_func``, the reward server's ``--task``), the embedded default (``--task``), the diagnostics, the
training pre-flight (``label_parser``, ``unearnable``, ``task_of_reward``), the study, eval (``BENCHMARKS``) and
``benchmarks/rewards.py`` (docs/tasks.md). A task's modules are imported only when used, so one broken task does
not break the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from ..paths import DATA_DIR, PACKAGE_ROOT, REPO_ROOT  # noqa: F401 - re-exported for task modules

# Layout tags the format verifiers check, as regular expressions (the diagnostics' ``tags`` spans).
THINK_TAGS = r"</?think>"
CODE_FENCES = r"```[A-Za-z0-9_+-]*"
TOOL_CALL_TAGS = r"</?tool_call>"


@dataclass(frozen=True)
class BenchmarkOption:
    """A command-line option of one benchmark (``python eval/run.py --<flag>``), handed to its loader or scorer as
    the keyword argument ``keyword``. Eval's parser and ``EvalConfig.options`` are built from these, so eval itself
    has no per-benchmark fields. Benchmarks may share a flag only with the same declaration (SQL's ``--workers`` is
    eval's own, not one of these).

    flag: ``--spider-timeout``; its value is ``EvalConfig.options[dest]`` (``spider_timeout``).
    keyword: the loader's or scorer's argument (``timeout_s``).
    default: the value when the flag is not given.
    to: ``scorer`` or ``loader``.
    type / choices / action: as argparse's (``action``: ``store_true`` or ``append``; an appended list is a tuple).
    """

    flag: str
    keyword: str
    default: Any = None
    help: str = ""
    to: Literal["scorer", "loader"] = "scorer"
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: Literal["store_true", "append"] | None = None

    def __post_init__(self):
        if not self.flag.startswith("--") or len(self.flag) < 3:
            raise ValueError(f"benchmark option {self.flag!r}: a flag is written --name")
        if self.to not in ("scorer", "loader"):
            raise ValueError(f"benchmark option {self.flag}: to must be 'scorer' or 'loader', got {self.to!r}")

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    def value(self, given: Mapping[str, Any]) -> Any:
        """The option's value in ``given`` ({dest: value}); absent or None: ``default``."""
        value = given.get(self.dest)
        if value is None:
            return self.default
        return tuple(value) if self.action == "append" else value


@dataclass(frozen=True)
class Benchmark:
    """One eval benchmark of a task (``python eval/run.py --benchmark <name>``). Functions are attribute names in
    ``module``, imported on first use.

    loader: ``(data_dir: Path, **options) -> [EvalExample]`` (``data_dir``: ``--data-dir``, else ``default_data``).
    scorer: ``(example, response, answer=None, **options) -> record`` (``verdict``, ``reason``, ``answer``).
    summarizer: ``(records) -> summary``: the official aggregate numbers.
    columns: ``(summary) -> [(column, summary key)]``: what the benchmark adds to the combined table.
    default_data: the bundled mini fixture (relative to ``mrtpo_openrlhf/data``); None: the loader finds its data.
    options: its ``BenchmarkOption``s (timeouts, categories...): flags of eval's CLI, arguments of its loader or
        scorer.
    answer_field: a predictions row may give the already extracted answer under this key (SQL: ``sql``).
    keyed_by_prompt: predictions rows may name their example by ``prompt`` instead of ``id`` (IFEval's files).
    threaded: scoring may run in threads (``--workers``; the SQL verifier waits on its worker processes).
    predictions: module with the benchmark's own prediction formats (``read_file``, ``row_predictions``,
        ``text_prediction``, ``message_prediction``; each optional); None: responses only.
    official_files: ``(records, summary, label) -> {relative path: rows}``: the official harness's result files.
    group: the example ``meta`` key of its groups (BFCL: ``category``): ``--limit`` takes N of each, and a group
        without any prediction is left out (not run).
    """

    name: str
    module: str
    loader: str = "load"
    scorer: str = "score"
    summarizer: str = "summarize"
    columns: str = "columns"
    default_data: str | None = None
    options: tuple[BenchmarkOption, ...] = ()
    answer_field: str | None = None
    keyed_by_prompt: bool = False
    threaded: bool = False
    predictions: str | None = None
    official_files: str | None = None
    group: str | None = None
    coverage_note: str = ""  # added to the "n of N examples have a prediction" warning
    task: str = ""  # filled in by ``register``

    def function(self, field: str) -> Callable[..., Any] | None:
        """The function named by ``field`` (e.g. ``"scorer"``); None when not declared."""
        attr = getattr(self, field)
        if attr is None:
            return None
        func = getattr(importlib.import_module(self.module), attr, None)
        if not callable(func):
            raise AttributeError(f"benchmark {self.name!r}: {self.module} has no function {attr!r} ({field})")
        return func

    def arguments(self, to: Literal["scorer", "loader"], given: Mapping[str, Any]) -> dict[str, Any]:
        """The keyword arguments of the loader or the scorer: each declared option's value in ``given``
        ({dest: value}, e.g. ``EvalConfig.options``), its default where not given."""
        return {o.keyword: o.value(given) for o in self.options if o.to == to}

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The function ``name`` of the ``predictions`` module (None when there is none)."""
        return None if self.predictions is None else getattr(importlib.import_module(self.predictions), name, None)

    def data_dir(self, data_dir: str | Path | None) -> Path | None:
        """``--data-dir`` when given, else the bundled fixture (None when the loader finds its own data)."""
        if data_dir:
            return Path(data_dir)
        return None if self.default_data is None else DATA_DIR / self.default_data


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
    prompt_builder: function that writes a training-format prompt (no fixed signature: its callers are the task's
        own converter and benchmark loaders).
    benchmarks: the ``Benchmark``s that score this task's skill (``eval/run.py --benchmark``).
    span_kinds: ``diagnostics.spans`` kinds measured for every reward (``target``: per constraint).
    checker_spans: (reward, span kind) pairs: the span each reward's checker reads, on which a localization study
        compares the reward's share of the distance with the null block's (rewards not named: none declared).
    format_tags: regular expressions of the layout tags the format verifier checks (the ``tags`` spans).
    constraint_specs: function ``(label, n_rewards) -> [(constraint id, kwargs) | None]`` (``target`` spans).
    example_responses: function ``(row) -> [response, ...]``, a right and a wrong one (benchmarks/rewards.py).
    gpu_script: ``examples/scripts/`` script with the paper-scale settings (the study's GPU backend).
    gpu_model / gpu_max_new_tokens: the paper setting's model and ``--rollout.max_new_tokens`` (``train.sh``'s GPU
        defaults; None: MODEL / MAX_NEW_TOKENS must be given). make_data: the command that makes its training rows
        (said when DATA is missing).
    command: function ``(argv) -> exit status``: the task's command line (converter, row check), run as
        ``python -m mrtpo_openrlhf.cli.task <name> ...``.
    label_parser: function ``(label) -> parsed`` the reward's scorer opens each label with (ValueError: bad label);
        the training pre-flight parses every row's label with it.
    unearnable: function ``(label) -> [(reward name, reason)]``: the rewards no response can earn under that label
        (a missing database, a constraint that cannot be checked); the pre-flight stops on them.
    env_vars: the environment variables its reward and verifier read (limits, a data root); the launcher forwards
        them to every Ray worker (``rewards/env.py``), since rewards run wherever Ray placed the vLLM engines.
    path_env_vars: those of ``env_vars`` that hold paths: made absolute before they are forwarded.
    null_position / null_text: its null block (``core.null_block``; ``null_block()``): the diagnostics' null control
        and the ``js-contrast`` relevance's extra context. Position ``inline`` or ``appended``: where most of its
        verifier blocks sit; text None: the shared neutral sentence (``core.null_block.NULL_TEXT``).
    """

    name: str
    reward_module: str
    train_data: str
    label_keys: tuple[str, ...]
    reward_file: str | None = None
    cpu_train_data: str | None = None
    cpu_max_new_tokens: int = 96
    prompt_builder: str | None = None
    benchmarks: tuple[Benchmark, ...] = ()
    span_kinds: tuple[str, ...] = ("tags",)
    checker_spans: tuple[tuple[str, str], ...] = ()
    format_tags: tuple[str, ...] = (THINK_TAGS,)
    constraint_specs: str | None = None
    example_responses: str | None = None
    gpu_script: str | None = None
    gpu_model: str | None = None
    gpu_max_new_tokens: int | None = None
    make_data: str | None = None
    command: str | None = None
    label_parser: str = "parse_label"
    unearnable: str | None = None
    env_vars: tuple[str, ...] = ()
    path_env_vars: tuple[str, ...] = ()
    null_position: Literal["inline", "appended"] = "inline"
    null_text: str | None = None

    def null_block(self) -> Any:
        """The task's ``core.null_block.NullBlock`` (imported here: the registry itself stays torch-free)."""
        from ..core.null_block import NULL_TEXT, NullBlock

        return NullBlock(NULL_TEXT if self.null_text is None else self.null_text, self.null_position)

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
BENCHMARKS: dict[str, Benchmark] = {}  # every registered task's benchmarks, in registry order


def register(task: Task) -> Task:
    """Add ``task`` and its benchmarks to the registry. Refuses a taken task or benchmark name, and label keys
    another task already has (``task_of_label`` must name one task per label)."""
    if task.name in TASKS:
        raise ValueError(f"task {task.name!r} is already registered")
    if not task.label_keys:
        raise ValueError(f"task {task.name!r}: label_keys must name at least one label field")
    if task.null_position not in ("inline", "appended"):
        raise ValueError(f"task {task.name!r}: null_position {task.null_position!r}: choose inline or appended")
    stray = sorted(set(task.path_env_vars) - set(task.env_vars))
    if stray:
        raise ValueError(f"task {task.name!r}: path_env_vars {stray} are not among its env_vars")
    for other in TASKS.values():
        shared = sorted(set(task.label_keys) & set(other.label_keys))
        if shared:
            raise ValueError(f"task {task.name!r}: label key(s) {shared} are task {other.name!r}'s already")
    names = [b.name for b in task.benchmarks]
    for name in names:
        if name in BENCHMARKS or names.count(name) > 1:
            owner = BENCHMARKS[name].task if name in BENCHMARKS else task.name
            raise ValueError(f"task {task.name!r}: benchmark {name!r} is already registered (task {owner!r})")
    declared = {o.flag: (b.name, o) for b in BENCHMARKS.values() for o in b.options}
    for bench in task.benchmarks:
        for option in bench.options:
            first = declared.setdefault(option.flag, (bench.name, option))
            if first[1] != option:
                raise ValueError(
                    f"task {task.name!r}: benchmark {bench.name!r} declares {option.flag} unlike benchmark "
                    f"{first[0]!r} (a shared flag needs one declaration)"
                )
    task = replace(task, benchmarks=tuple(replace(b, task=task.name) for b in task.benchmarks))
    TASKS[task.name] = task
    BENCHMARKS.update((b.name, b) for b in task.benchmarks)
    return task


def unregister(name: str) -> None:
    """Take task ``name`` and its benchmarks out of the registry (tests that add a task for a while)."""
    task = TASKS.pop(name, None)
    for bench in task.benchmarks if task is not None else ():
        BENCHMARKS.pop(bench.name, None)


def benchmark_options() -> dict[str, BenchmarkOption]:
    """Every registered benchmark option by ``dest``, once each (shared flags are declared alike)."""
    return {o.dest: o for b in BENCHMARKS.values() for o in b.options}


def get_benchmark(name: str) -> Benchmark:
    """The registered benchmark ``name``; ValueError listing the benchmarks for an unknown name."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


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


# The built-in tasks: each package's ``TASK`` (mrtpo_openrlhf/tasks/<name>/__init__.py), in this order.
TASK_PACKAGES = ("sql", "instruction", "tool")
for _package in TASK_PACKAGES:
    register(importlib.import_module(f"{__name__}.{_package}").TASK)
