"""The argument hook: new flags parsed, upstream flags and validation intact, bad combinations rejected."""

import argparse
import runpy
from types import SimpleNamespace

import pytest

from mrtpo_openrlhf.adapter.args import ParserHook, validate

BASE = ["--actor.model_name_or_path", "m", "--rollout.n_samples_per_prompt", "4", "--reward.remote_url", "r.py"]


class _Parsed(Exception):
    def __init__(self, args):
        super().__init__("parsed")
        self.parsed = args


def parse_upstream(argv, monkeypatch):
    """Run upstream's own CLI module up to its parse_args (inside our hook), then stop."""
    monkeypatch.setattr("sys.argv", ["train_ppo_ray", *argv])
    with ParserHook():
        hooked = argparse.ArgumentParser.parse_args

        def capture(parser, args=None, namespace=None):
            raise _Parsed(hooked(parser, args, namespace))

        monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
        try:
            with pytest.raises(_Parsed) as info:
                runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
        finally:  # also on SystemExit: else the hooked parse_args outlives the hook and stacks up
            monkeypatch.undo()
    return info.value.parsed


def test_new_flags_and_estimators_parse(monkeypatch):
    args = parse_upstream(
        BASE
        + [
            "--algo.advantage.estimator",
            "mrtpo",
            "--algo.mrtpo.beta",
            "0.25",
            "--algo.mrtpo.cap",
            "2",
            "--algo.mrtpo.placement",
            "shuffle",
            "--algo.kl.use_loss",
        ],
        monkeypatch,
    )
    d = vars(args)
    assert d["algo.advantage.estimator"] == "mrtpo"
    assert d["algo.mrtpo.beta"] == 0.25 and d["algo.mrtpo.cap"] == 2.0 and d["algo.mrtpo.placement"] == "shuffle"
    assert d["algo.mrtpo.warmup_steps"] == 10
    # upstream flags are still there with their defaults
    assert d["algo.kl.use_loss"] is True and d["actor.model_name_or_path"] == "m"
    assert d["rollout.n_samples_per_prompt"] == 4
    assert (
        parse_upstream(BASE + ["--algo.advantage.estimator", "gdpo"], monkeypatch).__dict__["algo.advantage.estimator"]
        == "gdpo"
    )
    assert (
        parse_upstream(BASE + ["--algo.advantage.estimator", "group_norm"], monkeypatch).__dict__[
            "algo.advantage.estimator"
        ]
        == "group_norm"
    )


def test_upstream_choices_still_validated(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        parse_upstream(BASE + ["--algo.advantage.estimator", "nonsense"], monkeypatch)
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--rollout.n_samples_per_prompt", "1"], "n_samples_per_prompt must be >= 2"),
        (["--train.async_enable"], "synchronous trainer"),
        (["--ds.ring_attn_size", "2"], "ring attention"),
        (["--ds.tensor_parallel_size", "2"], "tensor parallel"),
        (["--algo.mrtpo.beta", "1.5"], "beta must be in [0, 1]"),
        (["--algo.mrtpo.cap", "0.5"], "cap must be >= 1"),
    ],
)
def test_bad_combinations_rejected_with_clear_message(monkeypatch, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        parse_upstream(BASE + ["--algo.advantage.estimator", "mrtpo"] + extra, monkeypatch)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_relevance_is_an_mrtpo_flag():
    ns = argparse.Namespace(
        **{"algo.advantage.estimator": "gdpo", "rollout.n_samples_per_prompt": 4, "reward.remote_url": "r.py"},
        **{"algo.mrtpo.relevance": "loggap"},
    )
    with pytest.raises(ValueError, match="--algo.mrtpo.relevance applies to --algo.advantage.estimator mrtpo only"):
        validate(ns)


def test_validate_without_parser_raises_value_error():
    ns = argparse.Namespace(**{"algo.advantage.estimator": "gdpo", "rollout.n_samples_per_prompt": 1})
    with pytest.raises(ValueError, match="n_samples_per_prompt"):
        validate(ns)
    validate(argparse.Namespace(**{"algo.advantage.estimator": "gae"}))  # other estimators untouched


def test_hook_restores_parse_args():
    original = argparse.ArgumentParser.parse_args
    with ParserHook():
        assert argparse.ArgumentParser.parse_args is not original
    assert argparse.ArgumentParser.parse_args is original


def test_cap_is_on_by_default_and_none_switches_it_off(monkeypatch):
    """Issue 10 item 6: the cap is part of the method, on by default; --algo.mrtpo.cap none turns it off."""
    from mrtpo_openrlhf.core import DEFAULT_CAP

    mrtpo = BASE + ["--algo.advantage.estimator", "mrtpo"]
    assert DEFAULT_CAP is not None and DEFAULT_CAP >= 1
    assert vars(parse_upstream(mrtpo, monkeypatch))["algo.mrtpo.cap"] == DEFAULT_CAP
    assert vars(parse_upstream(mrtpo + ["--algo.mrtpo.cap", "none"], monkeypatch))["algo.mrtpo.cap"] is None
    assert vars(parse_upstream(mrtpo + ["--algo.mrtpo.cap", "1.5"], monkeypatch))["algo.mrtpo.cap"] == 1.5


def test_defaults_and_choices_come_from_the_core(monkeypatch):
    """Issue 13: each default is written once, in core/settings.py; the placement choices are core's modes."""
    from mrtpo_openrlhf.core import ADVANTAGE_ESTIMATORS, PLACEMENTS, settings

    d = vars(parse_upstream(BASE + ["--algo.advantage.estimator", "mrtpo"], monkeypatch))
    assert d["algo.mrtpo.beta"] == settings.DEFAULT_BETA
    assert d["algo.mrtpo.warmup_steps"] == settings.DEFAULT_WARMUP_STEPS
    assert d["algo.mrtpo.eps"] == settings.DEFAULT_EPS and d["algo.mrtpo.chunk_size"] == settings.DEFAULT_CHUNK_SIZE
    assert d["algo.mrtpo.block_separator"] == settings.DEFAULT_BLOCK_SEPARATOR
    assert d["algo.mrtpo.replay_micro_batch_size"] == settings.DEFAULT_REPLAY_MICRO_BATCH_SIZE
    assert d["algo.mrtpo.placement"] == settings.DEFAULT_PLACEMENT in PLACEMENTS
    assert d["algo.mrtpo.js_kernel"] == settings.DEFAULT_JS_KERNEL in settings.JS_KERNELS
    assert d["algo.mrtpo.replay_logits"] == settings.DEFAULT_REPLAY_LOGITS in settings.REPLAY_LOGITS
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo.advantage.estimator", choices=["gae", "group_norm"])
    from mrtpo_openrlhf.adapter.args import extend_parser

    extend_parser(parser)
    by_dest = {a.dest: a for a in parser._actions}
    assert list(by_dest["algo.mrtpo.placement"].choices) == ["mrtpo", "uniform", "shuffle", "joint"] == list(PLACEMENTS)
    for mode, entry in PLACEMENTS.items():  # each mode's help text is in the flag's help
        assert f"{mode}: {entry.help}" in by_dest["algo.mrtpo.placement"].help
    assert list(by_dest["algo.mrtpo.js_kernel"].choices) == list(settings.JS_KERNELS)
    from mrtpo_openrlhf.core import RELEVANCE

    assert list(by_dest["algo.mrtpo.relevance"].choices) == ["js", "loggap", "js-contrast"] == list(RELEVANCE)
    assert d["algo.mrtpo.relevance"] == settings.DEFAULT_RELEVANCE == "js"
    for name, entry in RELEVANCE.items():
        assert f"{name}: {entry.help}" in by_dest["algo.mrtpo.relevance"].help
    assert set(ADVANTAGE_ESTIMATORS) <= set(by_dest["algo.advantage.estimator"].choices)


@pytest.mark.parametrize(
    "estimator, extra, warned",
    [
        ("gdpo", ["--algo.mrtpo.beta", "0.3", "--algo.mrtpo.cap=2"], ["--algo.mrtpo.beta", "--algo.mrtpo.cap"]),
        ("gdpo", ["--algo.mrtpo.eps", "1e-3", "--algo.mrtpo.reward_weighting", "saw"], []),  # gdpo reads these
        (
            "group_norm",
            ["--algo.mrtpo.eps", "1e-3", "--algo.mrtpo.warmup", "3"],
            ["--algo.mrtpo.eps", "--algo.mrtpo.warmup_steps"],
        ),  # an abbreviated flag counts too
        ("group_norm", [], []),
        ("mrtpo", ["--algo.mrtpo.beta", "0.3", "--algo.mrtpo.chunk_size", "8"], []),
        ("mrtpo", ["--algo.mrtpo.js_kernel", "eager"], []),
        ("gdpo", ["--algo.mrtpo.js_kernel", "eager"], ["--algo.mrtpo.js_kernel"]),  # gdpo replays nothing
        ("mrtpo", ["--algo.mrtpo.replay_logits", "fp32"], []),
        ("gdpo", ["--algo.mrtpo.replay_logits", "fp32"], ["--algo.mrtpo.replay_logits"]),
    ],
)
def test_flags_without_effect_are_warned_about(monkeypatch, capsys, estimator, extra, warned):
    """Issue 13: under gdpo or an upstream estimator, an --algo.mrtpo.* flag the user gave that the estimator does
    not read is named in one warning line; defaults (flags not given) never warn."""
    argv = [
        "--actor.model_name_or_path",
        "m",
        "--rollout.n_samples_per_prompt",
        "4",
        "--reward.remote_url",
        "r.py",
        "--algo.advantage.estimator",
        estimator,
        *extra,
    ]
    parse_upstream(argv, monkeypatch)
    lines = [line for line in capsys.readouterr().err.splitlines() if "no effect" in line]
    if not warned:
        assert lines == []
        return
    assert len(lines) == 1
    flags = lines[0].split(" have no effect")[0].split(" has no effect")[0].split("warning: ")[1].split(", ")
    assert flags == warned
    assert f"--algo.advantage.estimator {estimator}" in lines[0]


def test_reward_weights_flag_parses_and_reaches_the_settings(monkeypatch):
    from mrtpo_openrlhf.core import MethodSettings

    args = parse_upstream(
        BASE + ["--algo.advantage.estimator", "gdpo", "--algo.mrtpo.reward_weights", "format=0.5,execution=2"],
        monkeypatch,
    )
    assert vars(args)["algo.mrtpo.reward_weights"] == (("format", 0.5), ("execution", 2.0))
    flat = SimpleNamespace(
        algo=SimpleNamespace(mrtpo=SimpleNamespace(reward_weights=(("format", 0.5),))),
        reward=SimpleNamespace(clip_range=None),
    )
    assert MethodSettings.from_args(flat).reward_weights == (("format", 0.5),)
    default = parse_upstream(BASE + ["--algo.advantage.estimator", "mrtpo"], monkeypatch)
    assert vars(default)["algo.mrtpo.reward_weights"] == ()


def test_bad_reward_weights_name_the_flag(monkeypatch, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_upstream(BASE + ["--algo.mrtpo.reward_weights", "format=-1"], monkeypatch)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--algo.mrtpo.reward_weights" in err and "format: weight must be a finite number >= 0" in err


def test_relevance_flag_parses_any_placement_over_any_measure(monkeypatch, capsys):
    mrtpo = ["--algo.advantage.estimator", "mrtpo", "--algo.kl.use_loss"]
    for placement in ("mrtpo", "joint"):
        for measure in ("loggap", "js-contrast"):
            extra = ["--algo.mrtpo.placement", placement, "--algo.mrtpo.relevance", measure]
            d = vars(parse_upstream(BASE + mrtpo + extra, monkeypatch))
            assert (d["algo.mrtpo.placement"], d["algo.mrtpo.relevance"]) == (placement, measure)
    with pytest.raises(SystemExit):
        parse_upstream(BASE + mrtpo + ["--algo.mrtpo.relevance", "kl"], monkeypatch)
    assert "invalid choice" in capsys.readouterr().err
