"""The environment variables the reward functions and verifiers read, forwarded to every Ray worker.

Rewards run in the vLLM engine processes, on whichever nodes Ray placed them; a variable set where the job was
launched reaches them only through the runtime env. ``examples/scripts/_launch_gpu.sh`` builds the submitted
job's runtime env with ``python -m mrtpo_openrlhf.cli.job_env``; the CLI adds these variables to the runtime
env of upstream's own ``ray.init`` (``cli/train_ppo_ray.py``).
"""

from __future__ import annotations

import os
from typing import Mapping

from mrtpo_openrlhf.tasks import TASKS
from mrtpo_openrlhf.verifiers.response import MAX_RESPONSE_CHARS_ENV


def verifier_env_vars() -> tuple[str, ...]:
    """Every variable a reward or verifier reads: the shared response cap, then each registered task's
    ``env_vars``."""
    return tuple(dict.fromkeys((MAX_RESPONSE_CHARS_ENV, *(name for t in TASKS.values() for name in t.env_vars))))


def verifier_path_env_vars() -> tuple[str, ...]:
    """The ones that hold paths (each task's ``path_env_vars``)."""
    return tuple(dict.fromkeys(name for t in TASKS.values() for name in t.path_env_vars))


# What a submitted job must not ship from the submitter's checkout.
JOB_EXCLUDES = [".venv", ".cache", "runs", ".git"]


def verifier_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The verifier variables set in ``environ``."""
    return {name: environ[name] for name in verifier_env_vars() if name in environ}


def job_runtime_env(working_dir: str, extra: Mapping[str, str] = (), environ: Mapping[str, str] = os.environ) -> dict:
    """``ray job submit``'s runtime env: the repo as working_dir, the verifier variables set here, plus ``extra``."""
    return {"working_dir": working_dir, "excludes": JOB_EXCLUDES, "env_vars": {**verifier_env(environ), **dict(extra)}}
