"""The evaluation run: load benchmarks, get responses (model or predictions files), score, write the outputs.

Prediction formats: ``predictions.py``. Several predictions of one id are samples: each is scored, weighted
1/n_samples in the benchmark's aggregates (so they are mean accuracies over samples), and ``pass@k`` is reported.
Ids that the benchmark does not have are an error naming the file and the first of them; examples without a
prediction count as wrong (``reason = "no prediction"``, ``n_missing``), and the headline states the coverage of a
partial run. BFCL categories with no prediction at all are left out (not run), as with ``--bfcl-category``; a
requested benchmark with no prediction at all is an error.

Outputs (docs/eval.md, "Result files"): scores are fractions in [0, 1] with standard errors (``SCHEMA_VERSION``);
an ``--out`` folder that already holds files is refused unless ``overwrite``; IFEval/IFBench also get the official
``eval_results_{strict,loose}.jsonl`` and BFCL its ``BFCL_v4_<category>_score.json`` files.
"""

from __future__ import annotations

import json
import logging
import platform
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from mrtpo_openrlhf.data.jsonl import new_file_mode, write_jsonl
from mrtpo_openrlhf.paths import REPO_ROOT
from mrtpo_openrlhf.tasks import benchmark_options, get_benchmark

from .data import EvalExample, load_benchmark
from .generation import GenerationConfig, Generator
from .predictions import Prediction, read_predictions
from .scoring import NO_PREDICTION, pass_at_k, score_one, summarize

logger = logging.getLogger(__name__)

# 1: scores in percent (before 2026-12-01); 2: fractions in [0, 1] with standard errors (docs/eval.md).
SCHEMA_VERSION = 2
VERSIONED_PACKAGES = (
    "mrtpo-openrlhf",
    "openrlhf",
    "torch",
    "transformers",
    "vllm",
    "huggingface-hub",
    "bfcl-eval",
    "nvidia-ifbench",
)


@dataclass
class EvalConfig:
    benchmarks: Sequence[str]
    model: str | None = None
    predictions: Sequence[str] = ()
    data_dirs: dict[str, str] = field(default_factory=dict)
    out: str | None = None
    limit: int | None = None
    generation: GenerationConfig = GenerationConfig()
    # the benchmarks' declared options by dest ({"spider_timeout": 10.0}; ``tasks.BenchmarkOption``); absent = default
    options: dict[str, Any] = field(default_factory=dict)
    workers: int = 4  # SQL scoring threads (SQLite releases the GIL)
    overwrite: bool = False  # replace the results an existing --out folder holds


def limit_examples(examples: Sequence[EvalExample], limit: int) -> list[EvalExample]:
    """The first ``limit`` examples; for a benchmark with groups (BFCL) the first ``limit`` of each group."""
    taken: dict[str, int] = {}
    out = []
    for ex in examples:
        key = get_benchmark(ex.benchmark).group
        group = ex.meta.get(key, "") if key else ""
        if taken.get(group, 0) < limit:
            taken[group] = taken.get(group, 0) + 1
            out.append(ex)
    return out


def score_examples(
    examples: Sequence[EvalExample],
    responses: Sequence[Prediction | Sequence[Prediction] | None],
    cfg: EvalConfig,
    desc: str = "scoring",
) -> list[dict[str, Any]]:
    """Records in example order: one per sample (a Prediction, a list of samples, or None = no prediction).

    With several samples each record carries ``sample`` (its index) and ``weight`` = 1/n_samples, so every example
    weighs 1 in the aggregates. Benchmarks registered ``threaded`` (SQL) are scored on ``cfg.workers`` threads.
    """

    def one(job: tuple[EvalExample, Prediction | None, int, int]) -> dict[str, Any]:
        ex, pred, index, n = job
        options = get_benchmark(ex.benchmark).arguments("scorer", cfg.options)
        if pred is None:
            record = {**score_one(ex, "", None, **options), "verdict": False, "reason": NO_PREDICTION}
            if "unsupported" in record:  # nothing was scored, so nothing was unsupported
                record["unsupported"] = []
                record.pop("supported")
        else:
            record = score_one(ex, pred.response, pred.answer, **options)
        return {**record, "sample": index, "weight": 1.0 / n} if n > 1 else record

    jobs = []
    for ex, given in zip(examples, responses):
        samples = [given] if given is None or isinstance(given, Prediction) else list(given)
        jobs += [(ex, pred, i, len(samples)) for i, pred in enumerate(samples)]
    threaded = cfg.workers > 1 and any(get_benchmark(ex.benchmark).threaded for ex in examples)
    records = []
    with tqdm(total=len(jobs), desc=desc, unit="ex", disable=len(jobs) < 20) as bar:
        if threaded:
            with ThreadPoolExecutor(cfg.workers) as pool:
                for record in pool.map(one, jobs):
                    records.append(record)
                    bar.update(1)
        else:
            for job in jobs:
                records.append(one(job))
                bar.update(1)
    return records


def headline_note(summary: dict[str, Any], column: str) -> str:
    """What a headline cell must say besides its number: the coverage of a partial predictions run
    (" (120/3,641 predicted)") and unsupported-offline decisions counted as failed, with the value without them."""
    notes = []
    n, predicted = summary["n"], summary.get("n_predicted", summary["n"])
    if predicted < n:
        notes.append(f"{predicted:,}/{n:,} predicted")
    if summary.get("n_unsupported"):
        without = summary.get("headline_without_unsupported", {}).get(column)
        notes.append(f"{summary['n_unsupported']} unsupported as failed; without: {_fmt(without)}")
    return f" ({'; '.join(notes)})" if notes else ""


def _fmt(value: float | None, stderr: float | None = None) -> str:
    """A fraction with 4 decimals (lm-evaluation-harness's table), ``± stderr`` when it has one; N/A for None."""
    if value is None:
        return "N/A"
    return f"{value:.4f}" + ("" if stderr is None else f" ± {stderr:.4f}")


def combined_table(summaries: dict[str, dict[str, Any]], label: str) -> tuple[str, float | None]:
    """One markdown row of every benchmark's headline columns plus their unweighted average (paper style)."""
    columns = [
        (name, value, summaries[bench].get("headline_stderr", {}).get(name), headline_note(summaries[bench], name))
        for bench in summaries
        for name, value in summaries[bench]["headline"].items()
    ]
    values = [v for _, v, _, _ in columns if v is not None]
    average = sum(values) / len(values) if values and len(values) == len(columns) else None
    header = "| Model | " + " | ".join(name for name, *_ in columns) + " | Avg |"
    rule = "|---|" + "---:|" * (len(columns) + 1)
    cells = [_fmt(v, se) + note for _, v, se, note in columns]
    row = f"| {label} | " + " | ".join(cells) + f" | {_fmt(average)} |"
    return "\n".join([header, rule, row]), average


GROUP_TABLES = {  # summary key -> (title, first column)
    "by_difficulty": ("by difficulty", "difficulty"),
    "by_category": ("by category", "category"),
    "by_subcategory": ("by subcategory (constraint-level)", "subcategory"),
    "by_group": ("per instruction group (instruction-level)", "group"),
    "by_instruction": ("per instruction (instruction-level)", "instruction"),
}


def _group_table(title: str, first: str, groups: dict[str, dict[str, Any]]) -> list[str]:
    """A markdown table of per-group numbers: accuracy (± stderr) or strict/loose, correct, count."""
    fields = [f for f in ("accuracy", "strict", "loose", "correct", "count") if any(f in g for g in groups.values())]
    lines = [f"\n{title}:\n", f"| {first} | " + " | ".join(fields) + " |", "|---|" + "---:|" * len(fields)]
    for name, g in groups.items():
        cells = [
            _fmt(g[f], g.get("stderr")) if f == "accuracy" else _fmt(g[f]) if f in ("strict", "loose") else str(g[f])
            for f in fields
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def _scalars(part: dict[str, Any]) -> str:
    """``key = value`` for the numbers of a summary part, a score with its ``_stderr`` as ``x ± se``."""
    shown = []
    for k, v in part.items():
        if k.endswith("_stderr") or isinstance(v, (bool, dict, list, str)):
            continue
        if isinstance(v, float) or v is None:
            shown.append(f"{k} = {_fmt(v, part.get(f'{k}_stderr'))}")
        else:
            shown.append(f"{k} = {v}")
    return ", ".join(shown)


def _details(bench: str, summary: dict[str, Any]) -> list[str]:
    lines = [f"\n### {bench} (n = {summary['n']})", "", _scalars(summary)]
    if "prompt_loose" in summary:  # IFEval's four numbers
        lines += [
            "\n| level | strict | loose |",
            "|---|---:|---:|",
            f"| prompt | {_fmt(summary['prompt_strict'], summary['prompt_strict_stderr'])} | "
            f"{_fmt(summary['prompt_loose'], summary['prompt_loose_stderr'])} |",
            f"| instruction | {_fmt(summary['inst_strict'])} | {_fmt(summary['inst_loose'])} |",
        ]
    for key, (title, first) in GROUP_TABLES.items():
        if summary.get(key):
            lines += _group_table(title, first, summary[key])
    for key, title in (("without_unsupported", "without the unsupported-offline decisions"), ("samples", "samples")):
        part = summary.get(key)
        if part:
            flat = {**part, **part.get("pass_at_k", {})}
            flat.update({f"{k}_stderr": v for k, v in part.get("pass_at_k_stderr", {}).items()})
            lines.append(f"\n{title}: " + _scalars(flat))
    return lines


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(new_file_mode())  # an existing file keeps its old mode otherwise


def write_outputs(
    out_dir: Path, records: dict[str, list[dict]], summaries: dict[str, dict], label: str, meta: dict[str, Any]
) -> dict[str, Path]:
    """In ``out_dir``: ``<bench>.records.jsonl`` per benchmark, ``summary.json``, ``results.md``, and the
    official harnesses' files (``ifeval/eval_results_strict.jsonl`` ..., ``bfcl/<label>/.../*_score.json``).
    Every file gets the mode of a new file (``new_file_mode``: 0644 under umask 022)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for bench, recs in records.items():
        paths[bench] = out_dir / f"{bench}.records.jsonl"
        write_jsonl(paths[bench], recs)
        official = get_benchmark(bench).function("official_files")
        for key, (rel, rows) in (official(bench, recs, summaries[bench], label) if official else {}).items():
            paths[key] = out_dir / rel
            write_jsonl(paths[key], rows)
    table, average = combined_table(summaries, label)
    paths["summary"] = out_dir / "summary.json"
    paths["markdown"] = out_dir / "results.md"
    files = sorted(str(p.relative_to(out_dir)) for p in paths.values())
    summary = {
        "schema_version": SCHEMA_VERSION,
        "scores": "fractions in [0, 1]; <key>_stderr = standard error over examples (docs/eval.md)",
        "meta": meta,
        "average": average,
        "benchmarks": summaries,
        "files": files,
    }
    _write_text(paths["summary"], json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    lines = [
        "# Evaluation results",
        "",
        "Scores are fractions in [0, 1]; `± x` is the standard error over examples (docs/eval.md).",
        "",
        table,
        "",
        "Average = unweighted mean of the columns shown.",
    ]
    for bench, summary_ in summaries.items():
        lines += _details(bench, summary_)
    _write_text(paths["markdown"], "\n".join(lines) + "\n")
    return paths


# ----------------------------------------------------------------------------------------------- provenance
def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages a result depends on (None: not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(root: Path = REPO_ROOT) -> dict[str, Any]:
    """``{"commit", "dirty"}`` of the project checkout the code runs from (None where it is not a git checkout:
    an installed wheel); ``dirty`` = tracked files differ from the commit."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if not (root / ".git").exists():
        return {"commit": None, "dirty": None}
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


# ----------------------------------------------------------------------------------------------- the --out folder
class OutputExistsError(ValueError):
    """``--out`` already holds files and ``--overwrite`` was not given."""


def prepare_out_dir(out: str | None, overwrite: bool) -> Path:
    """The folder results go to. A given ``--out`` that holds files is refused unless ``overwrite``; the default
    ``runs/eval/<timestamp>`` takes a ``-2``, ``-3`` ... suffix when that name is taken."""
    if out is None:
        base = Path("runs/eval") / time.strftime("%Y%m%d-%H%M%S")
        path, i = base, 1
        while path.exists():
            i += 1
            path = base.with_name(f"{base.name}-{i}")
        return path
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        held = sorted(p.name for p in path.iterdir())
        shown = ", ".join(held[:3]) + (" ..." if len(held) > 3 else "")
        raise OutputExistsError(
            f"--out {out} already holds results ({shown}); choose another folder or pass --overwrite"
        )
    return path


def clear_previous(out_dir: Path) -> list[Path]:
    """Before an ``--overwrite`` run: remove the files the previous run listed in its ``summary.json`` (only
    those, and only inside ``out_dir``), so no stale benchmark is left next to the new results."""
    try:
        listed = json.loads((out_dir / "summary.json").read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    root, removed = out_dir.resolve(), []
    for rel in listed if isinstance(listed, list) else []:
        target = (out_dir / str(rel)).resolve()
        if target.is_file() and target.is_relative_to(root):
            target.unlink()
            removed.append(target)
            for parent in target.parents:  # folders the previous run made and that are now empty
                if parent == root or any(parent.iterdir()):
                    break
                parent.rmdir()
    return removed


# ----------------------------------------------------------------------------------------------- the run
def _coverage_warning(bench: str, predicted: int, n_total: int) -> str:
    left_out = get_benchmark(bench).coverage_note
    return f"{bench}: {predicted:,} of {n_total:,} examples have a prediction (the others count as wrong{left_out})"


def check_config(cfg: EvalConfig) -> None:
    """Stop on a config that cannot run, before anything is loaded."""
    if not cfg.benchmarks:
        raise ValueError("no benchmark requested")
    if (cfg.model is None) == (not cfg.predictions):
        raise ValueError("give exactly one of a model (--model) or predictions (--predictions)")
    unknown = sorted(set(cfg.options) - set(benchmark_options()))
    if unknown:
        raise ValueError(f"unknown benchmark option(s) {unknown}; known: {', '.join(benchmark_options())}")


def predicted_responses(
    bench: str, exs: list[EvalExample], given: dict[str, Any], sources: Sequence[str]
) -> tuple[list[EvalExample], list[Any]]:
    """The examples to score and their given predictions (None where an example has none). A group (BFCL
    category) without any prediction was not run and is left out; a benchmark without any prediction is refused."""
    if not any(ex.id in given for ex in exs):
        raise ValueError(
            f"{bench}: none of its {len(exs):,} examples has a prediction in {', '.join(sources)} "
            f"(drop --benchmark {bench} or give its predictions)"
        )
    n_total = len(exs)
    group = get_benchmark(bench).group
    if group:
        ran = {ex.meta[group] for ex in exs if ex.id in given}
        exs = [ex for ex in exs if ex.meta[group] in ran]
    responses = [given.get(ex.id) for ex in exs]
    predicted = sum(r is not None for r in responses)
    if predicted < n_total:
        logger.warning(_coverage_warning(bench, predicted, n_total))
    return exs, responses


def run_meta(cfg: EvalConfig, benchmarks: list[str], generator: Generator | None) -> dict[str, Any]:
    """``summary.json``'s ``meta``: what was evaluated, with what, where and when."""
    return {
        "model": cfg.model,
        "predictions": list(cfg.predictions),
        "limit": cfg.limit,
        "data_dirs": cfg.data_dirs,
        # what each benchmark's loader and scorer were given, defaults included
        "options": {
            b: {
                **get_benchmark(b).arguments("loader", cfg.options),
                **get_benchmark(b).arguments("scorer", cfg.options),
            }
            for b in benchmarks
        },
        "generation": vars(cfg.generation) if cfg.model else None,
        **(generator.record() if generator else {"backend": None, "device": None, "dtype": None, "model_path": None}),
        "versions": package_versions(),
        "git": git_commit(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def run_evaluation(cfg: EvalConfig) -> dict[str, Any]:
    """Evaluate ``cfg.benchmarks``; returns {"summaries", "records", "paths", "average", "table", "meta"}."""
    check_config(cfg)
    out_dir = prepare_out_dir(cfg.out, cfg.overwrite)  # before anything slow
    generator = Generator(cfg.model, cfg.generation) if cfg.model else None  # a bad --model fails here
    benchmarks = list(dict.fromkeys(cfg.benchmarks))
    examples = {b: load_benchmark(b, cfg.data_dirs.get(b), cfg.options) for b in benchmarks}
    predictions = read_predictions(cfg.predictions, examples) if cfg.predictions else None
    if cfg.limit is not None:
        examples = {b: limit_examples(exs, cfg.limit) for b, exs in examples.items()}

    records: dict[str, list[dict]] = {}
    summaries: dict[str, dict] = {}
    for bench in benchmarks:
        if predictions is not None:
            exs, responses = predicted_responses(bench, examples[bench], predictions[bench], cfg.predictions)
        else:
            exs = examples[bench]
            responses = [Prediction(t) for t in generator.generate([ex.prompt for ex in exs])]
        records[bench] = score_examples(exs, responses, cfg, desc=f"scoring {bench}")
        summary = summarize(bench, records[bench])
        predicted = sum(r is not None for r in responses)
        summaries[bench] = {
            **summary,
            "n": len(examples[bench]),
            "n_scored": summary["n"],
            "n_predicted": predicted,
            "n_missing": len(exs) - predicted,
            **pass_at_k(records[bench]),
        }

    label = Path(cfg.model).name if cfg.model else "predictions"
    meta = run_meta(cfg, benchmarks, generator)
    if cfg.overwrite:
        clear_previous(out_dir)
    paths = write_outputs(out_dir, records, summaries, label, meta)
    table, average = combined_table(summaries, label)
    return {
        "summaries": summaries,
        "records": records,
        "paths": paths,
        "average": average,
        "table": table,
        "meta": meta,
    }
