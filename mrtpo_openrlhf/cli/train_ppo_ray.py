"""``python -m mrtpo_openrlhf.cli.train_ppo_ray <upstream flags> --algo.advantage.estimator mrtpo ...``

Runs upstream's own ``openrlhf.cli.train_ppo_ray`` entry point with these hooks:
- the parser gains ``gdpo``/``mrtpo`` and the ``--algo.mrtpo.*`` flags (``adapter.args``);
- the pre-flight check of data, labels and reward runs on the parsed flags first, in a pass of upstream's module
  with its module-level imports (Ray, DeepSpeed, vLLM, transformers: ~6 s) deferred (``preflight_pass``), so a bad
  input stops in about 2 s; ``--preflight-only`` stops after it. Then upstream's module runs for real;
- ``PolicyModelActor`` becomes ours (adds the ``replay_relevance`` method), and it and ``ReferenceModelActor``
  hold their group's rendezvous port until their store binds it (``adapter/actor.py``);
- ``PPOTrainer`` becomes ours (reward-vector transport, MRTPO experience maker, metrics); on the CPU layer it runs
  in this driver process instead of an actor of its own (``cpu/in_process.py``, ``MRTPO_CPU_TRAINER_IN_DRIVER=0``
  restores the actor).
Every other upstream flag, default and check is untouched.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
import types

NO_DEVICE = "mrtpo: no CUDA device on this machine"
CPU_DEMO = (
    "No NVIDIA GPU here: to try the method on CPU, run the embedded default "
    "(`bash examples/scripts/train_mrtpo_sql.sh`, or `python -m mrtpo_openrlhf.cli.default --task sql`)."
)


def no_device_message() -> str:
    """Why CUDA is not usable, as the doctor finds it (driver too old, a CPU torch, ...), with its first fix; the CPU
    demo is named only where the machine has no NVIDIA driver at all."""
    from . import doctor

    rows = doctor.local_checks(attn="sdpa")  # attention and the rest are the doctor's own table
    device_rows = [r for r in rows if r.name in ("NVIDIA driver", "GPUs", "torch", "CUDA from torch")]
    found = doctor.summary(device_rows) or "torch.cuda.is_available() is False"
    text = f"{NO_DEVICE}: {found}. `python -m mrtpo_openrlhf.cli.doctor` checks the rest of a GPU run."
    if device_rows[0].status == doctor.FAIL and "not found" in device_rows[0].found:
        text += " " + CPU_DEMO
    return text


def install_upstream_overrides() -> None:
    """Point upstream's module globals at our subclasses (read by ``train()`` at call time)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer_module
    import openrlhf.trainer.ray.launcher as launcher_module
    import openrlhf.trainer.ray.ppo_actor as ppo_actor_module

    from ..adapter.actor import MRTPOPolicyModelActor, MRTPOReferenceModelActor
    from ..adapter.trainer import MRTPOPPOTrainer, MRTPOPPOTrainerBase
    from ..env_flags import cpu_layer_on

    ppo_actor_module.PolicyModelActor = MRTPOPolicyModelActor
    launcher_module.ReferenceModelActor = MRTPOReferenceModelActor
    ppo_trainer_module.PPOTrainer = MRTPOPPOTrainer
    if cpu_layer_on():
        from ..cpu.in_process import InProcessActor, trainer_in_driver

        if trainer_in_driver():  # one process (a torch runtime, ~0.5 GiB) fewer: docs/cpu.md
            ppo_trainer_module.PPOTrainer = InProcessActor(MRTPOPPOTrainerBase)


def require_device(args) -> None:
    """After the flags parsed and validated: the GPUs must be where the job runs, not in the driver.

    Upstream's trainer and models are Ray actors, so the driver needs no GPU (a submitted job's entrypoint runs on
    the head). Upstream's ``ray.init`` is wrapped (``adapter.cluster``): the cluster it joins must hold the GPUs the
    flags place (the CPU layer's fake GPUs are not counted), and the MRTPO variables join its runtime env. Where
    there is no cluster to join and no CUDA here, ``ray.init`` would start a GPU-less local one: stop at once.
    """
    import torch

    from ..adapter.cluster import cluster_address, hook_ray_init
    from ..env_flags import cpu_layer_on

    cpu_layer = cpu_layer_on()  # the spellings sitecustomize accepts: with the layer on, its fake GPUs count
    if not cpu_layer and not torch.cuda.is_available() and cluster_address() is None:
        sys.exit(no_device_message())
    hook_ray_init(args, check_gpus=not cpu_layer)


UPSTREAM_CLI = "openrlhf.cli.train_ppo_ray"
# What upstream's CLI module imports at its top (pinned by tests/adapter/test_upstream_contracts.py): its parser,
# built under ``__main__``, uses none of them, and importing them is most of a start (Ray, DeepSpeed, vLLM).
UPSTREAM_CLI_IMPORTS = (
    "ray",
    "ray.util.placement_group",
    "openrlhf.trainer.ray",
    "openrlhf.trainer.ray.launcher",
    "openrlhf.trainer.ray.ppo_actor",
    "openrlhf.trainer.ray.ppo_critic",
    "openrlhf.utils",
)


class _Deferred(types.ModuleType):
    """Stands in for one of ``UPSTREAM_CLI_IMPORTS`` while only the parser runs; any use of a name fails loudly."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unusable(f"{self.__name__}.{name}")


class _Unusable:
    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name} used before parse_args: the pre-flight pass defers upstream's imports")

    def __getattr__(self, name):
        return _Unusable(f"{self._name}.{name}")


class _DeferredImports:
    """Puts ``_Deferred`` modules in ``sys.modules`` for the ``UPSTREAM_CLI_IMPORTS`` not imported yet; ``restore``
    (also on exit) takes them out again, so a later import gets the real module."""

    def __enter__(self):
        self.placed = [name for name in UPSTREAM_CLI_IMPORTS if name not in sys.modules]
        for name in self.placed:
            sys.modules[name] = _Deferred(name)
        return self

    def restore(self) -> None:
        for name in self.placed:
            if isinstance(sys.modules.get(name), _Deferred):
                del sys.modules[name]
        self.placed = []

    def __exit__(self, *exc):
        self.restore()
        return False


class _Checked(Exception):
    """Ends the pre-flight pass after the check (raised inside upstream's ``parse_args``)."""


def preflight_pass() -> None:
    """Upstream's parser, our flag checks and the pre-flight on ``sys.argv``, before anything heavy is imported.

    Runs upstream's CLI module with its top-level imports deferred (``_DeferredImports``) until its ``parse_args``;
    the hook then puts the real import system back (the check imports what it needs, e.g. a reward file that
    imports ray) and runs ``preflight.run``: exit 2 on a problem, 0 after ``--preflight-only``; else it returns.
    """
    from ..adapter.args import ParserHook
    from . import preflight

    deferred = _DeferredImports()

    def after(flags) -> None:
        deferred.restore()
        preflight.run(flags)
        raise _Checked

    with deferred, ParserHook(after=after, extend=preflight.add_arguments):
        try:
            runpy.run_module(UPSTREAM_CLI, run_name="__main__", alter_sys=True)
        except _Checked:
            return
    raise RuntimeError(f"{UPSTREAM_CLI} returned without parsing its flags")


def preflight_status(argv: list[str]) -> int:
    """The CLI's pre-flight (``--preflight-only``) on ``argv`` in this process: 0 fine, 2 a problem (its lines on
    stderr). For a launcher that checks before it starts a Ray head; ``sys.argv`` is restored."""
    saved = sys.argv
    sys.argv = [saved[0] if saved else UPSTREAM_CLI, *map(str, argv), "--preflight-only"]
    try:
        preflight_pass()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> None:
    from ..adapter.args import ParserHook
    from .preflight import add_arguments

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    preflight_pass()  # exits 2 on a problem, 0 after --preflight-only: neither needs a device nor upstream's imports
    if importlib.util.find_spec("flash_attn") is None:
        # upstream imports flash_attn at module level; --help and flag checks must work without a GPU build
        from ..cpu import flash_attn_stub

        flash_attn_stub.install()
    install_upstream_overrides()
    with ParserHook(after=require_device, extend=add_arguments):
        runpy.run_module(UPSTREAM_CLI, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
