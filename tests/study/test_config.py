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


@pytest.mark.parametrize(
    "change, message",
    [
        ({"arms": ["ppo"]}, "arms"),
        ({"seeds": []}, "seeds"),
        ({"backend": "tpu"}, "backend"),
        ({"samples_per_prompt": 1}, "samples_per_prompt"),
        ({"stepz": 3}, "unknown key"),
        ({"name": "a/b"}, "name"),
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
