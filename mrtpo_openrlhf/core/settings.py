"""The method's settings and the run settings, with their defaults, each written once.

The CLI flags (``adapter/args.py``), the launchers, the study config and the docs read these values from here.
``MethodSettings``: what the advantage estimators read. ``RunSettings``: what a training run samples and trains with
(temperature, learning rate, batch shape), per backend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_EPS = 1e-4  # both GDPO normalizations (NVIDIA's reference)
DEFAULT_BETA = 0.5  # placement strength beta_max (paper: 0.5 on every task)
DEFAULT_WARMUP_STEPS = 10  # beta ramps from 0 to beta_max over these steps (paper: N = 10)
DEFAULT_CAP = 1.5  # chosen from the binding rates with SmolLM2's replay on the mini sets: docs/cap.md
DEFAULT_PLACEMENT = "mrtpo"  # one of ``placements.PLACEMENTS``
DEFAULT_RELEVANCE = "js"  # one of ``relevance.RELEVANCE``: how the replay turns two contexts into q
REWARD_WEIGHTINGS = ("none", "saw")  # response-level reward weights stacked under the placement
DEFAULT_REWARD_WEIGHTING = "none"
# Fixed per-reward weights on GDPO's response level, ((name, w), ...): what verl's ``gdpo_reward_weights`` and TRL's
# ``reward_weights`` set. A reward not named weighs 1; composes with REWARD_WEIGHTINGS (the product).
DEFAULT_REWARD_WEIGHTS: tuple[tuple[str, float], ...] = ()
DEFAULT_REPLAY_MICRO_BATCH_SIZE = 4  # contexts per replay forward on each actor rank
DEFAULT_CHUNK_SIZE = 256  # positions per chunk of the JS computation
JS_KERNELS = ("compiled", "eager")  # how the JS formula runs: torch.compile'd (eager if that fails) or eager
DEFAULT_JS_KERNEL = "compiled"
# The replay's output layer: in the model's dtype, or fp32 (bf16 logits alone give q ~20% of the real q on a null
# pair: benchmarks/q_precision.py, docs/cpu.md)
REPLAY_LOGITS = ("model", "fp32")
DEFAULT_REPLAY_LOGITS = "model"
DEFAULT_BLOCK_SEPARATOR = "\n\n"  # put before each verifier block added to a replay context


def beta_problem(beta: float) -> str | None:
    """Why ``beta`` cannot be used (None: it can); the CLI puts ``--algo.mrtpo.`` before it."""
    return None if 0.0 <= beta <= 1.0 else f"beta must be in [0, 1], got {beta}"


def cap_problem(cap: float | None) -> str | None:
    """Why ``cap`` cannot be used (None: it can, None itself switching the cap off)."""
    if cap is None or cap >= 1.0:
        return None
    return f"cap must be >= 1 (a single reward's own credit is never clipped), got {cap}"


def check_beta(beta: float) -> None:
    if (problem := beta_problem(beta)) is not None:
        raise ValueError(problem)


def check_cap(cap: float | None) -> None:
    if (problem := cap_problem(cap)) is not None:
        raise ValueError(problem)


def parse_reward_weights(text: str) -> tuple[tuple[str, float], ...]:
    """``--algo.mrtpo.reward_weights``: ``name=w,name=w`` (or ``none``) -> ((name, w), ...), in the given order.

    Raises ValueError naming the bad part: no ``=``, an empty or repeated name, a weight that is not a finite
    number >= 0 (0 leaves a reward out of the advantage).
    """
    if text.strip().lower() in ("", "none"):
        return DEFAULT_REWARD_WEIGHTS
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = (x.strip() for x in part.partition("="))
        if not sep or not name:
            raise ValueError(f"expected name=weight, got {part.strip()!r}")
        if name in out:
            raise ValueError(f"reward {name!r} is given twice")
        try:
            weight = float(value)
        except ValueError:
            raise ValueError(f"{name}: weight {value!r} is not a number") from None
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f"{name}: weight must be a finite number >= 0, got {value!r}")
        out[name] = weight
    return tuple(out.items())


@dataclass(frozen=True)
class MethodSettings:
    """What the advantage estimators read (``--algo.mrtpo.*`` plus upstream's ``--reward.clip_range``)."""

    beta: float = DEFAULT_BETA
    warmup_steps: int = DEFAULT_WARMUP_STEPS
    cap: float | None = DEFAULT_CAP
    placement: str = DEFAULT_PLACEMENT
    relevance: str = DEFAULT_RELEVANCE
    reward_weighting: str = DEFAULT_REWARD_WEIGHTING
    reward_weights: tuple[tuple[str, float], ...] = DEFAULT_REWARD_WEIGHTS
    eps: float = DEFAULT_EPS
    clip_range: tuple[float, float] | None = None  # upstream's --reward.clip_range on the response level

    @classmethod
    def from_args(cls, args: Any) -> MethodSettings:
        """From upstream's nested namespace (``args.algo.mrtpo.<name>``, ``args.reward.clip_range``)."""
        m = args.algo.mrtpo
        known = {f.name: getattr(m, f.name) for f in fields(cls) if f.name != "clip_range" and hasattr(m, f.name)}
        return cls(**known, clip_range=getattr(args.reward, "clip_range", None))


@dataclass(frozen=True)
class RunSettings:
    """What a training run samples and trains with, by default, on one backend (``RUN_SETTINGS``).

    Read by the embedded default (``launch/default.py``), the study config, the probe and held-out scoring, and
    pinned equal to the GPU script's defaults (``examples/scripts/_launch_gpu.sh``) by a test. ``max_new_tokens``
    None: the task's own (the task package on CPU, the task's script on GPU). ``micro_batch_size``: sequences per
    log-prob forward and per training forward/backward on an actor rank (gradients accumulate over the step);
    None: the step's whole batch at once (the GPU script derives its own from the GPU count).
    ``gradient_checkpointing``: recompute each layer's activations in the backward pass instead of keeping them
    (``--actor.gradient_checkpointing_enable``).
    """

    temperature: float
    lr: float
    prompts_per_step: int
    samples_per_prompt: int
    max_new_tokens: int | None = None
    micro_batch_size: int | None = None
    gradient_checkpointing: bool = True

    def micro_batch_for(self, dtype_bytes: int) -> int | None:
        """``micro_batch_size`` for weights of ``dtype_bytes`` bytes: it is set for 2-byte weights (bf16); in fp32 a
        micro-batch's activations and logits take twice the bytes, so it holds half as many sequences (at least 1)."""
        if self.micro_batch_size is None:
            return None
        return max(1, self.micro_batch_size * 2 // dtype_bytes)


RUN_SETTINGS: dict[str, RunSettings] = {
    # 0.7: at 1.0 the 135M model's samples are mostly noise and no reward varies inside a group.
    # micro-batches of 4: the training forward/backward of all 8 sequences at once held 3.4 GiB of activations on
    # SmolLM2-135M, 4 at a time 1.7 GiB, no slower (benchmarks/default_memory.py; docs/cpu.md). Gradient
    # checkpointing (as the GPU script): the actor's peak 5.8 -> 4.1 GiB, median step the same (docs/cpu.md). In fp32
    # micro-batches of 2 (``micro_batch_for``): the fp32 default's peak 6.54 -> 6.17 GiB, median step +1%
    "cpu": RunSettings(temperature=0.7, lr=2e-6, prompts_per_step=2, samples_per_prompt=4, micro_batch_size=4),
    "gpu": RunSettings(temperature=1.0, lr=1e-6, prompts_per_step=64, samples_per_prompt=8),
}
