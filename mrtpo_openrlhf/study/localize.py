"""Localization on trained checkpoints: ``python -m mrtpo_openrlhf.study localize CONFIG``.

For each arm's final model of one seed (and the base model, arm ``base``), sample the same prompts, replay every
(response, reward) pair with the diagnostics (``python -m mrtpo_openrlhf.diagnose``) and keep the small outputs
(``summary.json``: tokens for 80% of the distance, top-20% share, span ratios; ``probe.json``: per-reward pass
rates of the checkpoint) in ``<results>/localization/<arm>-seed<k>/``, where the report reads them. The heatmap
page (``index.html``) and the replay records stay in the study folder beside the checkpoint. Each relevance measure
asked for (``core.relevance``; the default ``js`` in the folder itself, another in ``<label>/<measure>/``) gets its
own page and statistics on the same samples, the null block's beside each reward's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Sequence

from ..core.settings import DEFAULT_RELEVANCE
from .config import StudyConfig

BASE = "base"  # the arm name of the untrained model
SMALL_OUTPUTS = ("summary.json", "probe.json")
HEATMAP = "heatmap.png"  # the top of the heatmap page, when a headless browser is installed
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


class LocalizeError(RuntimeError):
    pass


def label(arm: str, seed: int) -> str:
    return BASE if arm == BASE else f"{arm}-seed{seed}"


def parse_label(text: str) -> tuple[str, int] | None:
    """``label``'s (arm, seed); None for the base model or a folder name it did not write."""
    arm, sep, seed = text.rpartition("-seed")
    return (arm, int(seed)) if sep and arm and seed.isdigit() else None


def checkpoint(cfg: StudyConfig, study_dir: Path, arm: str, seed: int) -> str:
    """The model to diagnose: the config's model for ``base``, else the run's saved final model."""
    if arm == BASE:
        return cfg.model
    model = study_dir / arm / f"seed{seed}" / "model"
    if not (model / "config.json").is_file():
        raise LocalizeError(
            f"{arm} seed {seed}: no checkpoint at {model}. Checkpoints stay in the study folder (never in the "
            f"committed results): train it there first, e.g. `python -m mrtpo_openrlhf.study run CONFIG --arms {arm} "
            f"--seeds {seed} --out {study_dir} --results none`."
        )
    return str(model)


def localize(
    cfg: StudyConfig,
    study_dir: Path,
    arms: Sequence[str],
    seed: int,
    results: Path | None,
    prompts: int = 8,
    samples: int = 4,
    sample_seed: int = 7,
    backend: str = "auto",
    relevance: Sequence[str] = (DEFAULT_RELEVANCE,),
) -> list[dict[str, Any]]:
    """Diagnose each arm's checkpoint under each measure; returns one {"label", "relevance", "out", "summary"} per
    arm and measure."""
    import json

    from mrtpo_openrlhf.diagnostics.runner import run as run_diagnose
    from mrtpo_openrlhf.provenance import provenance

    from .probe import probe, write

    models = {arm: checkpoint(cfg, study_dir, arm, seed) for arm in arms}  # fail before any work
    # the code this process runs, read once now: read as each summary is written, it named a commit made (or an
    # edit begun) in the checkout while the localization ran
    code = provenance()
    done = []
    for i, (arm, model) in enumerate(models.items(), 1):
        name = label(arm, seed)
        out = study_dir / "localization" / name
        out.mkdir(parents=True, exist_ok=True)
        print(f"[study] localize {i}/{len(models)}: {name} ({prompts} prompts x {samples} samples)", flush=True)
        result = probe(
            cfg.task,
            cfg.data_path(),
            model,
            prompts,
            samples,
            cfg.temperature,
            cfg.max_new_tokens,
            sample_seed,
            backend,
            out / "samples.jsonl",
        )
        write(result, out / "probe.json")
        for measure in relevance:
            where = out if measure == DEFAULT_RELEVANCE else out / measure
            paths = run_diagnose(
                model,
                None,
                str(where),
                responses=str(out / "samples.jsonl"),
                task=cfg.task,
                temperature=cfg.temperature,
                relevance=measure,
            )
            record_code(paths["summary"], study_dir, arm, seed, model, code)
            if results is not None:
                dst = results / "localization" / name
                dst = dst if measure == DEFAULT_RELEVANCE else dst / measure
                dst.mkdir(parents=True, exist_ok=True)
                shutil.copy2(paths["summary"], dst / "summary.json")
                if measure == DEFAULT_RELEVANCE:
                    shutil.copy2(out / "probe.json", dst / "probe.json")
                shot = screenshot(paths["html"], dst / HEATMAP)
                print(f"[study]   {name} ({measure}): {shot}", flush=True)
            summary = json.loads(paths["summary"].read_text())
            done.append({"label": name, "relevance": measure, "out": where, "summary": summary})
            print(f"[study]   {name} ({measure}): heatmap page {paths['html']}", flush=True)
    return done


def base_of(study_dir: Path, arm: str, seed: int, model: str) -> str | None:
    """Weights sha256 of the base model a localized model started from: the run's recorded base for a checkpoint,
    the model's own weights for ``base``."""
    import json

    from .cold_start import ColdStartError, weights_sha256

    if arm == BASE:
        try:
            return weights_sha256(Path(model))
        except ColdStartError:  # a hub name or a folder without safetensors: nothing to hash here
            return None
    config = study_dir / arm / f"seed{seed}" / "config.json"
    recorded = json.loads(config.read_text()).get("base_model") if config.is_file() else None
    return (recorded or {}).get("weights_sha256")


def record_code(summary: Path, study_dir: Path, arm: str, seed: int, model: str, prov: dict) -> None:
    """Add to the summary's run record the commit (and dirtiness) of the code that localized (``prov``: provenance()
    when the localization started), and the base model (the tool study's plan, amendment 2: the commit is in each
    ``localization/<label>/summary.json``)."""
    import json

    data = json.loads(summary.read_text(encoding="utf-8"))
    data["run"] = {
        **data.get("run", {}),
        "commit": prov.get("commit") or "not recorded",
        "dirty": prov.get("dirty"),
        "commit_source": "recorded by study localize",
        "base_model_sha256": base_of(study_dir, arm, seed, model),
    }
    summary.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def screenshot(html: Path, png: Path, width: int = 1100, height: int = 1300, colors: int = 64) -> str:
    """Save the top of ``html`` as ``png`` with a headless Chromium (palette-reduced to stay small); returns what
    happened, in words. Without a browser nothing is written (the page itself stays in the study folder)."""
    import subprocess

    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        return f"no headless browser ({' / '.join(BROWSERS)}) for the heatmap picture; open {html} instead"
    command = [
        browser, "--headless", "--no-sandbox", "--hide-scrollbars", f"--window-size={width},{height}",
        f"--screenshot={png}", Path(html).resolve().as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0 or not png.is_file():
        return f"{browser} could not take the heatmap picture (exit {done.returncode}): {done.stderr.strip()[-300:]}"
    from PIL import Image

    Image.open(png).convert("RGB").quantize(colors=colors).save(png, optimize=True)
    return f"heatmap picture {png}"


def load_localization(root: Path, measure: str | None = None) -> dict[str, dict[str, Any]]:
    """label -> diagnose summary for every ``<root>/localization/<label>/summary.json`` (the default relevance
    measure's) or, with ``measure``, ``<label>/<measure>/summary.json``."""
    import json

    out = {}
    pattern = f"*/{measure}/summary.json" if measure else "*/summary.json"
    for path in sorted((root / "localization").glob(pattern)):
        label = path.parent.parent.name if measure else path.parent.name
        out[label] = json.loads(path.read_text(encoding="utf-8"))
    return out
