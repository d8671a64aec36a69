"""The study's run side: per-seed prompt draws, held-out summaries, provenance."""

import json
import subprocess

import pytest

from mrtpo_openrlhf.provenance import provenance, training_path_hash
from mrtpo_openrlhf.study.config import parse_config
from mrtpo_openrlhf.study.heldout import summarize
from mrtpo_openrlhf.study.runner import seed_prompts


def _pool(tmp_path, n=30):
    path = tmp_path / "pool.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q{i}", "label": "{}"}) + "\n" for i in range(n)))
    return path


def _cfg(pool, **kw):
    return parse_config(
        dict(name="s", task="tool", data=str(pool), arms=["gdpo"], seeds=[1, 2], steps=3, prompts_per_step=2, **kw)
    )


def test_per_seed_draws_are_distinct_rows_fixed_by_the_seed(tmp_path):
    pool = _pool(tmp_path)
    cfg = _cfg(pool, prompt_draw="per_seed")
    root, results = tmp_path / "study", tmp_path / "results"
    a = seed_prompts(cfg, root, 1, results).read_text().splitlines()
    record = json.loads((results / "prompts" / "seed1.json").read_text())
    assert len(a) == 6 and len(set(a)) == 6
    assert [json.loads(line)["id"] for line in a] == record["ids"] == [f"p{i}" for i in record["indices"]]
    assert seed_prompts(cfg, tmp_path / "other", 1).read_text().splitlines() == a  # another sitting, same draw
    b = seed_prompts(cfg, root, 2).read_text().splitlines()
    assert b != a
    assert record["pool_rows"] == 30


def test_first_draw_is_the_data_itself_and_too_small_a_pool_is_refused(tmp_path):
    pool = _pool(tmp_path, n=5)
    assert seed_prompts(_cfg(pool), tmp_path / "s", 1) == pool
    with pytest.raises(ValueError, match="5 rows, a run needs 6"):
        seed_prompts(_cfg(pool, prompt_draw="per_seed"), tmp_path / "s", 1)


def test_heldout_summary_matches_a_hand_computation():
    per_response = [
        (0, ["format", "correctness"], [1.0, 0.0]),
        (0, ["format", "correctness"], [1.0, 1.0]),
        (1, ["format", "correctness"], [0.0, 0.0]),
        (1, ["format", "correctness"], [1.0, 0.0]),
    ]
    out = summarize(per_response, 3, [10, 32, 5, 32], cap=32)
    assert out["rewards"] == {"correctness": 0.25, "format": 0.75}
    assert out["total"] == pytest.approx((1 + 2 + 0 + 1) / 4)
    assert out["per_prompt_total"] == [1.5, 0.5, None]  # prompt 2 drew nothing
    assert out["truncated_frac"] == 0.5 and out["mean_response_tokens"] == pytest.approx(19.75)


def test_training_path_hash_ignores_the_study_and_sees_the_rest():
    listing = "100644 blob aaa\tmrtpo_openrlhf/core/gdpo.py\n100644 blob bbb\tmrtpo_openrlhf/study/report.py\n"
    report_changed = listing.replace("bbb", "ccc")
    core_changed = listing.replace("aaa", "ddd")
    assert training_path_hash(listing) == training_path_hash(report_changed)
    assert training_path_hash(listing) != training_path_hash(core_changed)


def test_provenance_names_this_checkout():
    info = provenance()
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert info["commit"] == head
    assert isinstance(info["dirty"], bool) and len(info["training_path"]) == 12
    assert info["cpu_capability"] and info["cpu_model"] and len(info["loadavg"]) == 3


def test_probe_correlations_match_numpy():
    import numpy as np

    from mrtpo_openrlhf.study.probe import correlations

    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, 50).astype(float)
    b = np.where(rng.random(50) < 0.7, a, 1 - a)
    t = rng.integers(0, 2, 50).astype(float)
    rows = [{"format": x, "function": y, "truncated": z} for x, y, z in zip(a, b, t)]
    rows[0]["only_here"] = 1.0  # in one row: fewer than 3 responses have it with anything, r undefined
    c = rng.integers(0, 2, 30).astype(float)
    for row, z in zip(rows[20:], c):  # a reward drawn for some prompts only: r over the responses that have it
        row["sometimes"] = z
    out = correlations(rows)
    assert out["format~function"] == pytest.approx(np.corrcoef(a, b)[0, 1])
    assert out["function~truncated"] == pytest.approx(np.corrcoef(b, t)[0, 1])
    assert out["format~sometimes"] == pytest.approx(np.corrcoef(a[20:], c)[0, 1])
    assert out["format~only_here"] is None and "only_here~sometimes" not in out  # never together
    assert correlations([{"x": 1.0, "y": 0.0}, {"x": 1.0, "y": 1.0}]) == {"x~y": None}  # constant: undefined


def test_instruction_level_and_prompt_level_by_hand():
    per_response = [
        (0, ["a", "b", "c"], [1.0, 0.0, 1.0]),  # 2/3 met
        (0, ["a", "b", "c"], [1.0, 1.0, 1.0]),  # all met
        (1, ["d", "e"], [0.0, 1.0]),  # 1/2
        (1, ["d", "e"], [1.0, 1.0]),  # all met
    ]
    out = summarize(per_response, 2, [5, 5, 5, 5], cap=32)
    assert out["instruction_level"] == pytest.approx((2 / 3 + 1 + 0.5 + 1) / 4)
    assert out["prompt_level"] == 0.5
    assert out["per_prompt_instruction_level"] == pytest.approx([(2 / 3 + 1) / 2, 0.75])
    assert out["names_by_prompt"] == [["a", "b", "c"], ["d", "e"]]
    assert out["per_response"][2] == [1, [0.0, 1.0]]


def test_probe_rules_judge_what_was_measured():
    from mrtpo_openrlhf.study.probe import PROBE_RULES, check_rules, group_stats

    # 3 groups of 2 responses; names differ by prompt as in instruction following
    groups = [
        [(["a", "b", "s"], [1.0, 0.0, 1.0]), (["a", "b", "s"], [0.0, 1.0, 1.0])],  # a, b vary
        [(["a", "s"], [1.0, 1.0]), (["a", "s"], [0.0, 0.0])],  # a and s vary, s saturated overall
        [(["b", "s"], [1.0, 1.0]), (["b", "s"], [1.0, 1.0])],  # nothing varies
    ]
    result = group_stats(groups)
    assert result["varying_by_group"] == [["a", "b"], ["a", "s"], []]
    result["setup"] = {"truncated_frac": 0.05}
    result["correlations"] = {"a~length": 0.2, "b~length": -0.7, "length~truncated": 0.9}
    rules = dict(PROBE_RULES["if-multi"], min_moving=2, saturated=0.8)
    judged = check_rules(result, rules)
    moving, multi, truncated, proxy = judged["checks"]
    assert moving["value"] == ["a", "b"] and moving["passed"]  # a 0.5, b 0.75 in the window; s 5/6 above it
    assert multi["value"] == pytest.approx(1 / 3) and not multi["passed"]  # group 2's s does not count
    assert truncated["passed"]
    assert proxy["value"] == {"pair": "b~length", "r": -0.7} and not proxy["passed"]  # truncation~length ignored
    assert not judged["passed"]


def test_a_seed_starts_only_when_all_its_runs_fit_before_until(tmp_path, monkeypatch):
    from mrtpo_openrlhf.study import runner

    cfg = parse_config(
        dict(name="s", task="tool", data=str(_pool(tmp_path)), arms=["gdpo", "mrtpo"], seeds=[1, 2, 3], steps=3,
             prompts_per_step=2, backend="gpu")
    )  # fmt: skip
    clock = {"now": 1000.0}
    ran = []

    def fake_run(cfg, arm, seed, out, *args, **kwargs):  # each run takes 10 minutes of the fake clock
        clock["now"] += 600
        out.mkdir(parents=True, exist_ok=True)
        (out / runner.RESULT).write_text(json.dumps({"seconds": 600}))
        ran.append((arm, seed))
        return True

    monkeypatch.setattr(runner, "_run_one", fake_run)
    monkeypatch.setattr(runner.time, "time", lambda: clock["now"])
    said = []
    # 45 minutes: seed 1 (two runs, 20 min) and seed 2 (20 min) fit, seed 3 would end at 60 min
    runner.run_study(cfg, tmp_path / "study", until=1000.0 + 45 * 60, run_minutes=10, say=said.append)
    assert ran == [("gdpo", 1), ("mrtpo", 1), ("gdpo", 2), ("mrtpo", 2)]
    assert any("seed 3: 2 runs" in line and "not started" in line for line in said)
    assert "4 ran, 0 failed, 2 not started" in said[-1]  # not "6 ran" (the runs left out by --until)
    with pytest.raises(ValueError, match="--run-minutes"):  # no estimate yet and none given
        runner.run_study(cfg, tmp_path / "other", until=clock["now"] + 3600, say=said.append)
