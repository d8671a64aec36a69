"""Checker interface, the id -> class registry, and IFEval's loose scoring.

A checker is built once per (instruction id, kwargs) and is immutable afterwards, so one instance may
be shared by many threads. ``description()`` is the constraint text as it appears in prompts (the
reward's verifier block); ``check(response)`` is the official strict decision.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar, Mapping


class UnsupportedInstruction(RuntimeError):
    """A constraint that cannot be checked on this machine (missing offline data, unparseable rule)."""

    def __init__(self, instruction_id: str, why: str):
        super().__init__(f"{instruction_id}: unsupported offline: {why}")
        self.instruction_id = instruction_id
        self.why = why


class Checker:
    """One constraint. Subclasses take their kwargs as keyword-only ``__init__`` arguments; one without
    kwargs inherits this class's ``__init__``, which takes none (``build_checker`` reads the signature)."""

    instruction_id: ClassVar[str] = ""
    #: why the checker cannot run offline, or None when it can (checked again at ``check`` time).
    unsupported_reason: ClassVar[Callable[[], str | None] | None] = None

    def __init__(self) -> None:
        pass

    def description(self) -> str:
        raise NotImplementedError

    def check(self, response: str) -> bool:
        raise NotImplementedError

    def check_supported(self) -> None:
        """Raise UnsupportedInstruction when this checker cannot run here."""
        why = type(self).unsupported_reason() if type(self).unsupported_reason else None
        if why:
            raise UnsupportedInstruction(self.instruction_id, why)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.instruction_id}>"


REGISTRY: dict[str, type[Checker]] = {}


def register(instruction_id: str) -> Callable[[type[Checker]], type[Checker]]:
    """Class decorator: add a checker class under ``instruction_id`` (ids are unique)."""

    def wrap(cls: type[Checker]) -> type[Checker]:
        if instruction_id in REGISTRY:
            raise ValueError(f"duplicate instruction id {instruction_id!r}")
        cls.instruction_id = instruction_id
        REGISTRY[instruction_id] = cls
        return cls

    return wrap


def build_checker(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> Checker:
    """Instantiate the checker for ``instruction_id``; None-valued kwargs are dropped (as the official
    evaluators do, since the released data pads every row with all keys set to null).

    Raises KeyError for an unknown id and ValueError naming the id for missing/unknown kwargs.
    """
    if instruction_id not in REGISTRY:
        raise KeyError(f"unknown instruction id {instruction_id!r}")
    cls = REGISTRY[instruction_id]
    given = {k: v for k, v in (kwargs or {}).items() if v is not None}
    params = inspect.signature(cls.__init__).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if not accepts_any:
        unknown = sorted(set(given) - set(params))
        if unknown:
            expected = sorted(set(params) - {"self"})
            raise ValueError(f"{instruction_id}: unexpected kwargs {unknown}; expected {expected}")
    missing = [
        n
        for n, p in params.items()
        if n != "self"
        and p.kind is inspect.Parameter.KEYWORD_ONLY
        and p.default is inspect.Parameter.empty
        and n not in given
    ]
    if missing:
        raise ValueError(f"{instruction_id}: missing required kwargs {missing}")
    return cls(**given)


def loose_variants(response: str) -> list[str]:
    """IFEval/IFBench loose scoring: the response, without its first line, last line or both, each
    also with every ``*`` removed (8 strings, the response itself first)."""
    lines = response.split("\n")
    trimmed = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return trimmed + [t.replace("*", "") for t in trimmed]


def check_strict(checker: Checker, response: str) -> bool:
    """The official strict decision: an empty (whitespace-only) response follows nothing."""
    checker.check_supported()
    return bool(response.strip()) and bool(checker.check(response))


def check_loose(checker: Checker, response: str) -> bool:
    """True when any loose variant that is not blank passes ``checker``."""
    checker.check_supported()
    return any(v.strip() and checker.check(v) for v in loose_variants(response))
