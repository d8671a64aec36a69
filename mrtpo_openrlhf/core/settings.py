"""The method's settings and their defaults, each written once.

The CLI flags (``adapter/args.py``), the launchers, the study config and the docs read these values from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

DEFAULT_EPS = 1e-4  # both GDPO normalizations (NVIDIA's reference)
DEFAULT_BETA = 0.5  # placement strength beta_max (paper: 0.5 on every task)
DEFAULT_WARMUP_STEPS = 10  # beta ramps from 0 to beta_max over these steps (paper: N = 10)
DEFAULT_CAP = 1.5  # chosen from the binding rates with SmolLM2's replay on the mini sets: docs/cap.md
DEFAULT_PLACEMENT = "mrtpo"  # one of ``weights.PLACEMENT_MODES``
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
