"""The placement modes (``--algo.mrtpo.placement``), one registry entry each.

An entry declares the mode's weights function, the replay it needs, its help text and its study arm; the CLI's
choices (``adapter/args.py``), the replay the experience maker runs, the study's arms (``study/config.py``) and the
report's comparisons and localization table (``study/report/``) are read from ``PLACEMENTS``. The shipped modes
register themselves in ``weights.py`` (``mrtpo``, ``uniform``, ``shuffle``, ``joint``, in that order: the order of
the CLI's choices and of the study's arms).

A weights function ``fn(adv, q, valid, beta, generator) -> w`` gets the (B, K) advantages, the relevance q as
the replay returned it, the (B, T) bool mask, beta > 0 and the shuffle RNG, and returns (B, K, T) credit weights
(mean 1 over each row's valid tokens; 1 keeps a reward uniform), or None for GDPO's uniform placement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

# What a mode replays: each reward's block removed on its own, one context without any block, or nothing.
PER_REWARD, JOINT_REPLAY, NO_REPLAY = "per_reward", "joint", "none"
REPLAYS = (PER_REWARD, JOINT_REPLAY, NO_REPLAY)

WeightsFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, float, Optional[torch.Generator]], Optional[torch.Tensor]
]


@dataclass(frozen=True)
class Placement:
    """A registered placement mode. ``arm``: its study arm (an ``mrtpo`` run with this placement), None for none;
    ``claim``: what the study report checks for that arm against the method's (``MRTPO > arm``), None for none."""

    name: str
    weights: WeightsFn
    replay: str
    help: str
    arm: str | None
    claim: str | None = None


PLACEMENTS: dict[str, Placement] = {}


def register_placement(name: str, replay: str, help: str, arm: str | None, claim: str | None = None):
    """Register ``weights`` as the placement mode ``name``; a taken name or study arm is refused."""
    if replay not in REPLAYS:
        raise ValueError(f"placement {name!r}: replay {replay!r}, choose from {REPLAYS}")
    if name in PLACEMENTS:
        raise ValueError(f"placement mode {name!r} is already registered")
    if arm is not None and arm in {p.arm for p in PLACEMENTS.values()}:
        raise ValueError(f"placement {name!r}: study arm {arm!r} is already taken")

    def deco(weights: WeightsFn) -> WeightsFn:
        PLACEMENTS[name] = Placement(name, weights, replay, help, arm, claim)
        return weights

    return deco


def get_placement(name: str) -> Placement:
    if name not in PLACEMENTS:
        raise ValueError(f"unknown placement mode {name!r}; choose from {tuple(PLACEMENTS)}")
    return PLACEMENTS[name]


def placement_modes() -> tuple[str, ...]:
    """The registered modes, in registration order (the CLI's choices)."""
    return tuple(PLACEMENTS)


def placement_help() -> dict[str, str]:
    return {name: p.help for name, p in PLACEMENTS.items()}


def placement_arms() -> dict[str, str]:
    """{study arm: placement mode} for the modes that have an arm, in registration order."""
    return {p.arm: name for name, p in PLACEMENTS.items() if p.arm is not None}
