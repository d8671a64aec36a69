"""``python -m mrtpo_openrlhf.cli.train_ppo_ray <upstream flags> --algo.advantage.estimator mrtpo ...``

Runs upstream's own ``openrlhf.cli.train_ppo_ray`` entry point with these hooks:
- the parser gains ``gdpo``/``mrtpo`` and the ``--algo.mrtpo.*`` flags (``adapter.args``);
- the pre-flight check of data, labels and reward runs on the parsed flags, before ``ray.init``
  (``cli.preflight``; ``--preflight-only`` stops after it);
- ``PolicyModelActor`` becomes ours (adds the ``replay_relevance`` method);
- ``PPOTrainer`` becomes ours (reward-vector transport, MRTPO experience maker, metrics).
Every other upstream flag, default and check is untouched.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys

NO_DEVICE = (
    "mrtpo: no CUDA device on this machine. To train on CPU, run the embedded default "
    "(`bash examples/scripts/train_mrtpo_sql.sh`, or `python -m mrtpo_openrlhf.launch.default --task sql`): "
    "it starts a private Ray head with the CPU layer (MRTPO_CPU=1)."
)


def install_upstream_overrides() -> None:
    """Point upstream's module globals at our subclasses (read by ``train()`` at call time)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer_module
    import openrlhf.trainer.ray.ppo_actor as ppo_actor_module

    from ..adapter.actor import MRTPOPolicyModelActor
    from ..adapter.trainer import MRTPOPPOTrainer

    ppo_actor_module.PolicyModelActor = MRTPOPolicyModelActor
    ppo_trainer_module.PPOTrainer = MRTPOPPOTrainer


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
        sys.exit(NO_DEVICE)
    hook_ray_init(args, check_gpus=not cpu_layer)


def preflight_then_device(args) -> None:
    from . import preflight

    preflight.run(args)  # exits 2 on a problem, 0 after --preflight-only: neither needs a device
    require_device(args)


def main(argv: list[str] | None = None) -> None:
    from ..adapter.args import ParserHook
    from .preflight import add_arguments

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    if importlib.util.find_spec("flash_attn") is None:
        # upstream imports flash_attn at module level; --help and flag checks must work without a GPU build
        from ..cpu import flash_attn_stub

        flash_attn_stub.install()
    install_upstream_overrides()
    with ParserHook(after=preflight_then_device, extend=add_arguments):
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
