"""Paths shown to people: relative to where they work, never the author's absolute layout."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_ROOT.parent
DATA_DIR = PACKAGE_ROOT / "data"  # bundled data sets, fixtures and word lists


def display_path(path: str | os.PathLike) -> str:
    """``path`` as a page or picture should show it: relative to the working directory or the repo when inside
    either, ``~/...`` under the home folder, else as given."""
    resolved = Path(path).expanduser().resolve()
    for base in (Path.cwd().resolve(), REPO_ROOT):
        try:
            return str(resolved.relative_to(base)) or "."
        except ValueError:
            continue
    try:
        return str(Path("~") / resolved.relative_to(Path.home().resolve()))
    except (ValueError, RuntimeError):
        return str(path)


def share_like_umask(folder: str | os.PathLike) -> None:
    """Give every file under ``folder`` the read bits the umask allows, as any other file a run writes gets.

    safetensors (0.8) writes ``model.safetensors`` through a private temporary file (mode 0600), so on shared
    storage a teammate could read the config but not the weights. Bits are only added, never taken away.
    """
    mask = os.umask(0)
    os.umask(mask)
    readable = 0o444 & ~mask
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            mode = path.stat().st_mode & 0o7777
            if mode & readable != readable:
                path.chmod(mode | readable)
