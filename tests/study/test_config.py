"""Study configs: the committed ones load; bad ones stop with a message naming the key."""

from pathlib import Path

import pytest

from mrtpo_openrlhf.study.config import ARMS, ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[2]
BASE = dict(name="s", task="instruction", data="x.jsonl", arms=["gdpo", "mrtpo"], seeds=[1, 2], steps=3)


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "study").glob("*.toml")))
def test_committed_configs_load(path):
    cfg = load_config(path)
    assert set(cfg.arms) <= set(ARMS) and cfg.steps >= 1
    assert cfg.data_path().is_file() or cfg.backend == "gpu"


def test_runs_are_seed_major():
    cfg = parse_config(BASE)
    assert cfg.runs() == [("gdpo", 1), ("mrtpo", 1), ("gdpo", 2), ("mrtpo", 2)]


def test_random_arm_order_is_drawn_from_the_seed_alone():
    arms = ["gdpo", "mrtpo", "grpo", "mrtpo-shuffle"]

    def order(seeds):
        return parse_config({**BASE, "arms": arms, "seeds": seeds, "arm_order": "random"}).runs()

    runs = order([1, 2])
    assert [s for _, s in runs] == [1] * 4 + [2] * 4  # still seed-major, every arm once per seed
    assert sorted(a for a, s in runs if s == 1) == sorted(arms)
    assert order([1, 2]) == runs
    assert [a for a, s in runs if s == 2] == [a for a, _ in order([2])]  # the other seeds do not matter
    assert len({tuple(a for a, _ in order([k])) for k in range(8)}) > 1, "the order must depend on the seed"


def test_arm_seeds_restrict_an_arm():
    cfg = parse_config({**BASE, "seeds": [1, 2, 3], "arm_seeds": {"mrtpo": [1]}})
    assert cfg.runs() == [("gdpo", 1), ("mrtpo", 1), ("gdpo", 2), ("gdpo", 3)]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"arms": ["ppo"]}, "arms"),
        ({"seeds": []}, "seeds"),
        ({"backend": "tpu"}, "backend"),
        ({"samples_per_prompt": 1}, "samples_per_prompt"),
        ({"stepz": 3}, "unknown key"),
        ({"name": "a/b"}, "name"),
        ({"prompt_draw": "all"}, "prompt_draw"),
        ({"arm_order": "sorted"}, "arm_order"),
        ({"arm_seeds": {"grpo": [1]}}, "not in arms"),
        ({"arm_seeds": {"gdpo": [3]}}, "subset of seeds"),
        ({"heldout": "nope.jsonl"}, "heldout"),
        ({"heldout_samples": 0}, "heldout_samples"),
        ({"primary_endpoint": "median"}, "primary_endpoint"),
        ({"comparisons": ["mrtpo:grpo"]}, "comparisons"),
        ({"comparisons": ["mrtpo"]}, "comparisons"),
        ({"comparison_seeds": {"mrtpo:gdpo": [1]}}, "not in comparisons"),
        ({"comparisons": ["mrtpo:gdpo"], "comparison_seeds": {"mrtpo:gdpo": [3]}}, "among the seeds planned"),
        ({"comparisons": ["mrtpo:gdpo"], "comparison_seeds": {"mrtpo:gdpo": []}}, "non-empty"),
        (
            {"comparisons": ["mrtpo:gdpo"], "arm_seeds": {"gdpo": [2]}, "comparison_seeds": {"mrtpo:gdpo": [1, 2]}},
            "among the seeds planned for both arms \\[2\\]",
        ),
    ],
)
def test_bad_configs_name_the_problem(change, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, **change})


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[study\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    missing = tmp_path / "m.toml"
    missing.write_text('[study]\nname = "x"\n')
    with pytest.raises(ConfigError, match="missing key"):
        load_config(missing)


def test_a_run_is_a_placement_over_a_measure():
    """The measures' arms: the default placement over loggap / js-contrast; the placement arms stay on the default
    measure (their flags, and so the committed studies' commands, unchanged)."""
    from mrtpo_openrlhf.study.config import Arm, measure_arms
    from mrtpo_openrlhf.study.runner import cpu_flags, gpu_command

    assert ARMS["mrtpo-loggap"] == Arm("mrtpo", "mrtpo", "loggap")
    assert ARMS["mrtpo-contrast"] == Arm("mrtpo", "mrtpo", "js-contrast")
    assert measure_arms() == ["mrtpo-loggap", "mrtpo-contrast"]
    assert ARMS["mrtpo-loggap"].flags() == ["--algo.mrtpo.placement", "mrtpo", "--algo.mrtpo.relevance", "loggap"]
    assert ARMS["mrtpo-shuffle"].flags() == ["--algo.mrtpo.placement", "shuffle"]
    assert ARMS["mrtpo"].flags() == ["--algo.mrtpo.placement", "mrtpo"] and ARMS["gdpo"].flags() == []
    cfg = parse_config(
        {"name": "s", "task": "sql", "data": "x.jsonl", "arms": ["mrtpo-contrast"], "seeds": [1], "steps": 2}
    )
    flags = cpu_flags(cfg, "mrtpo-contrast", 1, Path("out"), Path("model"))
    assert flags[flags.index("--algo.mrtpo.relevance") + 1] == "js-contrast"
    command, env = gpu_command(cfg, "mrtpo-contrast", 1, Path("out"))
    assert env["RELEVANCE"] == "js-contrast" and command[command.index("--algo.mrtpo.relevance") + 1] == "js-contrast"
    assert "RELEVANCE" not in gpu_command(cfg, "mrtpo", 1, Path("out"))[1]
