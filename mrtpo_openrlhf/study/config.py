"""A study config (TOML): the task, data, model, arms, seeds, steps, batch shape and sampling.

    [study]
    name = "if-smollm2-cpu"
    backend = "cpu"                 # cpu: the embedded default's launcher; gpu: examples/scripts/train_*.sh
    task = "instruction"
    data = "mrtpo_openrlhf/data/instructions/study_train.jsonl"   # relative to the repo root, or absolute
    model = "smollm2"
    arms = ["grpo", "gdpo", "mrtpo", "mrtpo-shuffle", "mrtpo-joint"]   # ARMS: the placements' and measures' too
    seeds = [1, 2, 3]
    steps = 16
    prompts_per_step = 4            # these five: default RUN_SETTINGS[backend] (core/settings.py); max_new_tokens
    samples_per_prompt = 4          # the task's own
    max_new_tokens = 128
    temperature = 0.7
    lr = 1e-5
    beta = 0.5
    warmup_steps = 10
    extra_args = []                 # more upstream/MRTPO flags, appended last (they win)
    prompt_draw = "first"           # first: upstream's first steps x prompts_per_step rows, the same for every
                                    # seed; per_seed: each seed draws its own rows from data (every arm of the seed
                                    # gets them), written to <study>/prompts/seed<k>.jsonl
    arm_order = "listed"            # listed, or random: each seed runs its arms in an order drawn from the seed
    arm_seeds = {}                  # arm -> seeds, for arms run at fewer seeds than `seeds` (e.g. secondary arms)
    heldout = ""                    # unseen prompts (JSONL): each final checkpoint is scored on them after its run
    heldout_prompts = 64            # the first rows of `heldout`
    heldout_samples = 4
    comparisons = []                # the declared comparisons "a:b" (A - B paired by seed, Holm together), for the
                                    # report; empty: the report's default
    comparison_seeds = {}           # "a:b" -> the seeds that comparison pairs (default: every seed planned for
                                    # both arms), e.g. when an arm runs extra seeds for another comparison only
    primary_endpoint = "total"      # the held-out score the declared comparisons are judged on: "total" (the summed
                                    # reward) or "instruction_level" (the mean share of a prompt's rewards met, for
                                    # tasks whose prompts carry different numbers of rewards)
    localization_rule = "null_and_random"  # the plan's localization rule: tokens for 80% below the null's and the
                                    # random profile's, or below the null's alone ("null")
    auc = "mean"                    # the report's training-curve AUC: mean over steps, or "trapezoid" / T
    steps_to = "trailing3"          # steps to --threshold: a 3-step trailing mean's first, or "first" (the rate's)

Every arm of one seed gets the same prompts, data order, rollout seed and initial model (``--train.seed``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import tomllib

from mrtpo_openrlhf.core.placements import placement_arms
from mrtpo_openrlhf.core.relevance import relevance_arms
from mrtpo_openrlhf.core.settings import (
    DEFAULT_BETA,
    DEFAULT_PLACEMENT,
    DEFAULT_WARMUP_STEPS,
    RUN_SETTINGS,
    RunSettings,
)
from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.tasks import TASKS

from .stats import AUC_RULES, STEPS_TO_RULES


@dataclass(frozen=True)
class Arm:
    """One arm of the study: an advantage estimator and, for MRTPO, where its advantages are placed (a placement
    mode) over which relevance measure (None: the default measure, no flag)."""

    estimator: str  # upstream --algo.advantage.estimator
    placement: str | None = None  # --algo.mrtpo.placement (mrtpo arms only)
    relevance: str | None = None  # --algo.mrtpo.relevance (mrtpo arms only; None: DEFAULT_RELEVANCE)

    def flags(self) -> list[str]:
        placement = ["--algo.mrtpo.placement", self.placement] if self.placement else []
        return placement + (["--algo.mrtpo.relevance", self.relevance] if self.relevance else [])


BASELINE_ARMS: dict[str, Arm] = {"grpo": Arm("group_norm"), "gdpo": Arm("gdpo")}
PLACEMENT_ESTIMATOR = "mrtpo"  # the estimator that reads --algo.mrtpo.placement


def study_arms() -> dict[str, Arm]:
    """The baselines, then one ``mrtpo`` arm per registered placement that declares one (``core.placements``, over
    the default measure), then one per registered relevance measure that declares one (``core.relevance``, under the
    default placement): a run is a placement x a measure. An arm name taken twice is refused."""
    arms = dict(BASELINE_ARMS)
    placed = {arm: Arm(PLACEMENT_ESTIMATOR, mode) for arm, mode in placement_arms().items()}
    measured = {arm: Arm(PLACEMENT_ESTIMATOR, DEFAULT_PLACEMENT, name) for arm, name in relevance_arms().items()}
    for extra in (placed, measured):
        taken = sorted(set(arms) & set(extra))
        if taken:
            raise ValueError(f"study arm(s) {taken} declared twice (a baseline, a placement or a relevance measure)")
        arms.update(extra)
    return arms


class _Arms(Mapping):
    """``study_arms()`` read afresh on every access: a placement registered later has its arm at once."""

    def __getitem__(self, name: str) -> Arm:
        return study_arms()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(study_arms())

    def __len__(self) -> int:
        return len(study_arms())


ARMS: Mapping[str, Arm] = _Arms()


def method_arm() -> str:
    """The arm of the method itself (the default placement's)."""
    return next(arm for arm, mode in placement_arms().items() if mode == DEFAULT_PLACEMENT)


def ablation_arms() -> list[str]:
    """The arms of the other placements that have one, in registration order (``mrtpo-shuffle``, ``mrtpo-joint``)."""
    return [arm for arm, mode in placement_arms().items() if mode != DEFAULT_PLACEMENT]


def measure_arms() -> list[str]:
    """The arms of the other relevance measures that have one, in registration order (``mrtpo-loggap``,
    ``mrtpo-contrast``): the method's placement over another measure."""
    return list(relevance_arms())


BACKENDS = ("cpu", "gpu")
PRIMARY_ENDPOINTS = ("total", "instruction_level")  # keys of heldout.json (study/heldout.py summarize)
LOCALIZATION_RULES = ("null_and_random", "null")  # study/report/localization.py RULES
PROMPT_DRAWS = ("first", "per_seed")
ARM_ORDERS = ("listed", "random")


class ConfigError(ValueError):
    """A study config that cannot run; the message names the key."""


@dataclass(frozen=True)
class StudyConfig:
    name: str
    task: str
    data: str
    arms: list[str]
    seeds: list[int]
    steps: int
    backend: str = "cpu"
    model: str = "smollm2"
    # None: RUN_SETTINGS[backend]'s (max_new_tokens: the task's CPU default), filled in on construction
    prompts_per_step: int | None = None
    samples_per_prompt: int | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None
    lr: float | None = None
    beta: float = DEFAULT_BETA
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    extra_args: list[str] = field(default_factory=list)
    # gpu backend: environment for examples/scripts/train_*.sh (NUM_GPUS, ROLLOUT_BATCH, ...)
    env: dict[str, str] = field(default_factory=dict)
    prompt_draw: str = "first"
    arm_order: str = "listed"
    arm_seeds: dict[str, list[int]] = field(default_factory=dict)
    heldout: str = ""
    heldout_prompts: int = 64
    heldout_samples: int = 4
    comparisons: list[str] = field(default_factory=list)
    comparison_seeds: dict[str, list[int]] = field(default_factory=dict)
    primary_endpoint: str = "total"
    localization_rule: str = "null_and_random"
    auc: str = "mean"
    steps_to: str = "trailing3"

    def __post_init__(self):
        run = RUN_SETTINGS.get(self.backend)
        # the run settings a study config has a field for (micro-batches: a study gives its own in extra_args)
        own = {f.name for f in fields(self)}
        for f in fields(RunSettings):
            if f.name in own and getattr(self, f.name) is None and run is not None:
                object.__setattr__(self, f.name, getattr(run, f.name))
        if self.max_new_tokens is None and self.task in TASKS:
            object.__setattr__(self, "max_new_tokens", TASKS[self.task].cpu_max_new_tokens)

    def data_path(self) -> Path:
        return _repo_path(self.data)

    def model_ref(self) -> str:
        """``smollm2`` (the embedded default model) or the model folder, relative paths from the repo root."""
        return self.model if self.model == "smollm2" else str(_repo_path(self.model))

    def heldout_path(self) -> Path | None:
        return _repo_path(self.heldout) if self.heldout else None

    def seeds_of(self, arm: str) -> list[int]:
        return list(self.arm_seeds.get(arm, self.seeds))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def runs(self) -> list[tuple[str, int]]:
        """(arm, seed) in execution order: seed-major, so that a partial study has every arm for its seeds; within a
        seed the arms as listed, or (``arm_order = "random"``) in an order drawn from the seed alone."""
        order = []
        for seed in self.seeds:
            arms = [arm for arm in self.arms if seed in self.seeds_of(arm)]
            if self.arm_order == "random":
                random.Random(f"arm-order-{seed}").shuffle(arms)
            order += [(arm, seed) for arm in arms]
        return order


def _repo_path(value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


def load_config(path: str | Path) -> StudyConfig:
    """Read and validate a TOML study config (the ``[study]`` table)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse_config(raw.get("study", raw), str(path))


def parse_config(raw: dict[str, Any], where: str = "config") -> StudyConfig:
    known = set(StudyConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    missing = [k for k in ("name", "task", "data", "arms", "seeds", "steps") if k not in raw]
    if missing:
        raise ConfigError(f"{where}: missing key(s) {missing}")
    try:
        cfg = StudyConfig(**raw)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    bad_arms = [a for a in cfg.arms if a not in ARMS]
    if bad_arms or not cfg.arms:
        raise ConfigError(f"{where}: arms {bad_arms or '[]'}: choose from {sorted(ARMS)}")
    if len(set(cfg.arms)) != len(cfg.arms) or len(set(cfg.seeds)) != len(cfg.seeds) or not cfg.seeds:
        raise ConfigError(f"{where}: arms and seeds must be non-empty and without repeats")
    if cfg.task not in TASKS:
        raise ConfigError(f"{where}: task {cfg.task!r}: choose from {sorted(TASKS)}")
    if cfg.backend not in BACKENDS:
        raise ConfigError(f"{where}: backend {cfg.backend!r}: choose from {BACKENDS}")
    for key in ("steps", "prompts_per_step", "max_new_tokens"):
        if int(getattr(cfg, key)) < 1:
            raise ConfigError(f"{where}: {key} must be >= 1")
    if cfg.samples_per_prompt < 2:
        raise ConfigError(f"{where}: samples_per_prompt must be >= 2 (group-normalized estimators)")
    if not cfg.name or "/" in cfg.name:
        raise ConfigError(f"{where}: name must be a plain folder name")
    if cfg.prompt_draw not in PROMPT_DRAWS:
        raise ConfigError(f"{where}: prompt_draw {cfg.prompt_draw!r}: choose from {PROMPT_DRAWS}")
    if cfg.arm_order not in ARM_ORDERS:
        raise ConfigError(f"{where}: arm_order {cfg.arm_order!r}: choose from {ARM_ORDERS}")
    for arm, seeds in cfg.arm_seeds.items():
        if arm not in cfg.arms:
            raise ConfigError(f"{where}: arm_seeds names {arm!r}, which is not in arms {cfg.arms}")
        if not seeds or not set(seeds) <= set(cfg.seeds):
            raise ConfigError(f"{where}: arm_seeds.{arm} {seeds} must be a non-empty subset of seeds {cfg.seeds}")
    if cfg.heldout and not cfg.heldout_path().is_file():
        raise ConfigError(f"{where}: heldout {cfg.heldout!r}: no such file")
    for item in cfg.comparisons:
        a, sep, b = str(item).partition(":")
        if not sep or a not in cfg.arms or b not in cfg.arms or a == b:
            raise ConfigError(f"{where}: comparisons {item!r}: give 'A:B' with two different arms of {cfg.arms}")
    for item, seeds in cfg.comparison_seeds.items():
        a, _, b = item.partition(":")
        if item not in cfg.comparisons:
            raise ConfigError(
                f"{where}: comparison_seeds names {item!r}, which is not in comparisons {cfg.comparisons}"
            )
        both = set(cfg.seeds_of(a)) & set(cfg.seeds_of(b))
        if not seeds or len(set(seeds)) != len(seeds) or not set(seeds) <= both:
            raise ConfigError(
                f"{where}: comparison_seeds.{item} {seeds} must be non-empty, without repeats, and among the seeds "
                f"planned for both arms {sorted(both)}"
            )
    for key in ("heldout_prompts", "heldout_samples"):
        if int(getattr(cfg, key)) < 1:
            raise ConfigError(f"{where}: {key} must be >= 1")
    if cfg.localization_rule not in LOCALIZATION_RULES:
        raise ConfigError(f"{where}: localization_rule {cfg.localization_rule!r}: choose from {LOCALIZATION_RULES}")
    if cfg.primary_endpoint not in PRIMARY_ENDPOINTS:
        raise ConfigError(f"{where}: primary_endpoint {cfg.primary_endpoint!r}: choose from {PRIMARY_ENDPOINTS}")
    if cfg.auc not in AUC_RULES or cfg.steps_to not in STEPS_TO_RULES:
        raise ConfigError(
            f"{where}: auc {cfg.auc!r} / steps_to {cfg.steps_to!r}: choose from {sorted(AUC_RULES)} / {STEPS_TO_RULES}"
        )
    return cfg
