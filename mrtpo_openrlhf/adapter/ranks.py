"""Waiting on the actor ranks: the first rank to fail fails the step at once, naming the rank and the reason.

Upstream waits on a group's futures with ``ray.get(refs)``. When one rank raises (or its process dies, e.g. of an
OOM) inside the replay, the other ranks are left in a ZeRO-3 parameter all-gather that waits for it until the
collective's timeout (60 minutes with NCCL), and every later call on them queues behind it. ``get_ranks`` waits
with ``ray.wait`` instead: the first future to end in an error is seen when it ends, the ranks still running are
killed (they can only be waiting in a collective for the failed one) and one error names the rank and its
exception.

``MRTPO_INJECT_REPLAY_FAILURE=<rank>`` (test-only) makes that actor rank raise at the start of its replay, so that
the other ranks block in their first all-gather (``inject_replay_failure``, called by the actor's replay).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import ray

INJECT_ENV = "MRTPO_INJECT_REPLAY_FAILURE"


class RankFailed(RuntimeError):
    """One actor rank failed; the ranks still running were killed."""

    def __init__(self, what: str, rank: int, num_ranks: int, reason: str, killed: Sequence[int]):
        self.what, self.rank, self.num_ranks, self.reason, self.killed = what, rank, num_ranks, reason, list(killed)
        stopped = f"; stopped rank(s) {', '.join(map(str, killed))}, left waiting for it" if killed else ""
        super().__init__(f"{what} failed on actor rank {rank} of {num_ranks}: {reason}{stopped}")

    def __reduce__(self):  # it crosses Ray from the trainer actor to the driver
        return type(self), (self.what, self.rank, self.num_ranks, self.reason, self.killed)


def failure_reason(exc: BaseException) -> str:
    """``Type: first line`` of what the rank raised (a task error's own cause, not Ray's wrapper)."""
    cause = getattr(exc, "cause", None) if isinstance(exc, ray.exceptions.RayTaskError) else None
    err = cause if isinstance(cause, BaseException) else exc
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def get_ranks(refs: Sequence[ray.ObjectRef], actors: Sequence[Any], what: str = "a call") -> list[Any]:
    """``ray.get(refs)`` (in order), ``refs[i]`` a call on ``actors[i]`` (actor rank i); the first error raises
    ``RankFailed`` as soon as it arrives, after ``ray.kill`` of every actor whose call is still running."""
    if len(refs) != len(actors):
        raise ValueError(f"{len(refs)} futures for {len(actors)} actors")
    index = {ref: i for i, ref in enumerate(refs)}
    results: list[Any] = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                results[index[ref]] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - whatever the rank raised, or its death (RayActorError)
                killed = sorted(index[r] for r in pending)
                for i in killed:
                    ray.kill(actors[i], no_restart=True)
                raise RankFailed(what, index[ref], len(refs), failure_reason(exc), killed) from exc
    return results


def inject_replay_failure(rank: int) -> None:
    """Test-only: raise on the actor rank ``MRTPO_INJECT_REPLAY_FAILURE`` names (nothing when unset)."""
    wanted = os.environ.get(INJECT_ENV, "").strip()
    if wanted and int(wanted) == rank:
        raise RuntimeError(f"injected replay failure on rank {rank} ({INJECT_ENV}={wanted})")
