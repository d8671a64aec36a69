"""The run files of a study folder: metrics, configs, held-out scores and provenance of each (arm, seed)."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mrtpo_openrlhf.core.placements import NO_REPLAY, get_placement
from mrtpo_openrlhf.metrics import first_key, read_metrics
from mrtpo_openrlhf.paths import REPO_ROOT

from ..config import ARMS

# The package folder, by which a recorded absolute path is shown inside the checkout.
PACKAGE_DIR = Path(__file__).resolve().parents[2].name
SMALL_FILES = ("metrics.jsonl", "config.json", "command.txt", "result.json", "run.json", "heldout.json")
TOTAL = "total"  # the summed reward (what GRPO optimizes)
LENGTH_KEYS = ("rollout/response_length_mean", "response_length", "rollout/response_length")
STEP_TIME_KEYS = ("timing/step_wall",)  # timing/step_total double-counts (it sums the other timings)


class ReportError(ValueError):
    """A study folder with nothing to report; the message says what is missing."""


def load_runs(root: Path) -> dict[str, dict[int, list[dict[str, Any]]]]:
    """{arm: {seed: metric rows}} for every run folder that has a metrics file (finished or not)."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for arm in ARMS:
        for seed_dir in sorted((root / arm).glob("seed*")):
            path = seed_dir / "metrics.jsonl"
            if path.is_file() and seed_dir.name[4:].isdigit():
                rows = read_metrics(path)
                if rows:
                    runs.setdefault(arm, {})[int(seed_dir.name[4:])] = rows
    if not runs:
        raise ReportError(f"{root}: no <arm>/seed<k>/metrics.jsonl found (arms: {', '.join(ARMS)})")
    return runs


def reward_names(runs: dict[str, dict[int, list[dict]]]) -> list[str]:
    names: list[str] = []
    for by_seed in runs.values():
        for rows in by_seed.values():
            for row in rows:
                for key in row:
                    if key.startswith("reward/") and key.endswith("/mean"):
                        name = key[len("reward/") : -len("/mean")]
                        if name not in names:
                            names.append(name)
    return names


def series(rows: list[dict], key: str, steps: int) -> np.ndarray:
    """(steps,) values of ``key`` by step (1-based ``step``), NaN where absent. ``total``: sum of reward means."""
    out = np.full(steps, np.nan)
    for row in rows:
        t = int(row.get("step", 0)) - 1
        if not 0 <= t < steps:
            continue
        if key == TOTAL:
            vals = [v for k, v in row.items() if k.startswith("reward/") and k.endswith("/mean")]
            value = sum(vals) if vals else math.nan
        else:
            value = row.get(key, math.nan)
        out[t] = value if isinstance(value, (int, float)) else math.nan
    return out


def curves(runs, arm: str, key: str, steps: int) -> tuple[list[int], np.ndarray]:
    seeds = sorted(runs.get(arm, {}))
    return seeds, np.array([series(runs[arm][s], key, steps) for s in seeds]).reshape(len(seeds), steps)


def per_seed(runs, arm: str, key: str, steps: int, fn) -> dict[int, float]:
    seeds, c = curves(runs, arm, key, steps)
    return {s: fn(row) for s, row in zip(seeds, c)}


def _last(row: np.ndarray) -> float:
    ok = row[~np.isnan(row)]
    return float(ok[-1]) if ok.size else math.nan


@dataclass
class Study:
    """Everything the report reads: metrics by run, each run's small JSON files, the config as run."""

    root: Path  # the folder holding <arm>/seed<k>/
    folder: Path  # the study or results folder (prompts/, localization/)
    runs: dict[str, dict[int, list[dict[str, Any]]]]
    files: dict[str, dict[int, dict[str, Any]]]  # arm -> seed -> {"run", "heldout", "result", "config"} or None
    config: dict[str, Any]
    steps: int
    names: list[str]

    def file(self, arm: str, seed: int, name: str) -> dict[str, Any] | None:
        return self.files.get(arm, {}).get(seed, {}).get(name)

    def cpu_label(self, arm: str, seed: int) -> str | None:
        """The CPU the run recorded (``run.json`` provenance), short: ``Intel Xeon``, ``AMD EPYC``."""
        model = ((self.file(arm, seed, "run") or {}).get("provenance") or {}).get("cpu_model")
        if not model:
            return None
        short = model.replace("(R)", "").replace("(TM)", "").split(" CPU")[0].split("(")[0]
        return " ".join(w for w in short.split() if w != "Processor") or model

    def base_weights(self, arm: str, seed: int) -> str | None:
        """The sha256 of the weights the run started from (``config.json`` ``base_model``), when recorded."""
        return ((self.file(arm, seed, "config") or {}).get("base_model") or {}).get("weights_sha256")

    def base_short(self, arm: str, seed: int) -> str | None:
        """``base_weights`` as the report prints it (12 hex digits)."""
        sha = self.base_weights(arm, seed)
        return sha[:12] if sha else None

    @property
    def has_heldout(self) -> bool:
        return any(f.get("heldout") for by in self.files.values() for f in by.values())


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None


def load_study(root: Path, folder: Path, config: dict[str, Any]) -> Study:
    runs = load_runs(root)
    files = {
        arm: {
            seed: {
                name: _read_json(root / arm / f"seed{seed}" / f"{name}.json")
                for name in ("run", "heldout", "result", "config")
            }
            for seed in by
        }
        for arm, by in runs.items()
    }
    steps = int(config.get("steps") or max(len(r) for by in runs.values() for r in by.values()))
    return Study(root, folder, runs, files, config, steps, reward_names(runs))


def length_key(runs) -> str | None:
    for by_seed in runs.values():
        for rows in by_seed.values():
            key = first_key(rows[-1], *LENGTH_KEYS)
            if key:
                return key
    return None


def replaying_arms() -> list[str]:
    """The arms whose placement replays (they log the localization metrics), in ``ARMS`` order."""
    return [arm for arm, spec in ARMS.items() if spec.placement and get_placement(spec.placement).replay != NO_REPLAY]


def superseded_runs(folder: Path) -> list[dict[str, Any]]:
    """Runs moved to ``<folder>/superseded/<arm>/seed<k>/`` by a plan amendment: kept and listed, never paired or
    counted. One record per run: arm, seed, base weights' sha256 (12 hex digits) and held-out total when present."""
    out = []
    for arm in ARMS:
        for seed_dir in sorted((folder / "superseded" / arm).glob("seed*")):
            if not (seed_dir.name[4:].isdigit() and (seed_dir / "metrics.jsonl").is_file()):
                continue
            base = ((_read_json(seed_dir / "config.json") or {}).get("base_model") or {}).get("weights_sha256")
            heldout = _read_json(seed_dir / "heldout.json") or {}
            out.append(
                {
                    "arm": arm,
                    "seed": int(seed_dir.name[4:]),
                    "base_model": base[:12] if base else None,
                    "heldout_total": heldout.get("total"),
                }
            )
    return out


def _shown(path: Path) -> str:
    """``path`` from the repository root when it lies inside it (a report names no machine's folders)."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def checkout_relative(path: str | None) -> str | None:
    """A path inside this project's checkout, from the package folder on (the runs record absolute paths, which
    name the machine and worktree they ran in, not the file)."""
    if not path:
        return path
    head, sep, tail = str(path).rpartition(f"/{PACKAGE_DIR}/")
    return f"{PACKAGE_DIR}/{tail}" if sep else path


def repo_path(path: str | None) -> Path | None:
    """``path`` (absolute, or relative to the repository root) when it is a file here, else None."""
    if not path:
        return None
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = Path(__file__).resolve().parents[3] / candidate
    return candidate if candidate.is_file() else None


def copy_small_files(study: Study, root: Path, out: Path, study_file: Path) -> None:
    """Copy what a results folder keeps (each run's small files, the config, the localization outputs, the prompt
    lists) from the study into ``out``, unless ``out`` is the study itself."""
    if out / "runs" != root and out != root:
        for arm, by_seed in study.runs.items():
            for seed in by_seed:
                src, dst = root / arm / f"seed{seed}", out / "runs" / arm / f"seed{seed}"
                dst.mkdir(parents=True, exist_ok=True)
                for name in SMALL_FILES:
                    if (src / name).is_file():
                        shutil.copy2(src / name, dst / name)
        if study_file.is_file() and study_file != out / "study.json":
            shutil.copy2(study_file, out / "study.json")
    if out != study.folder:
        from ...core.relevance import RELEVANCE
        from ..localize import HEATMAP, SMALL_OUTPUTS

        for label in (study.folder / "localization").glob("*"):
            # the default measure's outputs in the label's folder, each other measure's in <label>/<measure>/
            for src in (label, *(label / m for m in RELEVANCE)):
                dst = out / "localization" / src.relative_to(study.folder / "localization")
                for name in (*SMALL_OUTPUTS, HEATMAP):
                    if (src / name).is_file():
                        dst.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(src / name, dst / name)
        for src in sorted((study.folder / "prompts").glob("seed*.json")):
            (out / "prompts").mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out / "prompts" / src.name)
