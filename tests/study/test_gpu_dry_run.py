"""The committed GPU study config prints, per (arm, seed), the paper-scale command that upstream's parser accepts."""

import importlib.util
import shlex
import sys
from pathlib import Path

from mrtpo_openrlhf.study.__main__ import main

if importlib.util.find_spec("flash_attn") is None:  # upstream's parser module imports it at the top
    from mrtpo_openrlhf.cpu import flash_attn_stub

    flash_attn_stub.install()

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "adapter"))
from test_args import parse_upstream  # noqa: E402


def test_gpu_study_dry_run_prints_15_parseable_commands(tmp_path, capsys, monkeypatch):
    assert main(["run", str(REPO / "examples/study/sql_qwen3b_gpu.toml"), "--dry-run", "--out", str(tmp_path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if " -m mrtpo_openrlhf.cli.train_ppo_ray " in ln]
    assert len(lines) == 15
    seen = set()
    for line in lines:
        args = vars(parse_upstream(shlex.split(line)[3:], monkeypatch))  # [python, -m, module, flags...]
        seen.add((args["algo.advantage.estimator"], args["algo.mrtpo.placement"], args["train.seed"]))
        assert args["actor.model_name_or_path"] == "Qwen/Qwen2.5-Coder-3B-Instruct"
        assert args["data.max_samples"] == 100 * 64 and args["rollout.n_samples_per_prompt"] == 8
    expected = {
        (e, p, s)
        for s in (1, 2, 3)
        for e, p in [
            ("group_norm", "mrtpo"),
            ("gdpo", "mrtpo"),
            ("mrtpo", "mrtpo"),
            ("mrtpo", "shuffle"),
            ("mrtpo", "joint"),
        ]
    }
    assert seen == expected
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_arms_and_seeds_select_runs(tmp_path, capsys, monkeypatch):
    config = str(REPO / "examples/study/sql_qwen3b_gpu.toml")
    assert main(["run", config, "--dry-run", "--out", str(tmp_path), "--arms", "mrtpo-joint", "--seeds", "2"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if " -m mrtpo_openrlhf.cli.train_ppo_ray " in ln]
    assert len(lines) == 1
    args = vars(parse_upstream(shlex.split(lines[0])[3:], monkeypatch))
    assert (args["algo.mrtpo.placement"], args["train.seed"]) == ("joint", 2)
    try:
        main(["run", config, "--dry-run", "--out", str(tmp_path), "--seeds", "7"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--seeds 7 is not in the config and must be refused")
    assert "--seeds [7]" in capsys.readouterr().err
