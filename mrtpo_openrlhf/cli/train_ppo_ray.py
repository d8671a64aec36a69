"""``python -m mrtpo_openrlhf.cli.train_ppo_ray <upstream flags> --algo.advantage.estimator mrtpo ...``

Runs upstream's own ``openrlhf.cli.train_ppo_ray`` entry point with three hooks:
- the parser gains ``gdpo``/``mrtpo`` and the ``--algo.mrtpo.*`` flags (``adapter.args``);
- ``PolicyModelActor`` becomes ours (adds the ``replay_relevance`` method);
- ``PPOTrainer`` becomes ours (reward-vector transport, MRTPO experience maker, metrics).
Every other upstream flag, default and check is untouched.
"""

from __future__ import annotations

import importlib.util
import json
import os
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


def require_device(_args) -> None:
    """After the flags parsed and validated: stop with one line where neither CUDA nor the CPU layer is there."""
    import torch

    if not torch.cuda.is_available() and os.environ.get("MRTPO_CPU") != "1":
        sys.exit(NO_DEVICE)


def forward_verifier_env() -> None:
    """Upstream's ``train()`` calls ``ray.init(runtime_env={"env_vars": {...}})`` when Ray is not initialized: add
    the verifier variables set here (``rewards.env``), so the rewards in every vLLM engine read the same limits.
    A variable the submitted job's runtime env already sets is left to it (Ray refuses to merge a key twice)."""
    import ray

    from ..rewards.env import verifier_env

    upstream_init = ray.init
    if getattr(upstream_init, "_mrtpo_forwards_env", False):
        return

    def init(*args, **kwargs):
        job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
        taken = set((job.get("runtime_env") or {}).get("env_vars") or {})
        runtime_env = dict(kwargs.get("runtime_env") or {})
        env_vars = dict(runtime_env.get("env_vars") or {})
        env_vars.update({k: v for k, v in verifier_env().items() if k not in taken and k not in env_vars})
        runtime_env["env_vars"] = env_vars
        kwargs["runtime_env"] = runtime_env
        return upstream_init(*args, **kwargs)

    init._mrtpo_forwards_env = True
    ray.init = init


def main(argv: list[str] | None = None) -> None:
    from ..adapter.args import ParserHook

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    if importlib.util.find_spec("flash_attn") is None:
        # upstream imports flash_attn at module level; --help and flag checks must work without a GPU build
        from ..cpu import flash_attn_stub

        flash_attn_stub.install()
    install_upstream_overrides()
    forward_verifier_env()
    with ParserHook(after=require_device):
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
