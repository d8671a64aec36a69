"""The placement registry (``core/placements.py``): one entry per mode, read by the CLI, the study and the report.

A toy fifth mode (``reverse``: each reward's credit on the tokens its profile marks least) is added with one
``register_placement`` call and must reach the CLI's choices and help, the study's arms and config check, the
replay the experience maker asks for, the report's comparisons and localization table, and ``token_advantages``.
"""

import argparse
import json

import pytest
import torch

from mrtpo_openrlhf.core import estimators, placements
from mrtpo_openrlhf.core.placements import PER_REWARD, PLACEMENTS, register_placement
from mrtpo_openrlhf.core.weights import credit_weights, token_advantages

TOY, TOY_ARM = "reverse", "mrtpo-reverse"
TOY_HELP = "each reward's credit on the tokens its profile marks least"


@pytest.fixture
def toy_mode():
    """Register the toy mode for one test and remove it after (the registry is process-wide)."""
    before = dict(PLACEMENTS)

    @register_placement(TOY, PER_REWARD, TOY_HELP, arm=TOY_ARM)
    def reverse_weights(a, q, valid, beta, generator):
        w = credit_weights(q, valid.unsqueeze(1), beta)
        return torch.where(valid.unsqueeze(1), 2.0 - w, w)  # mean 1 kept: 2 - w mirrors w around 1

    yield reverse_weights
    PLACEMENTS.clear()
    PLACEMENTS.update(before)


def test_shipped_modes_and_what_they_declare():
    assert list(PLACEMENTS) == ["mrtpo", "uniform", "shuffle", "joint"]  # the CLI's order, the arms' order
    assert {m: p.replay for m, p in PLACEMENTS.items()} == {
        "mrtpo": "per_reward",
        "uniform": "none",
        "shuffle": "per_reward",
        "joint": "joint",
    }
    assert placements.placement_arms() == {"mrtpo": "mrtpo", "mrtpo-shuffle": "shuffle", "mrtpo-joint": "joint"}


def test_a_taken_name_or_arm_is_refused():
    with pytest.raises(ValueError, match="placement mode 'joint' is already registered"):
        register_placement("joint", PER_REWARD, "again", arm=None)
    with pytest.raises(ValueError, match="study arm 'mrtpo-joint' is already taken"):
        register_placement("joint2", PER_REWARD, "again", arm="mrtpo-joint")
    with pytest.raises(ValueError, match="replay 'sometimes'"):
        register_placement("odd", "sometimes", "no such replay", arm=None)
    assert "joint2" not in PLACEMENTS and "odd" not in PLACEMENTS


def test_register_estimator_refuses_a_taken_name():
    before = dict(estimators.ADVANTAGE_ESTIMATORS)
    with pytest.raises(ValueError, match="advantage estimator 'gdpo' is already registered"):
        estimators.register_estimator("gdpo", reads=set(), summary="a second gdpo")
    assert estimators.ADVANTAGE_ESTIMATORS == before


def test_toy_mode_reaches_token_advantages(toy_mode):
    adv = torch.tensor([[1.0, -2.0]])
    q = torch.tensor([[[0.0, 1.0, 3.0], [2.0, 2.0, 0.0]]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    beta = 0.5
    # by hand: reward 0, q/mean(q) = (0, 0.75, 2.25): w = (0.5, 0.875, 1.625), reversed 2 - w = (1.5, 1.125, 0.375);
    # reward 1, q/mean(q) = (1.5, 1.5, 0): w = (1.25, 1.25, 0.5), reversed (0.75, 0.75, 1.5)
    expected = torch.tensor([[1.5 * 1 + 0.75 * -2, 1.125 * 1 + 0.75 * -2, 0.375 * 1 + 1.5 * -2]])
    assert torch.allclose(token_advantages(adv, q, mask, beta, mode=TOY), expected)


def test_toy_mode_reaches_the_cli(toy_mode):
    from mrtpo_openrlhf.adapter.args import extend_parser

    parser = argparse.ArgumentParser()
    parser.add_argument("--algo.advantage.estimator", choices=["gae", "group_norm"])
    extend_parser(parser)
    action = next(a for a in parser._actions if a.dest == "algo.mrtpo.placement")
    assert list(action.choices) == ["mrtpo", "uniform", "shuffle", "joint", TOY]
    assert f"{TOY}: {TOY_HELP}" in action.help
    assert parser.parse_args(["--algo.mrtpo.placement", TOY]).__dict__["algo.mrtpo.placement"] == TOY


def test_toy_mode_reaches_the_study_and_the_step(toy_mode, tmp_path):
    from mrtpo_openrlhf.core import MethodSettings
    from mrtpo_openrlhf.study.config import ARMS, Arm, parse_config

    assert list(ARMS) == [
        "grpo", "gdpo", "mrtpo", "mrtpo-shuffle", "mrtpo-joint", TOY_ARM, "mrtpo-loggap", "mrtpo-contrast"
    ]  # fmt: skip
    assert ARMS[TOY_ARM] == Arm("mrtpo", TOY) and ARMS[TOY_ARM].flags() == ["--algo.mrtpo.placement", TOY]
    data = tmp_path / "rows.jsonl"
    data.write_text("{}\n")
    raw = {"name": "toy", "task": "sql", "data": str(data), "arms": ["gdpo", TOY_ARM], "seeds": [1], "steps": 2}
    assert parse_config(raw).arms == ["gdpo", TOY_ARM]
    step = estimators.ADVANTAGE_ESTIMATORS["mrtpo"].placement(MethodSettings(placement=TOY), 20)
    assert step.mode == TOY and step.replay == PER_REWARD and step.needs_relevance


def test_toy_mode_reaches_the_report(toy_mode, tmp_path, monkeypatch):
    from mrtpo_openrlhf.study import report
    from mrtpo_openrlhf.study.report import plan, runs
    from tests.study import test_report as fixtures

    assert plan.default_declared() == [
        ("mrtpo", "gdpo"),
        ("gdpo", "grpo"),
        ("mrtpo", "mrtpo-shuffle"),
        ("mrtpo", "mrtpo-joint"),
        ("mrtpo", TOY_ARM),
    ]
    assert ("mrtpo", TOY_ARM) in plan.exploratory_comparisons()
    assert (TOY_ARM, "gdpo") in plan.exploratory_comparisons()
    assert runs.replaying_arms() == [
        "mrtpo", "mrtpo-shuffle", "mrtpo-joint", TOY_ARM, "mrtpo-loggap", "mrtpo-contrast"
    ]  # fmt: skip

    monkeypatch.setitem(fixtures.SLOPES, TOY_ARM, 0.01)  # the toy arm learns slowest
    src = fixtures.make_study(tmp_path / "study", arms=["grpo", "gdpo", "mrtpo", TOY_ARM])
    text = report.write_report(src, tmp_path / "out").read_text()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "mrtpo - mrtpo-reverse" in summary["declared"]
    # summed-reward AUC: format (0.10 - 0.01) * mean(1..6) = 0.315 higher for mrtpo, correct identical
    assert summary["declared"]["mrtpo - mrtpo-reverse"]["mean"] == pytest.approx(0.315, abs=0.01)
    assert f"| {TOY_ARM} | format | 30.0% |" in text  # the localization table (fixture: 0.3 of the tokens)
