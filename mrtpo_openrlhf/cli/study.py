"""``python -m mrtpo_openrlhf.study {probe,coldstart,run,heldout,localize,report,readme}``."""

# The commands' argument parsing; what they do is in mrtpo_openrlhf/study/.

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mrtpo_openrlhf.core.settings import RUN_SETTINGS
from mrtpo_openrlhf.launch.watchdog import STALL_SECONDS

# probe and held-out scoring sample as the CPU training runs do
TEMPERATURE = RUN_SETTINGS["cpu"].temperature


def study_folders(cfg, args) -> tuple[Path, Path | None]:
    """(study folder, results folder or None) from ``--out``/``--results`` and the config's name."""
    from ..study.config import REPO_ROOT

    results = args.results or REPO_ROOT / "docs" / "results" / cfg.name
    return args.out or REPO_ROOT / "runs" / "study" / cfg.name, None if str(results) == "none" else results


def add_probe_command(sub) -> None:
    p = sub.add_parser("probe", help="sample the base model on a task; per-reward pass rate and varying groups")
    p.add_argument("--task", required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--model", default="smollm2")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["auto", "vllm", "transformers"], default="auto")
    p.add_argument("--out", type=Path, help="write the result as JSON here")
    p.add_argument("--save-samples", type=Path, help="write the samples as `diagnose --responses` rows")
    p.add_argument("--rules", help="judge the probe by a named rule set of study/probe.py PROBE_RULES (e.g. if-multi)")


def add_coldstart_command(sub) -> None:
    p = sub.add_parser("coldstart", help="a short SFT of the base model on the tool layout (OpenRLHF's train_sft)")
    p.add_argument("--out", type=Path, required=True, help="folder for the SFT'd HF model and cold_start.json")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--steps", type=int, default=6, help="optimizer steps")
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--exclude", type=Path, help="a provenance.json whose train/heldout ids the SFT rows must avoid")


def add_heldout_command(sub) -> None:
    p = sub.add_parser("heldout", help="score a checkpoint on unseen prompts (the study's primary endpoint)")
    p.add_argument("--task", required=True)
    p.add_argument("--data", type=Path, required=True, help="held-out prompts (JSONL)")
    p.add_argument("--model", required=True, help="an HF model folder (a run's model/) or 'smollm2'")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--temperature", type=float, default=TEMPERATURE)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--out", type=Path, required=True, help="write the scores as JSON here")


def add_run_command(sub) -> None:
    p = sub.add_parser("run", help="train every (arm, seed) of a config that is not done yet (resumable)")
    p.add_argument("config", type=Path, help="study config (TOML)")
    p.add_argument("--out", type=Path, help="study folder (default: runs/study/<name>)")
    p.add_argument("--arms", nargs="+", help="only these arms")
    p.add_argument("--seeds", nargs="+", type=int, help="only these seeds")
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_SECONDS,
        help="stop a run after this many seconds without output, a new step or log growth",
    )
    p.add_argument("--timeout", type=float, default=None, help="optional wall limit per run, in seconds")
    p.add_argument(
        "--until",
        type=clock_time,
        metavar="HH:MM",
        help="start a seed only when all its runs left end before this UTC time (today, or tomorrow if past)",
    )
    p.add_argument("--run-minutes", type=float, help="with --until: the minutes one run takes on this machine")
    p.add_argument("--dry-run", action="store_true", help="print each run's command, run nothing")
    p.add_argument(
        "--results",
        type=Path,
        help="committed results folder: finished runs are copied there and "
        "count as done (default: docs/results/<name>; 'none' to skip)",
    )
    p.add_argument(
        "--expect-base",
        type=sha_prefix,
        metavar="SHA256",
        help="refuse to start unless the base model's weights sha256 starts with this (8+ hex digits; CPU backend)",
    )


def clock_time(value: str) -> float:
    """``HH:MM`` (UTC) -> the next such moment as a time.time() value."""
    import datetime as dt

    try:
        hour, minute = (int(x) for x in value.split(":"))
        now = dt.datetime.now(dt.timezone.utc)
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected HH:MM (UTC)") from None
    return (at if at > now else at + dt.timedelta(days=1)).timestamp()


def sha_prefix(value: str) -> str:
    if len(value) < 8 or any(c not in "0123456789abcdef" for c in value.lower()):
        raise argparse.ArgumentTypeError(f"{value!r}: expected 8 or more hex digits of a sha256")
    return value.lower()


def add_localize_command(sub) -> None:
    p = sub.add_parser(
        "localize", help="diagnose the final checkpoints of one seed (and the base model) on the same prompts"
    )
    p.add_argument("config", type=Path, help="study config (TOML)")
    p.add_argument("--arms", nargs="+", default=["base", "gdpo", "mrtpo"], help="arms ('base': the untrained model)")
    p.add_argument("--seed", type=int, default=1, help="which seed's checkpoints")
    p.add_argument("--out", type=Path, help="study folder holding the checkpoints (default: runs/study/<name>)")
    p.add_argument(
        "--results", type=Path, help="results folder for the summaries (default: docs/results/<name>; 'none' to skip)"
    )
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--sample-seed", type=int, default=7)
    p.add_argument("--backend", choices=["auto", "vllm", "transformers"], default="auto")
    from ..core.relevance import RELEVANCE

    p.add_argument(
        "--relevance",
        nargs="+",
        choices=list(RELEVANCE),
        default=["js"],
        help="relevance measures: a heatmap page and localization statistics per measure, the null block's beside "
        "each (the default measure's in <label>/, another's in <label>/<measure>/)",
    )


def add_report_command(sub) -> None:
    p = sub.add_parser("report", help="markdown report + plots from a study folder")
    p.add_argument("dir", type=Path, help="study folder (runs/study/<name>) or a committed results folder")
    p.add_argument("--out", type=Path, help="report folder (default: DIR); run files are copied there")
    p.add_argument("--probe", type=Path, nargs="*", default=[], help="probe JSON files to include")
    p.add_argument("--format-reward", help="reward whose steps-to-threshold are reported (e.g. a format reward)")
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--notes", type=Path, help="markdown file included near the top (set-up, caveats)")
    p.add_argument(
        "--comparisons",
        help="declared comparisons A:B,... (Holm-adjusted together on the primary endpoint; default: the config's "
        "`comparisons`, else the report's: mrtpo:gdpo, gdpo:grpo and mrtpo against each placement's arm)",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="decision level of the verdicts")
    p.add_argument(
        "--config",
        type=Path,
        help="the study's TOML, when its plan (seeds, arm_seeds, comparisons, comparison_seeds) was amended after "
        "runs began; every other setting must match the runs' study.json (default: study.json)",
    )


def add_readme_command(sub) -> None:
    p = sub.add_parser("readme", help="the README's evidence block of a study, from its summary.json")
    p.add_argument("dir", type=Path, help="a committed results folder (its summary.json, written by `report`)")
    p.add_argument("--readme", type=Path, default=Path("README.md"), help="the README holding the block's markers")
    p.add_argument("--check", action="store_true", help="only say whether the block is in sync (exit 1 if not)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mrtpo_openrlhf.study", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for add in (
        add_probe_command,
        add_coldstart_command,
        add_heldout_command,
        add_run_command,
        add_localize_command,
        add_report_command,
        add_readme_command,
    ):
        add(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    return COMMANDS[args.cmd](ap, args)


def report_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.report import ReportError, write_report

    if not args.dir.is_dir():
        ap.error(f"{args.dir}: no such study folder")
    if not 0 < args.alpha < 1:
        ap.error(f"--alpha {args.alpha}: must lie between 0 and 1")
    given = [*args.probe, *([args.notes] if args.notes else []), *([args.config] if args.config else [])]
    missing = [str(p) for p in given if not p.is_file()]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")
    try:
        path = write_report(
            args.dir,
            args.out,
            args.probe,
            args.format_reward,
            args.threshold,
            args.notes.read_text(encoding="utf-8") if args.notes else "",
            comparisons=args.comparisons,
            alpha=args.alpha,
            config_file=args.config,
        )
    except ReportError as exc:
        print(f"[study] {exc}", file=sys.stderr)
        return 2
    print(f"[study] report: {path}")
    return 0


def readme_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.report.readme import ReadmeError, sync_readme

    if not args.readme.is_file():
        ap.error(f"--readme {args.readme}: no such file")
    try:
        changed = sync_readme(args.readme, args.dir, check=args.check)
    except ReadmeError as exc:
        print(f"[study] {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"[study] {args.readme}: evidence block of {args.dir} " + ("out of date" if changed else "in sync"))
        return 1 if changed else 0
    print(f"[study] {args.readme}: evidence block " + ("rewritten" if changed else "already in sync"))
    return 0


def run_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.config import ConfigError, load_config
    from ..study.runner import BaseModelMismatch, run_study

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        ap.error(str(exc))
    bad = [a for a in args.arms or [] if a not in cfg.arms]
    if bad:
        ap.error(f"--arms {bad}: not in the config's arms {cfg.arms}")
    bad = [s for s in args.seeds or [] if s not in cfg.seeds]
    if bad:
        ap.error(f"--seeds {bad}: not in the config's seeds {cfg.seeds}")
    try:
        study_dir, results = study_folders(cfg, args)
        failed = run_study(
            cfg,
            study_dir,
            args.dry_run,
            args.arms,
            args.seeds,
            args.timeout,
            results=results,
            stall_timeout=args.stall_timeout,
            expect_base=args.expect_base,
            until=args.until,
            run_minutes=args.run_minutes,
        )
    except (BaseModelMismatch, ValueError) as exc:
        print(f"[study] {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupted:  # Ctrl-C, SIGTERM or SIGHUP (launch.runner.Interrupted)
        print(
            "[study] interrupted: the run in progress was stopped and will be rerun from scratch; "
            "finished runs are kept. Run the same command to resume.",
            file=sys.stderr,
        )
        return getattr(interrupted, "exit_status", 130)
    return 1 if failed else 0


def localize_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.config import ConfigError, load_config
    from ..study.localize import BASE, LocalizeError, localize

    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        ap.error(str(exc))
    bad = [a for a in args.arms if a != BASE and a not in cfg.arms]
    if bad:
        ap.error(f"--arms {bad}: not in the config's arms {cfg.arms} (or '{BASE}')")
    study_dir, results = study_folders(cfg, args)
    try:
        localize(
            cfg,
            study_dir,
            args.arms,
            args.seed,
            results,
            args.prompts,
            args.samples,
            args.sample_seed,
            args.backend,
            args.relevance,
        )
    except LocalizeError as exc:
        print(f"[study] {exc}", file=sys.stderr)
        return 2
    return 0


def coldstart_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import json

    from ..study.cold_start import ColdStartError, cold_start

    if args.steps < 1 or args.batch < 1:
        ap.error("--steps and --batch must be >= 1")
    exclude: list[str] = []
    if args.exclude:
        if not args.exclude.is_file():
            ap.error(f"--exclude {args.exclude}: no such file")
        record = json.loads(args.exclude.read_text())
        exclude = [*record.get("train_ids", []), *record.get("heldout_ids", [])]
    try:
        done = cold_start(args.out, args.model, args.steps, args.lr, args.batch, exclude_ids=exclude)
    except ColdStartError as exc:
        print(f"[study] {exc}", file=sys.stderr)
        return 2
    print(f"[study] cold start: {args.out} (weights sha256 {done['weights_sha256'][:12]}, {done['seconds']} s)")
    return 0


def heldout_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.heldout import score_checkpoint, write

    if not args.data.is_file():
        ap.error(f"--data {args.data}: no such file")
    if args.prompts < 1 or args.samples < 1:
        ap.error("--prompts and --samples must be >= 1")
    result = score_checkpoint(
        args.task, args.data, args.model, args.prompts, args.samples, args.temperature, args.max_new_tokens
    )
    write(result, args.out)
    print(f"[study] held-out {args.model}: total {result['total']:.3f} -> {args.out}")
    return 0


def probe_command(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from ..study.probe import PROBE_RULES, check_rules, format_table, probe, write

    if not args.data.is_file():
        ap.error(f"--data {args.data}: no such file")
    if args.rules is not None and args.rules not in PROBE_RULES:
        ap.error(f"--rules {args.rules}: choose from {', '.join(sorted(PROBE_RULES))}")
    result = probe(
        args.task,
        args.data,
        args.model,
        args.prompts,
        args.samples,
        args.temperature,
        args.max_new_tokens,
        args.seed,
        args.backend,
        args.save_samples,
    )
    if args.rules:
        result["rules"] = {"name": args.rules, **check_rules(result, PROBE_RULES[args.rules])}
    print(format_table(result))
    if args.out:
        write(result, args.out)
    return 0


COMMANDS = {
    "probe": probe_command,
    "coldstart": coldstart_command,
    "heldout": heldout_command,
    "run": run_command,
    "localize": localize_command,
    "report": report_command,
    "readme": readme_command,
}


if __name__ == "__main__":
    sys.exit(main())
