"""Instruction-following checkers: the 25 IFEval ids, the 58 IFBench ids and MulDimIF rule triples.

Usage::

    from mrtpo_openrlhf.tasks.instruction.verifier import build_checker, check_strict, check_loose
    chk = build_checker("punctuation:no_comma", {})
    chk.description()          # the constraint's prompt text (the reward's verifier block)
    check_strict(chk, text)    # official strict decision (empty response -> False)
    check_loose(chk, text)     # IFEval loose decision

``chk.check(text)`` is the raw ``check_following``. Checkers that cannot run offline raise
``UnsupportedInstruction`` (from ``check``/``check_supported``) naming the id and the reason.
"""

from .base import REGISTRY, Checker, UnsupportedInstruction, build_checker, check_loose, check_strict, loose_variants
from .ifbench import IFBENCH_IDS
from .ifeval import IFEVAL_IDS
from .muldimif import MulDimIFConstraint
from .text import ensure_punkt

assert set(IFEVAL_IDS) | set(IFBENCH_IDS) == set(REGISTRY), "registry and id lists disagree"
INSTRUCTION_IDS = tuple(REGISTRY)

__all__ = [
    "REGISTRY",
    "Checker",
    "UnsupportedInstruction",
    "build_checker",
    "check_loose",
    "check_strict",
    "loose_variants",
    "IFEVAL_IDS",
    "IFBENCH_IDS",
    "INSTRUCTION_IDS",
    "MulDimIFConstraint",
    "ensure_punkt",
]
