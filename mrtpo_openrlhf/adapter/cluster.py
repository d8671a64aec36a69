"""The training driver on a Ray cluster: the GPUs the flags need, and the variables the workers must see.

``python -m mrtpo_openrlhf.cli.train_ppo_ray`` is only a driver: upstream's trainer and every model are Ray actors, so
the driver never needs a GPU (Ray runs a submitted job's entrypoint on the head, which may have none). The device
check therefore counts the cluster's GPUs (``ray.cluster_resources()``) against what the flags place
(``gpus_needed``), right after upstream's own ``ray.init``. That ``ray.init``'s runtime env also gets the MRTPO
variables the driver was given (``forwarded_env``): Ray workers inherit the raylet's environment, not the driver's,
so on a cluster started beforehand (``ray start``, no ``ray job submit``) the trainer would not see
``MRTPO_METRICS_JSONL`` and write no metrics.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from typing import Any, Callable, Mapping

from ..metrics import ENV_VAR as METRICS_ENV
from ..rewards.env import verifier_env_vars, verifier_path_env_vars
from .experience_maker import DUMP_ENV

SKIP_CHECK_ENV = "MRTPO_SKIP_GPU_CHECK"  # an autoscaling cluster adds GPU nodes only once the job asks for them


def forwarded_env() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(names, path names): what the trainer actor or the rollout (reward) processes read; the paths are made
    absolute (a worker's working directory is not the driver's). The verifiers' come from the task registry."""
    return (METRICS_ENV, DUMP_ENV, *verifier_env_vars()), (METRICS_ENV, DUMP_ENV, *verifier_path_env_vars())


def _group(flat: Any, prefix: str) -> int:
    nodes = getattr(flat, f"{prefix}.num_nodes", 1) or 1
    return nodes * (getattr(flat, f"{prefix}.num_gpus_per_node", 1) or 1)


def gpus_needed(flat: Any) -> tuple[int, str]:
    """GPUs upstream's ``train()`` places for these flags (the flat, dotted namespace), and how they add up.

    Follows upstream's placement: with ``--train.colocate_all`` every model and the vLLM engines share the actor's
    GPUs; otherwise the actor (with the reference model under ``--train.colocate_actor_ref``), the reference model
    (when KL is on), the vLLM engines (engines x tensor parallel size), a critic and a reward model each take
    their own (the critic and reward model one set under ``--train.colocate_critic_reward``).
    """
    get = lambda name, default=None: getattr(flat, name, default)  # noqa: E731
    actor = _group(flat, "actor")
    if get("train.colocate_all") and not get("train.async_enable"):
        return actor, f"--train.colocate_all: {actor} for the actor, shared by every model and vLLM engine"
    parts = {"actor": actor}
    if (get("algo.kl.init_coef", 0) or 0) > 0 and not get("train.colocate_actor_ref"):
        parts["reference"] = _group(flat, "ref")
    engines = (get("vllm.num_engines", 0) or 0) * (get("vllm.tensor_parallel_size", 1) or 1)
    if engines:
        parts["vLLM"] = engines
    critic = _group(flat, "critic") if get("critic.model_name_or_path") else 0
    reward = _group(flat, "reward") if not get("reward.remote_url") and get("reward.model_name_or_path") else 0
    if critic and reward and get("train.colocate_critic_reward"):
        parts["critic + reward model"] = max(critic, reward)
    else:
        parts.update({k: v for k, v in (("critic", critic), ("reward model", reward)) if v})
    return sum(parts.values()), " + ".join(f"{v} {k}" for k, v in parts.items())


def shortage(flat: Any, resources: Mapping[str, float], where: str = "the Ray cluster") -> str | None:
    """The one-line reason the cluster cannot hold these flags' GPUs (None: it can)."""
    need, how = gpus_needed(flat)
    have = float(resources.get("GPU", 0) or 0)
    if have >= need:
        return None
    return (
        f"mrtpo: {where} has {have:g} GPUs, the flags need {need} ({how}). Submit to the cluster that has them "
        "(RAY_JOB_ADDRESS, RAY_ADDRESS), or lower --actor.num_nodes / --actor.num_gpus_per_node / --vllm.num_engines; "
        f"an autoscaling cluster that adds GPU nodes on demand: {SKIP_CHECK_ENV}=1"
    )


def cluster_address() -> str | None:
    """The running cluster upstream's ``ray.init()`` connects to (``RAY_ADDRESS``, else the last ``ray start`` on this
    machine); None where it would start a local Ray instance instead."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address(None)
    except Exception:  # noqa: BLE001 - a malformed address: ray.init reports it itself
        return os.environ.get("RAY_ADDRESS") or None


def with_forwarded_env(runtime_env: Mapping[str, Any] | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """``runtime_env`` with the ``forwarded_env`` variables set in ``environ`` added to its ``env_vars`` (a value the
    runtime env already has is kept, and so is one the submitted job's runtime env sets: Ray refuses a key twice);
    relative paths made absolute against this process's directory."""
    env = dict(runtime_env or {})
    env_vars = dict(env.get("env_vars") or {})
    job = json.loads(environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR") or "{}")
    taken = set((job.get("runtime_env") or {}).get("env_vars") or {})
    names, paths = forwarded_env()
    for name in names:
        value = environ.get(name)
        if value and name not in env_vars and name not in taken:
            env_vars[name] = os.path.abspath(value) if name in paths else value
    if env_vars:
        env["env_vars"] = env_vars
    return env


def hook_ray_init(flat: Any, check_gpus: bool = True) -> None:
    """Wrap ``ray.init`` (called by upstream's ``train()``): the forwarded variables join its runtime env, and with
    ``check_gpus`` the run stops with one line where the cluster it joined has fewer GPUs than the flags need."""
    import ray

    # ray.init is itself a decorated function (its __wrapped__ is the bare one): keep the decorated original
    original: Callable[..., Any] = getattr(ray.init, "_mrtpo_original", ray.init)

    @functools.wraps(original)
    def init(*args, **kwargs):
        kwargs["runtime_env"] = with_forwarded_env(kwargs.get("runtime_env"), os.environ)
        context = original(*args, **kwargs)
        if check_gpus and os.environ.get(SKIP_CHECK_ENV) != "1":
            address = getattr(context, "address_info", {}).get("gcs_address") or cluster_address() or "local"
            reason = shortage(flat, ray.cluster_resources(), f"the Ray cluster at {address}")
            if reason:
                ray.shutdown()
                sys.exit(reason)
        return context

    init._mrtpo_original = original
    ray.init = init
