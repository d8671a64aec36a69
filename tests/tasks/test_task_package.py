"""Adding a task is one new package plus one registry entry (docs/tasks.md): a toy fourth task, written as a package
in a scratch folder (reward, label parser, prompt builder and one benchmark), registered with one ``register``
call, must reach the task registry, the reward file OpenRLHF loads by path, the training pre-flight's label checks
and the benchmark registry that eval reads (its CLI, loader, scorer and summary)."""

import argparse
import importlib
import importlib.util
import json
import sys
import textwrap
from dataclasses import replace

import pytest

from mrtpo_openrlhf import tasks
from mrtpo_openrlhf.cli import preflight
from mrtpo_openrlhf.cli.evaluate import build_parser
from mrtpo_openrlhf.cli.evaluate import main as eval_main
from mrtpo_openrlhf.data.jsonl import read_jsonl, write_jsonl
from mrtpo_openrlhf.evaluation import EvalConfig, load_benchmark, run_evaluation

INIT = """
from mrtpo_openrlhf.tasks import Benchmark, BenchmarkOption, Task

TASK = Task(
    name="toyqa",
    reward_module="toyqa_task.reward",
    train_data={train!r},
    label_keys=("answer",),
    prompt_builder="build_prompt",
    format_tags=(r"</?answer>",),
    unearnable="unearnable_rewards",
    env_vars=("TOYQA_ANSWER_ROOT", "TOYQA_STRICT"),
    path_env_vars=("TOYQA_ANSWER_ROOT",),
    benchmarks=(
        Benchmark(
            "toyqa_bench",
            module="toyqa_task.benchmarks",
            default_data={bench_dir!r},
            options=(
                BenchmarkOption("--toyqa-fold-case", "fold_case", False, "compare answers case-blind",
                                action="store_true"),
                BenchmarkOption("--toyqa-first", "first", None, "only the first N questions", to="loader", type=int),
            ),
        ),
    ),
)
"""
# absolute imports only: OpenRLHF loads this file by its path, outside any package
REWARD = """
from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, label_object, make_reward_func
from mrtpo_openrlhf.verifiers.response import response_from_query

FORMAT_BLOCK = "Put the answer inside <answer></answer>."


def parse_label(label):
    answer = label_object(label).get("answer")
    if not isinstance(answer, str):
        raise ValueError("label field 'answer' must be a string")
    return answer


def unearnable_rewards(label):
    return [("match", "the label's answer is empty")] if parse_label(label) == "" else []


def score(query, prompt, label):
    answer = parse_label(label)
    response = response_from_query(query, prompt)
    return RewardVector(
        [
            RewardItem("format", float("<answer>" in response), FORMAT_BLOCK, inline=True),
            RewardItem("match", float(f"<answer>{answer}</answer>" in response), f"The answer is {answer}."),
        ],
        primary="match",
    )


reward_func = make_reward_func(score, lambda _label: ("format", "match"))


def build_prompt(question):
    return f"{question}\\n\\n{FORMAT_BLOCK}"
"""
BENCHMARKS = """
from mrtpo_openrlhf.data.jsonl import read_jsonl
from mrtpo_openrlhf.evaluation.data import EvalExample

from .reward import build_prompt


def load(data_dir, first=None):
    return [
        EvalExample(str(r["id"]), "toyqa_bench", build_prompt(r["question"]), {"answer": r["answer"]})
        for r in read_jsonl(data_dir / "qa.jsonl")
    ][:first]


def score(example, response, answer=None, fold_case=False):
    fold = str.lower if fold_case else str
    ok = fold(f"<answer>{example.target['answer']}</answer>") in fold(response or "")
    return {"answer": response, "verdict": ok, "reason": "" if ok else "wrong answer"}


def summarize(records):
    return {"n": len(records), "accuracy": sum(r["verdict"] for r in records) / len(records)}


def columns(summary):
    return [("Toy QA", "accuracy")]
"""
QA = [("q1", "What is 2 + 2?", "4"), ("q2", "What is 3 + 4?", "7"), ("q3", "Which letter follows a?", "B")]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The package in a scratch folder, its data, and the one registry entry (taken out afterwards)."""
    pkg = tmp_path / "src" / "toyqa_task"
    pkg.mkdir(parents=True)
    train = tmp_path / "train.jsonl"
    write_jsonl(
        train,
        [{"prompt": f"{q}\n\nPut the answer inside <answer></answer>.", "label": {"answer": a}} for _, q, a in QA],
    )
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    write_jsonl(bench_dir / "qa.jsonl", [{"id": i, "question": q, "answer": a} for i, q, a in QA])
    (pkg / "__init__.py").write_text(textwrap.dedent(INIT.format(train=str(train), bench_dir=str(bench_dir))))
    (pkg / "reward.py").write_text(REWARD)
    (pkg / "benchmarks.py").write_text(BENCHMARKS)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    task = tasks.register(importlib.import_module("toyqa_task").TASK)  # the one registry entry
    try:
        yield task
    finally:
        tasks.unregister("toyqa")
        for name in ("toyqa_task", "toyqa_task.reward", "toyqa_task.benchmarks"):
            monkeypatch.delitem(sys.modules, name, raising=False)


def test_registry_has_the_task_and_its_benchmark(toy):
    assert tasks.get_task("toyqa") is toy and list(tasks.TASKS)[-1] == "toyqa"
    assert tasks.get_benchmark("toyqa_bench").task == "toyqa"
    assert [b.name for b in toy.benchmarks] == ["toyqa_bench"]
    assert tasks.task_of_label({"answer": "4"}) == ["toyqa"]
    assert toy.function("prompt_builder")("What is 2 + 2?") == read_jsonl(toy.train_data)[0]["prompt"]


def test_registry_refuses_taken_names_and_label_keys(toy):
    with pytest.raises(ValueError, match="task 'toyqa' is already registered"):
        tasks.register(toy)
    spider_again = tasks.Task(
        name="toyqa2",
        reward_module="toyqa_task.reward",
        train_data="-",
        label_keys=("question",),
        benchmarks=(tasks.Benchmark("spider", module="toyqa_task.benchmarks"),),
    )
    with pytest.raises(ValueError, match="benchmark 'spider' is already registered \\(task 'sql'\\)"):
        tasks.register(spider_again)
    with pytest.raises(ValueError, match="label key\\(s\\) \\['answer'\\] are task 'toyqa'"):
        tasks.register(
            tasks.Task(name="toyqa3", reward_module="toyqa_task.reward", train_data="-", label_keys=("answer",))
        )
    assert "toyqa2" not in tasks.TASKS and "toyqa3" not in tasks.TASKS  # a refused entry leaves nothing behind


def test_reward_file_loads_like_openrlhf(toy):
    path = toy.reward_path()
    assert path.name == "reward.py" and path.parent.name == "toyqa_task"
    spec = importlib.util.spec_from_file_location("reward_func_module", path)  # what OpenRLHF does with the file
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    prompt = "What is 2 + 2?\n\nPut the answer inside <answer></answer>."
    out = module.reward_func([prompt + "<answer>4</answer>"], [prompt], [{"answer": "4"}])
    assert out["extra_logs"]["mrtpo_reward_names"] == ["format", "match"]
    assert out["extra_logs"]["mrtpo_reward_values"] == [1.0, 1.0] and float(out["scores"][0]) == 1.0
    wrong = module.reward_func([prompt + "<answer>5</answer>"], [prompt], [{"answer": "4"}])
    assert wrong["extra_logs"]["mrtpo_reward_values"] == [1.0, 0.0]
    assert tasks.task_of_reward(path, module.reward_func) is toy  # the pre-flight's lookup


def test_preflight_parses_the_labels_with_the_task_parser(toy, tmp_path):
    rows = [
        {"prompt": "What is 2 + 2?", "label": {"answer": "4"}},
        {"prompt": "What is 3 + 4?", "label": {"answer": 7}},  # not a string: parse_label refuses it
        {"prompt": "What is 1 + 1?", "label": {"answer": ""}},  # nothing can earn "match"
        {"prompt": "What is 5 + 5?", "label": {"answer": "10"}},
    ]
    data = tmp_path / "rows.jsonl"
    write_jsonl(data, rows)
    flags = argparse.Namespace(
        **{
            "data.prompt_dataset": str(data),
            "data.input_key": "prompt",
            "data.label_key": "label",
            "data.apply_chat_template": False,
            "data.max_samples": int(1e8),
            "data.prompt_split": "train",
            "rollout.batch_size": 2,
            "reward.remote_url": str(toy.reward_path()),
            "algo.advantage.estimator": "mrtpo",
            "actor.model_name_or_path": "unused/model",
        }
    )
    assert preflight.check(flags).problems == [
        f"{data}:2: bad label (label field 'answer' must be a string); 1 of 4 labels fail "
        f"toyqa_task.reward.parse_label (first at {data}:2); the reward would score them 0",
        f"{data}:3: no response can earn reward 'match' (the label's answer is empty); 1 of 4 labels are like it "
        f"(first at {data}:3); pass --preflight-allow-unearnable to train anyway",
    ]


def test_eval_reads_the_benchmark_from_the_registry(toy, tmp_path, capsys):
    assert build_parser().parse_args(["--benchmark", "toyqa_bench", "--predictions", "p"]).benchmark == ["toyqa_bench"]
    examples = load_benchmark("toyqa_bench")  # the task's default_data
    assert [ex.id for ex in examples] == ["q1", "q2", "q3"]
    assert examples[0].prompt == read_jsonl(toy.train_data)[0]["prompt"]  # eval's prompt is the training prompt
    preds = tmp_path / "preds.jsonl"
    write_jsonl(preds, [{"id": "q1", "response": "<answer>4</answer>"}, {"id": "q2", "response": "<answer>8</answer>"}])
    out = tmp_path / "out"
    assert eval_main(["--benchmark", "toyqa_bench", "--predictions", str(preds), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())["benchmarks"]["toyqa_bench"]
    # q1 right, q2 wrong, q3 without a prediction (counts as wrong): 1 of 3
    assert summary["n"] == 3 and summary["headline"] == {"Toy QA": pytest.approx(1 / 3)}
    records = read_jsonl(out / "toyqa_bench.records.jsonl")
    assert [(r["id"], r["verdict"], r["reason"]) for r in records] == [
        ("q1", True, ""),
        ("q2", False, "wrong answer"),
        ("q3", False, "no prediction"),
    ]
    assert "Toy QA" in capsys.readouterr().out


def test_a_benchmark_option_reaches_the_cli_the_loader_the_scorer_and_the_record(toy, tmp_path, capsys):
    """Declared with the benchmark (``Benchmark.options``), a flag is in eval's parser and help, reaches the
    loader or the scorer as its keyword, and the summary records the value each was given."""
    parser = build_parser()
    assert "toyqa_bench options" in parser.format_help() and "--toyqa-fold-case" in parser.format_help()
    preds = tmp_path / "preds.jsonl"
    write_jsonl(preds, [{"id": "q1", "response": "<answer>4</answer>"}, {"id": "q3", "response": "<ANSWER>b</ANSWER>"}])
    first_two = tmp_path / "first_two.jsonl"  # a prediction for a question the loader leaves out is refused
    write_jsonl(first_two, [{"id": "q1", "response": "<answer>4</answer>"}])
    verdicts = {}
    for flags in ([], ["--toyqa-fold-case"], ["--toyqa-first", "2"]):
        out = tmp_path / f"out{len(verdicts)}"
        given = first_two if "--toyqa-first" in flags else preds
        args = ["--benchmark", "toyqa_bench", "--predictions", str(given), "--out", str(out), *flags]
        assert eval_main(args) == 0
        records = read_jsonl(out / "toyqa_bench.records.jsonl")
        verdicts[" ".join(flags)] = [(r["id"], r["verdict"]) for r in records]
        options = json.loads((out / "summary.json").read_text())["meta"]["options"]["toyqa_bench"]
        assert options == {"first": 2 if "--toyqa-first" in flags else None, "fold_case": "--toyqa-fold-case" in flags}
    assert verdicts == {
        "": [("q1", True), ("q2", False), ("q3", False)],
        "--toyqa-fold-case": [("q1", True), ("q2", False), ("q3", True)],
        "--toyqa-first 2": [("q1", True), ("q2", False)],
    }
    # an option no benchmark declares is refused before anything runs (the Python API; argparse refuses the flag)
    with pytest.raises(ValueError, match=r"unknown benchmark option\(s\) \['toyqa_fold'\]"):
        run_evaluation(EvalConfig(["toyqa_bench"], predictions=[str(preds)], options={"toyqa_fold": True}))


def test_benchmark_options_that_clash_are_refused(toy):
    same_flag = tasks.BenchmarkOption("--toyqa-fold-case", "fold", True)  # declared otherwise than toyqa_bench's
    clash = tasks.Task(
        name="toyqa4",
        reward_module="toyqa_task.reward",
        train_data="-",
        label_keys=("answer4",),
        benchmarks=(tasks.Benchmark("toyqa_bench4", module="toyqa_task.benchmarks", options=(same_flag,)),),
    )
    with pytest.raises(ValueError, match="declares --toyqa-fold-case unlike benchmark 'toyqa_bench'"):
        tasks.register(clash)
    assert "toyqa4" not in tasks.TASKS
    own = tasks.BenchmarkOption("--workers", "workers", 1)  # eval's own flag
    tasks.register(replace(clash, name="toyqa5", benchmarks=(tasks.Benchmark("b5", module="m", options=(own,)),)))
    try:
        with pytest.raises(ValueError, match="benchmark 'b5': option --workers clashes with eval's own"):
            build_parser()
    finally:
        tasks.unregister("toyqa5")
    with pytest.raises(ValueError, match="a flag is written --name"):
        tasks.BenchmarkOption("workers", "workers")


def test_the_tasks_environment_variables_reach_every_ray_worker(toy, tmp_path, monkeypatch, capsys):
    """A task's ``env_vars`` join the runtime env of upstream's ``ray.init`` (paths made absolute) and the submitted
    job's (``python -m mrtpo_openrlhf.cli.job_env``), as the built-in tasks' do."""
    if importlib.util.find_spec("flash_attn") is None:  # the adapter imports upstream's models (tests/adapter)
        from mrtpo_openrlhf.cpu import flash_attn_stub

        flash_attn_stub.install()
    from mrtpo_openrlhf.adapter.cluster import with_forwarded_env
    from mrtpo_openrlhf.rewards import env

    monkeypatch.chdir(tmp_path)
    environ = {"TOYQA_ANSWER_ROOT": "answers", "TOYQA_STRICT": "1", "TOYQA_OTHER": "x"}
    assert with_forwarded_env({}, environ)["env_vars"] == {
        "TOYQA_ANSWER_ROOT": str(tmp_path / "answers"),
        "TOYQA_STRICT": "1",
    }
    assert env.job_runtime_env("/repo", environ=environ)["env_vars"] == {
        "TOYQA_ANSWER_ROOT": "answers",
        "TOYQA_STRICT": "1",
    }
    with pytest.raises(ValueError, match=r"path_env_vars \['TOYQA_X'\] are not among its env_vars"):
        tasks.register(replace(toy, name="toyqa6", label_keys=("a6",), benchmarks=(), path_env_vars=("TOYQA_X",)))
