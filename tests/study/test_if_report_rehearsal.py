"""A rehearsal of the multi-constraint study's final report (issue 45) before its runs are in: the committed results
folder's own files, every missing run filled in from a committed one, every score replaced by made-up 0/1 values
(nothing real is read or shown), then ``study report --config`` as the plan will run it. The declared comparisons are
checked against a naive loop over the made-up files, and Holm against a hand adjustment."""

import json
import random
import shutil
from pathlib import Path

import pytest

from mrtpo_openrlhf.study.config import load_config
from mrtpo_openrlhf.study.report import write_report

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs/results/if-multi-smollm2-cpu"
CONFIG = ROOT / "examples/study/if_multi_smollm2_cpu.toml"
PASS_RATE = {"gdpo": 0.40, "mrtpo": 0.60, "mrtpo-loggap": 0.40, "mrtpo-contrast": 0.41}  # made up
FP32_SEEDS = (9, 10)  # a seed run in another dtype, as amendment 2 allows: the report must stratify, not mix
FP32_BASE = "f32f32f32f32" + "0" * 52


def _blind_heldout(h: dict, rng: random.Random, rate: float) -> dict:
    """The same prompts, names and response count, with each constraint met at ``rate``; every figure derived
    from the scores recomputed from the made-up ones."""
    per_response = [[i, [float(rng.random() < rate) for _ in values]] for i, values in h["per_response"]]
    by_name: dict[str, list[float]] = {}
    per_prompt: dict[int, list[list[float]]] = {}
    for i, values in per_response:
        per_prompt.setdefault(i, []).append(values)
        for name, v in zip(h["names_by_prompt"][i], values):
            by_name.setdefault(name, []).append(v)
    n = len(h["names_by_prompt"])
    inst = [sum(sum(v) / len(v) for v in per_prompt[i]) / len(per_prompt[i]) for i in range(n)]
    return {
        **h,
        "per_response": per_response,
        "rewards": {name: sum(v) / len(v) for name, v in by_name.items()},
        "per_prompt_total": [sum(sum(v) for v in per_prompt[i]) / len(per_prompt[i]) for i in range(n)],
        "total": sum(sum(v) for _, v in per_response) / len(per_response),
        "per_prompt_instruction_level": inst,
        "instruction_level": sum(inst) / n,
        "prompt_level": sum(float(all(x == 1.0 for x in v)) for _, v in per_response) / len(per_response),
        "mean_response_tokens": 100.0 + 50.0 * rng.random(),
        "truncated_frac": rng.random() / 10,
    }


def _blind_metrics(text: str, rng: random.Random) -> str:
    """Every logged figure of the curve made up but the step and the timings (what the step-cost section reads)."""
    rows = []
    for line in text.splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key != "step" and not key.startswith("timing/") and isinstance(value, (int, float)):
                row[key] = rng.random()
        rows.append(json.dumps(row))
    return "\n".join(rows) + "\n"


def _naive_instruction_level(h: dict) -> float:
    """The plan's primary endpoint by its definition: per prompt, the mean over its responses of the share of its
    constraints met; then the mean over prompts."""
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for i, values in h["per_response"]:
        sums[i] = sums.get(i, 0.0) + sum(values) / len(values)
        counts[i] = counts.get(i, 0) + 1
    return sum(sums[i] / counts[i] for i in sums) / len(sums)


def _naive_level_by_k(h: dict, low: int, high: int) -> float:
    """The instruction level over the held-out prompts carrying ``low``-``high`` constraints."""
    per_prompt: dict[int, list[float]] = {}
    for i, values in h["per_response"]:
        if low <= len(h["names_by_prompt"][i]) <= high:
            per_prompt.setdefault(i, []).append(sum(values) / len(values))
    return sum(sum(v) / len(v) for v in per_prompt.values()) / len(per_prompt)


def _holm(ps: list[float]) -> list[float]:
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    cfg = load_config(CONFIG)
    folder = tmp_path_factory.mktemp("if-rehearsal") / "if-multi-smollm2-cpu"
    folder.mkdir()
    for name in ("study.json", "machines.jsonl"):
        shutil.copy(RESULTS / name, folder / name)
    for name in ("prompts", "localization"):
        if (RESULTS / name).is_dir():
            shutil.copytree(RESULTS / name, folder / name)
    template = next(d for d in sorted((RESULTS / "runs").glob("*/seed*")) if (d / "heldout.json").is_file())
    levels: dict[tuple, float] = {}
    for arm in cfg.arms:
        for seed in cfg.seeds:
            source = RESULTS / "runs" / arm / f"seed{seed}"
            run = folder / "runs" / arm / f"seed{seed}"
            shutil.copytree(source if (source / "heldout.json").is_file() else template, run)
            config = {**json.loads((run / "config.json").read_text()), "arm": arm, "seed": seed}
            if seed in FP32_SEEDS:  # another dtype starts from other base weights (plan: "base weights by dtype")
                config["base_model"] = {"path": "SmolLM2-135M-Instruct-fp32", "weights_sha256": FP32_BASE}
            (run / "config.json").write_text(json.dumps(config))
            if seed in FP32_SEEDS:
                meta = json.loads((run / "run.json").read_text())
                (run / "run.json").write_text(json.dumps({**meta, "cpu_dtype": "fp32"}))
            rng = random.Random(f"{arm}/{seed}")
            h = _blind_heldout(json.loads((run / "heldout.json").read_text()), rng, PASS_RATE[arm])
            (run / "heldout.json").write_text(json.dumps(h))
            (run / "metrics.jsonl").write_text(_blind_metrics((run / "metrics.jsonl").read_text(), rng))
            levels[arm, seed] = _naive_instruction_level(h)
            levels[arm, seed, "K 5-6"] = _naive_level_by_k(h, 5, 6)
    out = folder / "report"
    write_report(folder, out, config_file=CONFIG)
    return cfg, levels, out / "summary.json", (out / "report.md").read_text()


@pytest.mark.slow
def test_the_report_pairs_all_forty_runs_by_seed_as_the_plan_declares(rehearsal):
    cfg, levels, summary_file, _ = rehearsal
    summary = json.loads(summary_file.read_text())
    assert summary["planned_runs"] == 40 and summary["missing_runs"] == [] and summary["excluded"] == {}
    assert summary["primary_endpoint"] == "held-out instruction-level pass rate"
    assert set(summary["declared"]) == {"mrtpo - gdpo", "mrtpo-loggap - gdpo", "mrtpo-contrast - gdpo"}
    for arm in ("mrtpo", "mrtpo-loggap", "mrtpo-contrast"):
        got = summary["declared"][f"{arm} - gdpo"]
        want = sum(levels[arm, s] - levels["gdpo", s] for s in cfg.seeds) / len(cfg.seeds)
        assert got["n"] == 10 and got["mean"] == pytest.approx(want, abs=1e-12)
    raw = [summary["declared"][f"{a} - gdpo"]["p_signflip"] for a in ("mrtpo", "mrtpo-loggap", "mrtpo-contrast")]
    adjusted = [summary["declared"][f"{a} - gdpo"]["p_holm"] for a in ("mrtpo", "mrtpo-loggap", "mrtpo-contrast")]
    assert adjusted == pytest.approx(_holm(raw))
    # +0.20 on every constraint in each of 10 seeds: every sign agrees, p = 2/1024 before Holm's factor of 3
    assert summary["declared"]["mrtpo - gdpo"]["verdict"] == "A > B"
    assert raw[0] == pytest.approx(2 / 1024)


@pytest.mark.slow
def test_the_report_has_every_section_the_plan_names(rehearsal):
    cfg, levels, summary_file, text = rehearsal
    summary = json.loads(summary_file.read_text())
    for heading in (
        "held-out prompt-level pass rate",
        "unseen constraint types",
        "by constraints per held-out prompt",
        "K 3-4",
        "K 7-8",
        "fp32",
        "bf16",
    ):
        assert heading in text, heading
    # seeds in two dtypes: the per-arm tables have a row per base weights (plan, "Order and machines")
    for arm in ("gdpo", "mrtpo"):
        for base in (FP32_BASE, "1b35a3ca5f05"):
            rows = [line for line in text.splitlines() if line.startswith(f"| {arm} (base `{base[:12]}`) |")]
            assert len(rows) == 2, (arm, base)  # the training table's row and the held-out table's
    for measure in ("js", "loggap", "js-contrast"):
        assert f"relevance measure `{measure}`" in text.lower(), measure
    out = summary_file.parent
    for measure in ("loggap", "js-contrast"):  # each measure's localization travels with a report written elsewhere
        assert (out / "localization" / "base" / measure / "summary.json").is_file(), measure
    assert "incomplete" not in json.dumps(summary["declared"])
    claims = {c["claim"].split(".")[0]: c for c in summary["claims"]}
    # claim 1 for every measure the plan localizes, each by the plan's rule
    assert [c["claim"].split(".")[0] for c in summary["claims"][:3]] == ["1", "1-loggap", "1-js-contrast"]
    assert all(c["verdict"].startswith("by the plan's rule") for c in summary["claims"][:3])
    # claim 2 judged on the part the plan has (no GRPO arm here), and every declared comparison has its row
    assert claims["2"]["verdict"] == "held" and "GDPO-GRPO not in this study's plan" in claims["2"]["evidence"]
    for arm in ("mrtpo-loggap", "mrtpo-contrast"):
        declared = summary["declared"][f"{arm} - gdpo"]["verdict"]
        want = {"A > B": "held", "A < B": "contradicted", "no difference resolved": "not resolved"}[declared]
        assert claims[f"2-{arm}"]["verdict"] == want
    assert claims["3a"]["verdict"] == "not tested" and "not in this study's plan" in claims["3a"]["evidence"]
    # the paper's instruction-following readings: numbers, no verdict (secondary and exploratory in the plan)
    assert claims["6"]["verdict"] == "see numbers (secondary)" and "mrtpo-contrast-GDPO" in claims["6"]["evidence"]
    assert claims["7"]["verdict"] == "see numbers (exploratory)" and "K 7-8" in claims["7"]["evidence"]
    k56 = sum(levels["mrtpo", s, "K 5-6"] - levels["gdpo", s, "K 5-6"] for s in cfg.seeds) / len(cfg.seeds)
    assert "mrtpo-GDPO: K 3-4 " in claims["7"]["evidence"] and f"K 5-6 {k56:+.3f} [" in claims["7"]["evidence"]


@pytest.mark.slow
def test_the_readme_block_is_generated_from_the_rehearsed_summary(rehearsal, tmp_path):
    from mrtpo_openrlhf.study.report.readme import markers, sync_readme

    _, _, summary_file, _ = rehearsal
    begin, end = markers("if-multi-smollm2-cpu")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{begin}\n{end}\n")
    assert sync_readme(readme, summary_file.parent)
    block = readme.read_text()
    assert "**Status: all planned runs done.**" in block
    for arm in ("mrtpo", "mrtpo-loggap", "mrtpo-contrast"):
        assert f"| {arm} - gdpo | 10 of 10 |" in block, arm
    assert "| 7. The gain scales with the number of rewards per prompt" in block
    assert not sync_readme(readme, summary_file.parent, check=True)  # in sync once written
