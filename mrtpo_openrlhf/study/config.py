"""A study config (TOML): the task, data, model, arms, seeds, steps, batch shape and sampling.

    [study]
    name = "if-smollm2-cpu"
    backend = "cpu"                 # cpu: the embedded default's launcher; gpu: examples/scripts/train_*.sh
    task = "instruction"
    data = "mrtpo_openrlhf/data/instructions/study_train.jsonl"   # relative to the repo root, or absolute
    model = "smollm2"
    arms = ["grpo", "gdpo", "mrtpo", "mrtpo-shuffle", "mrtpo-joint"]
    seeds = [1, 2, 3]
    steps = 16
    prompts_per_step = 4
    samples_per_prompt = 4
    max_new_tokens = 128
    temperature = 0.7
    lr = 1e-5
    beta = 0.5
    warmup_steps = 10
    extra_args = []                 # more upstream/MRTPO flags, appended last (they win)

Every arm of one seed gets the same data order, rollout seed and initial model (``--train.seed``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from mrtpo_openrlhf.core.settings import DEFAULT_BETA, DEFAULT_WARMUP_STEPS
from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.tasks import TASKS


@dataclass(frozen=True)
class Arm:
    """One arm of the study: an advantage estimator and, for MRTPO, where its advantages are placed."""

    estimator: str  # upstream --algo.advantage.estimator
    placement: str | None = None  # --algo.mrtpo.placement (mrtpo arms only)

    def flags(self) -> list[str]:
        return ["--algo.mrtpo.placement", self.placement] if self.placement else []


ARMS: dict[str, Arm] = {
    "grpo": Arm("group_norm"),
    "gdpo": Arm("gdpo"),
    "mrtpo": Arm("mrtpo", "mrtpo"),
    "mrtpo-shuffle": Arm("mrtpo", "shuffle"),  # same weights, shuffled within the response
    "mrtpo-joint": Arm("mrtpo", "joint"),  # one shared profile for every reward
}
BACKENDS = ("cpu", "gpu")


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
    prompts_per_step: int = 4
    samples_per_prompt: int = 4
    max_new_tokens: int = 128
    temperature: float = 0.7
    lr: float = 1e-5
    beta: float = DEFAULT_BETA
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    extra_args: list[str] = field(default_factory=list)
    # gpu backend: environment for examples/scripts/train_*.sh (NUM_GPUS, ROLLOUT_BATCH, ...)
    env: dict[str, str] = field(default_factory=dict)

    def data_path(self) -> Path:
        path = Path(self.data).expanduser()
        return path if path.is_absolute() else REPO_ROOT / path

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def runs(self) -> list[tuple[str, int]]:
        """(arm, seed) in execution order: seed-major, so that a partial study has every arm for its seeds."""
        return [(arm, seed) for seed in self.seeds for arm in self.arms]


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
    return cfg
