"""Adding a task is one reward module plus one registry entry (docs/tasks.md): a toy task, registered after every
consumer was imported, must reach the launcher, the reward path, the diagnostics, the study and the benchmarks.
A consumer that keeps its own task table does not know "toy" and fails here."""

import http.client
import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest

from mrtpo_openrlhf import tasks
from mrtpo_openrlhf.cli import default as cli_default
from mrtpo_openrlhf.cli import reward_server as reward_server_cli
from mrtpo_openrlhf.data.jsonl import read_jsonl, write_jsonl
from mrtpo_openrlhf.diagnostics import cli as diagnose_cli
from mrtpo_openrlhf.diagnostics import runner as diagnose_runner
from mrtpo_openrlhf.diagnostics.spans import locate_spans, tag_spans
from mrtpo_openrlhf.launch import default as launch_default
from mrtpo_openrlhf.rewards import server as reward_server
from mrtpo_openrlhf.study.config import ConfigError, parse_config
from mrtpo_openrlhf.study.runner import gpu_command

REPO = Path(__file__).resolve().parents[2]

# The task's one new module: a reward_func (two rewards), a prompt builder and example responses.
TOY_MODULE = """
from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, label_object, make_reward_func

FORMAT_BLOCK = "Put the answer inside <answer></answer>."


def score(query, prompt, label):
    answer = label_object(label)["answer"]
    response = query[len(prompt):]
    matched = float(f"<answer>{answer}</answer>" in response)
    return RewardVector([RewardItem("format", float("<answer>" in response), FORMAT_BLOCK, inline=True),
                         RewardItem("match", matched, f"The answer is {answer}.")], primary="match")


reward_func = make_reward_func(score, lambda _label: ("format", "match"))


def build_prompt(question):
    return f"{question}\\n\\n{FORMAT_BLOCK}"


def example_responses(row):
    return ["<answer>" + label_object(row["label"])["answer"] + "</answer>", "no idea"]
"""
QUESTIONS = {"What is 2 + 2?": "4", "What is 3 + 4?": "7"}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """Write the toy module and its data, register it, and take it out of the registry afterwards."""
    module_dir = tmp_path / "pkg"
    module_dir.mkdir()
    (module_dir / "toy_reward_task.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(module_dir))
    data = tmp_path / "toy_train.jsonl"
    write_jsonl(
        data,
        [
            {"prompt": f"{q}\n\nPut the answer inside <answer></answer>.", "label": {"answer": a}}
            for q, a in QUESTIONS.items()
        ],
    )
    task = tasks.register(
        tasks.Task(
            name="toy",
            reward_module="toy_reward_task",
            train_data=str(data),
            label_keys=("answer",),
            cpu_max_new_tokens=7,
            prompt_builder="build_prompt",
            span_kinds=("tags",),
            format_tags=(r"</?answer>",),
            example_responses="example_responses",
        )
    )
    try:
        yield task
    finally:
        tasks.unregister("toy")


def flag(args, name):
    return args[args.index(name) + 1]


def test_launcher_args(toy, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    args = launch_default.mrtpo_cpu_args("toy", "mrtpo", model, tmp_path / "out", 2, 2, 4, None, 0.5, 1)
    assert flag(args, "--reward.remote_url") == str(tmp_path / "pkg" / "toy_reward_task.py")  # the module's file
    assert flag(args, "--data.prompt_dataset") == str(tmp_path / "toy_train.jsonl")
    assert flag(args, "--rollout.max_new_tokens") == "7"
    # the command line accepts --task toy and prints the same flags
    assert cli_default.main(["--task", "toy", "--model", str(model), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "train_ppo_ray" in ln)
    printed = shlex.split(line.split("train_ppo_ray", 1)[1])
    assert flag(printed, "--reward.remote_url") == str(tmp_path / "pkg" / "toy_reward_task.py")
    assert flag(printed, "--rollout.max_new_tokens") == "7"


def test_reward_path_loads_like_openrlhf_and_serves(toy):
    prompt = "What is 2 + 2?\n\nPut the answer inside <answer></answer>."
    out = tasks.get_reward_func("toy")([prompt + "<answer>4</answer>"], [prompt], [{"answer": "4"}])
    assert out["extra_logs"]["mrtpo_reward_values"] == [1.0, 1.0]
    # OpenRLHF loads --reward.remote_url by path
    spec = importlib.util.spec_from_file_location("reward_func", toy.reward_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert float(module.reward_func([prompt + "<answer>5</answer>"], [prompt], [{"answer": "4"}])["scores"][0]) == 0
    # the reward server serves it
    srv, thread = reward_server.start_in_thread("toy", port=0, workers=1)
    try:
        conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=10)
        body = {"query": [prompt + "<answer>4</answer>"], "prompts": [prompt], "labels": [{"answer": "4"}]}
        conn.request("POST", "/get_reward", json.dumps(body).encode(), {"Content-Type": "application/json"})
        reply = json.loads(conn.getresponse().read())
        conn.close()
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
    assert reply["rewards"] == [2.0]
    with pytest.raises(SystemExit) as stop:  # --task choices come from the registry: "toy" parses, the help exits 0
        reward_server_cli.main(["serve", "--task", "toy", "--help"])
    assert stop.value.code == 0  # an unknown --task exits 2 before reaching --help


def test_diagnostics(toy, tmp_path):
    assert diagnose_runner.resolve_data("toy", None) == (Path(toy.train_data), "toy")
    assert diagnose_runner.infer_task(json.dumps({"answer": "4"})) == "toy"
    text = "<think>sum</think> <answer>4</answer>"
    spans = locate_spans("toy", text)
    assert set(spans) == {"tags"}
    assert [text[s:e] for s, e in spans["tags"]] == ["<answer>", "</answer>"]  # its own tags, not <think>
    assert [text[s:e] for s, e in tag_spans(text)] == ["<think>", "</think>", "<answer>", "</answer>"]

    from mrtpo_openrlhf.models import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny")
    row = read_jsonl(toy.train_data)[0]
    responses = tmp_path / "responses.jsonl"
    write_jsonl(
        responses,
        [
            {"prompt": row["prompt"], "response": r, "label": row["label"]}
            for r in ("<answer>4</answer>", "<answer>5</answer>")
        ],
    )
    out = tmp_path / "out"
    assert (
        diagnose_cli.main(
            ["--model", str(model), "--data", "toy", "--task", "toy", "--responses", str(responses), "--out", str(out)]
        )
        == 0
    )
    everything = read_jsonl(out / "relevance.jsonl")
    recs = [r for r in everything if r.get("null") is not True]
    assert {r["response_index"] for r in everything if r.get("null") is True} == {0, 1}  # the null block, each
    assert [(r["reward"], r["value"]) for r in recs] == [
        ("format", 1.0),
        ("match", 1.0),
        ("format", 1.0),
        ("match", 0.0),
    ]
    assert all(r["replayed"] for r in recs) and all("tags" in r["spans"] for r in recs)
    assert json.loads((out / "summary.json").read_text())["run"]["task"] == "toy"


def test_study_and_benchmark(toy, tmp_path):
    raw = {"name": "toy", "task": "toy", "data": toy.train_data, "arms": ["grpo"], "seeds": [1], "steps": 1}
    cfg = parse_config(raw)
    with pytest.raises(ValueError, match="no GPU script"):
        gpu_command(cfg, "grpo", 1, tmp_path)
    with pytest.raises(ConfigError, match="task 'chess'"):
        parse_config({**raw, "task": "chess"})

    spec = importlib.util.spec_from_file_location("bench_rewards", REPO / "benchmarks" / "rewards.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.bench_family("toy", seconds=0.05)
    assert result["rows"] == 2 and result["mean_total_reward"] == 1.0  # right answers earn 2, "no idea" 0


def test_prompt_builder_and_bad_entries(toy):
    assert toy.function("prompt_builder")("What is 2 + 2?") == read_jsonl(toy.train_data)[0]["prompt"]
    assert toy.function("constraint_specs") is None
    with pytest.raises(ValueError, match="already registered"):
        tasks.register(toy)
    with pytest.raises(ValueError, match=re.escape("unknown task 'chess'")):
        tasks.get_task("chess")


# ── a toy task, a toy placement and a toy relevance measure together, each registered with one call ──

TOY_MODE, TOY_MODE_ARM = "reverse", "mrtpo-reverse"
TOY_CLAIM = "Credit on the least relevant tokens loses the gain (MRTPO > reverse)"
TOY_MEASURE, TOY_MEASURE_ARM = "tv", "mrtpo-tv"


@pytest.fixture
def toy_registries(toy):
    """The toy task plus a placement (``reverse``) and a relevance measure (``tv``: the total variation distance
    between the two next-token distributions), taken out of their registries afterwards."""
    import torch

    from mrtpo_openrlhf.core.placements import PER_REWARD, PLACEMENTS, register_placement
    from mrtpo_openrlhf.core.relevance import DISTRIBUTIONS, RELEVANCE, register_relevance
    from mrtpo_openrlhf.core.weights import credit_weights

    placements, measures = dict(PLACEMENTS), dict(RELEVANCE)

    @register_placement(TOY_MODE, PER_REWARD, "credit on the least relevant tokens", TOY_MODE_ARM, TOY_CLAIM)
    def reverse_weights(a, q, valid, beta, generator):
        w = credit_weights(q, valid.unsqueeze(1), beta)
        return torch.where(valid.unsqueeze(1), 2.0 - w, w)

    @register_relevance(TOY_MEASURE, DISTRIBUTIONS, "total variation distance", arm=TOY_MEASURE_ARM)
    def tv_distance(full, other, *, temperature=1.0, **_options):
        """0.5 * sum_v |p - m| per position: (T, V) logits x 2 -> (T,) in [0, 1]."""
        p = torch.softmax(full.float() / temperature, -1)
        m = torch.softmax(other.float() / temperature, -1)
        return 0.5 * (p - m).abs().sum(-1)

    try:
        yield toy
    finally:
        PLACEMENTS.clear()
        PLACEMENTS.update(placements)
        RELEVANCE.clear()
        RELEVANCE.update(measures)


def test_a_toy_task_placement_and_measure_reach_every_surface(
    toy_registries, tmp_path, capsys, monkeypatch, tiny_llama
):
    """No other edit: the training CLI's choices, the launch script's task defaults, the study's arms and commands,
    the report's claims, ``study localize``'s and ``diagnose``'s choices, the replay itself."""
    import argparse

    import torch

    from mrtpo_openrlhf.adapter.args import extend_parser
    from mrtpo_openrlhf.cli import study as study_cli
    from mrtpo_openrlhf.cli import task_defaults
    from mrtpo_openrlhf.core import MethodSettings, estimators, replay_relevance, request_from_ids
    from mrtpo_openrlhf.study.config import ARMS, Arm
    from mrtpo_openrlhf.study.report.claims import ablation_claims
    from mrtpo_openrlhf.study.runner import cpu_flags

    # the training CLI
    parser = argparse.ArgumentParser()
    parser.add_argument("--algo.advantage.estimator", choices=["gae", "group_norm"])
    extend_parser(parser)
    parsed = vars(parser.parse_args(["--algo.mrtpo.placement", TOY_MODE, "--algo.mrtpo.relevance", TOY_MEASURE]))
    assert (parsed["algo.mrtpo.placement"], parsed["algo.mrtpo.relevance"]) == (TOY_MODE, TOY_MEASURE)
    step = estimators.ADVANTAGE_ESTIMATORS["mrtpo"].placement(MethodSettings(placement=TOY_MODE, relevance="tv"), 20)
    assert step.mode == TOY_MODE and step.needs_relevance

    # train.sh's GPU branch reads the task's defaults from the registry (none declared: MODEL etc. must be set)
    assert task_defaults.main(["toy"]) == 0
    assert "default_model=''" in capsys.readouterr().out
    assert task_defaults.main(["chess"]) == 2 and "toy" in capsys.readouterr().err

    # the study: a run is a placement x a measure
    assert ARMS[TOY_MODE_ARM] == Arm("mrtpo", TOY_MODE) and ARMS[TOY_MEASURE_ARM] == Arm("mrtpo", "mrtpo", "tv")
    raw = {"name": "t", "task": "toy", "data": "x.jsonl", "arms": ["mrtpo", TOY_MEASURE_ARM], "seeds": [1], "steps": 1}
    flags = cpu_flags(parse_config(raw), TOY_MEASURE_ARM, 1, tmp_path / "o", tmp_path / "m")
    assert flag(flags, "--algo.mrtpo.relevance") == "tv" and flag(flags, "--algo.mrtpo.placement") == "mrtpo"
    assert (TOY_MODE_ARM, TOY_CLAIM) in ablation_claims()

    # the report: the toy placement's claim, the toy measure's numbers
    from mrtpo_openrlhf.study import report
    from tests.study import test_report as fixtures

    monkeypatch.setitem(fixtures.SLOPES, TOY_MODE_ARM, 0.01)
    monkeypatch.setitem(fixtures.SLOPES, TOY_MEASURE_ARM, 0.09)
    src = fixtures.make_study(tmp_path / "study", arms=dict(fixtures.SLOPES))
    text = report.write_report(src, tmp_path / "out").read_text()
    assert f"3c. {TOY_CLAIM}" in text and f"3-{TOY_MEASURE_ARM}." in text

    # study localize and diagnose take the measure
    sub = argparse.ArgumentParser().add_subparsers()
    study_cli.add_localize_command(sub)
    localize = sub.choices["localize"].parse_args(["c.toml", "--relevance", "js", TOY_MEASURE])
    assert localize.relevance == ["js", TOY_MEASURE]
    assert diagnose_cli.build_parser().parse_args(["--model", "m", "--out", "o", "--relevance", "tv"]).relevance == "tv"

    # the replay computes q with it
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(3, 101, (n,), generator=g).tolist()  # noqa: E731
    req = request_from_ids(ids(6), [ids(3)], ids(5), [0], insert_at=4)
    q, _ = replay_relevance(tiny_llama, [req], num_rewards=1, relevance=TOY_MEASURE)
    with torch.no_grad():
        out = [
            tiny_llama(input_ids=torch.tensor([list(ctx) + req.response_ids])).logits[0, len(ctx) - 1 : len(ctx) + 4]
            for ctx in (req.full_context, req.minus_contexts[0])
        ]
    p, m = (torch.softmax(x.double(), -1) for x in out)
    want = [0.5 * sum(abs(float(a) - float(b)) for a, b in zip(p[t], m[t])) for t in range(5)]
    assert torch.allclose(q[0, 0].double(), torch.tensor(want, dtype=torch.float64), atol=1e-5)


def test_diagnose_under_another_measure(toy, tmp_path):
    """``diagnose --relevance``: the heatmap's q and the statistics by that measure, the null's rows beside."""
    from mrtpo_openrlhf.models import make_tiny_model

    model = make_tiny_model(tmp_path / "tiny")
    row = read_jsonl(toy.train_data)[0]
    responses = tmp_path / "responses.jsonl"
    write_jsonl(responses, [{"prompt": row["prompt"], "response": "<answer>4</answer>", "label": row["label"]}])
    base = ["--model", str(model), "--data", "toy", "--task", "toy", "--responses", str(responses)]
    qs = {}
    for measure in ("js", "loggap", "js-contrast"):
        out = tmp_path / measure
        assert diagnose_cli.main([*base, "--out", str(out), "--relevance", measure]) == 0
        recs = read_jsonl(out / "relevance.jsonl")
        assert any(r.get("null") is True and r["replayed"] for r in recs)  # the null block beside each measure
        qs[measure] = {r["reward"]: r["q"] for r in recs if r.get("null") is not True}
        run = json.loads((out / "summary.json").read_text())["run"]
        assert run.get("relevance", "js") == measure
    for reward, q in qs["js-contrast"].items():
        assert all(0 <= c <= j + 1e-6 for c, j in zip(q, qs["js"][reward]))  # JS minus the null's, floored
    assert qs["loggap"] != qs["js"]
