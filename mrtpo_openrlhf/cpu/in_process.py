"""Upstream's trainer in the driver process on CPU (``MRTPO_CPU_TRAINER_IN_DRIVER``, on by default).

OpenRLHF 0.11.2 runs its single-controller trainer as a Ray actor (``PPOTrainer.remote(...)``), a process of its
own that imports torch, DeepSpeed, transformers and vLLM's client side again (0.57 GiB PSS in the embedded
default) while the driver that created it only waits on ``ray.get(trainer.fit.remote())``. On a GPU cluster that
process is noise; on a 16 GiB laptop it is a tenth of the run. ``InProcessActor`` stands in for the ``@ray.remote``
class: ``.remote(...)`` builds the instance here and ``handle.method.remote(...)`` runs the method here and returns
an ``ObjectRef`` to its result, so upstream's ``train()`` runs unchanged. Arguments go through Ray's serializer as
they would to an actor (the trainer sets ``strategy.args.eval.steps`` and ``ckpt.save_steps`` to infinity on its own
copy; the policy actors created after it must still see the user's values), and ``ObjectRef`` arguments are
resolved, as Ray resolves them for an actor method. The trainer's own work is light (tokenising prompts, GDPO and
MRTPO advantages on small tensors); everything heavy stays in the actors and engines it drives.
"""

from __future__ import annotations

from typing import Any

from ..env_flags import flag_on

SWITCH = "MRTPO_CPU_TRAINER_IN_DRIVER"


def trainer_in_driver(environ=None) -> bool:
    """On while ``MRTPO_CPU_TRAINER_IN_DRIVER`` is unset (the CPU layer's default), else read as every switch is."""
    return flag_on(SWITCH, environ, default=True)


def _as_an_actor_would_receive(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A copy made by Ray's own serializer, with top-level ``ObjectRef`` arguments resolved (as for an actor)."""
    import ray  # here: the launcher reads ``trainer_in_driver`` without importing Ray

    args = tuple(ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args)
    kwargs = {k: ray.get(v) if isinstance(v, ray.ObjectRef) else v for k, v in kwargs.items()}
    return ray.get(ray.put((args, kwargs)))


class _Method:
    def __init__(self, bound):
        self._bound = bound

    def remote(self, *args, **kwargs):
        """Runs the method now; returns an ``ObjectRef`` to its result."""
        import ray

        args, kwargs = _as_an_actor_would_receive(args, kwargs)
        return ray.put(self._bound(*args, **kwargs))


class InProcessHandle:
    """What ``InProcessActor.remote`` returns: ``handle.method.remote(...)`` runs ``method`` in this process."""

    def __init__(self, instance: Any):
        self._instance = instance

    @property
    def instance(self) -> Any:
        return self._instance

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(getattr(self._instance, name))


class InProcessActor:
    """Stands in for ``ray.remote(cls)`` where the caller only uses ``.remote(...)`` and ``handle.m.remote(...)``."""

    def __init__(self, cls: type):
        self.cls = cls

    def options(self, **_ignored) -> "InProcessActor":
        return self  # resources and scheduling options mean nothing in this process

    def remote(self, *args, **kwargs) -> InProcessHandle:
        args, kwargs = _as_an_actor_would_receive(args, kwargs)
        return InProcessHandle(self.cls(*args, **kwargs))
