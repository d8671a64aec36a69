"""``python -m mrtpo_openrlhf.cli.train_ppo_ray <upstream flags> --algo.advantage.estimator mrtpo ...``

Runs upstream's own ``openrlhf.cli.train_ppo_ray`` entry point with three hooks:
- the parser gains ``gdpo``/``mrtpo`` and the ``--algo.mrtpo.*`` flags (``adapter.args``);
- ``PolicyModelActor`` becomes ours (adds the ``replay_relevance`` method);
- ``PPOTrainer`` becomes ours (reward-vector transport, MRTPO experience maker, metrics).
Every other upstream flag, default and check is untouched.
"""
from __future__ import annotations

import runpy
import sys


def install_upstream_overrides() -> None:
    """Point upstream's module globals at our subclasses (read by ``train()`` at call time)."""
    import openrlhf.trainer.ppo_trainer as ppo_trainer_module
    import openrlhf.trainer.ray.ppo_actor as ppo_actor_module

    from ..adapter.actor import MRTPOPolicyModelActor
    from ..adapter.trainer import MRTPOPPOTrainer

    ppo_actor_module.PolicyModelActor = MRTPOPolicyModelActor
    ppo_trainer_module.PPOTrainer = MRTPOPPOTrainer


def main(argv: list[str] | None = None) -> None:
    from ..adapter.args import ParserHook

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    install_upstream_overrides()
    with ParserHook():
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
