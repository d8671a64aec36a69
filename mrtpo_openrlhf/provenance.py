"""Where a run came from: the package version, the commit, whether the tree was dirty, the training path's own
hash, and the CPU.

``training_path`` is a hash of the files that decide what training computes (``mrtpo_openrlhf/`` outside
``study/``, and ``reward_funcs/``) at HEAD: two runs with the same hash trained on the same code even when their
commits differ (a report or a doc changed in between). ``training_path_dirty`` says whether those files had
uncommitted changes, in which case the hash does not describe them.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from typing import Any

from .paths import REPO_ROOT

TRAINING_PATHS = ("mrtpo_openrlhf", "reward_funcs")
NOT_TRAINING = ("mrtpo_openrlhf/study/",)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def training_path_hash(tree_listing: str) -> str:
    """sha1 over ``git ls-tree -r`` lines of the training path, study/ left out (12 hex digits)."""
    lines = [
        line
        for line in tree_listing.splitlines()
        if line.strip() and not any(line.split("\t", 1)[-1].startswith(p) for p in NOT_TRAINING)
    ]
    return hashlib.sha1("\n".join(sorted(lines)).encode()).hexdigest()[:12]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(names: tuple[str, ...] = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")) -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return [n for n in names if n in have]
    except OSError:
        pass
    return []


def provenance() -> dict[str, Any]:
    """The commit, dirtiness, training-path hash, CPU and load of this machine, now."""
    import torch

    from . import __version__

    commit = _git("rev-parse", "HEAD")
    listing = _git("ls-tree", "-r", "HEAD", "--", *TRAINING_PATHS)
    status = _git("status", "--porcelain", "--untracked-files=no")
    training_status = _git(
        "status", "--porcelain", "--untracked-files=no", "--", *TRAINING_PATHS, *(f":!{p}" for p in NOT_TRAINING)
    )
    return {
        "version": __version__,
        "commit": commit.strip() if commit else None,
        "dirty": bool(status.strip()) if status is not None else None,
        "training_path": training_path_hash(listing) if listing is not None else None,
        "training_path_dirty": bool(training_status.strip()) if training_status is not None else None,
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "torch": torch.__version__,
    }


def record_run(folder: str | os.PathLike) -> None:
    """Write ``run.json`` (the version and ``provenance()``) into ``folder`` where none is there yet: a run started
    without the CPU launcher (which writes its own, richer one) still records what it ran."""
    import json
    from pathlib import Path

    path = Path(folder) / "run.json"
    if path.exists():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"provenance": provenance()}, indent=2) + "\n")
    except OSError as exc:  # a record, not a reason to stop training
        print(f"[mrtpo] run.json not written ({exc})", flush=True)
