"""The pre-flight check through the real entry points: each bad input is one line, exit 2, and nothing is started.

Every run gets a fresh ``RAY_TMPDIR`` (a local Ray instance would put its session there) and a marker in its
environment that every process it starts inherits: after it exits, no process may carry the marker and the folder
must hold no Ray session.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_args import parse_upstream

from mrtpo_openrlhf.cli import preflight
from mrtpo_openrlhf.tasks import TASKS

REPO = Path(__file__).resolve().parents[2]
SQL_REWARD = REPO / "reward_funcs" / "sql.py"
SQL_ROWS = REPO / "mrtpo_openrlhf" / "data" / "sql" / "train_mini.jsonl"
CLI = [sys.executable, "-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
MARKER = "PREFLIGHT_TEST_MARKER"  # not MRTPO_*: the scripts stop on an MRTPO_ name they do not know


def flags(data, reward=SQL_REWARD, *extra):
    return [
        "--actor.model_name_or_path", "unused/model",
        "--reward.remote_url", str(reward),
        "--data.prompt_dataset", str(data), "--data.input_key", "prompt", "--data.label_key", "label",
        "--data.apply_chat_template",
        "--rollout.batch_size", "2", "--rollout.n_samples_per_prompt", "4",
        "--algo.advantage.estimator", "mrtpo",
        *extra,
    ]  # fmt: skip


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def run(tmp_path, command, timeout=300, **extra_env):
    """Run ``command``; then check that it left no process behind and started no Ray."""
    marker = uuid.uuid4().hex
    ray_tmp = tmp_path / "ray"
    ray_tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("MRTPO_CPU", "RAY_ADDRESS", "DRY_RUN", "RAY_JOB_ADDRESS")}
    env.update({MARKER: marker, "RAY_TMPDIR": str(ray_tmp), **extra_env})
    res = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    assert processes_with(f"{MARKER}={marker}") == [], "a process of the run outlived it"
    assert list(ray_tmp.iterdir()) == [], "a Ray session was started"
    assert "private Ray head" not in res.stdout + res.stderr and "Started a local Ray" not in res.stdout + res.stderr
    return res


def problem_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("preflight: ") and not ln.startswith("preflight: note")]


def write_rows(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def sql_rows(n=3):
    return [json.loads(line) for line in SQL_ROWS.read_text().splitlines()[:n]]


def not_json_second_line(tmp_path):
    return write_rows(tmp_path / "rows.jsonl", [sql_rows(1)[0], '{"prompt": "x", "label": {} trailing', sql_rows(2)[1]])


def rows_without_prompt(tmp_path):
    return write_rows(tmp_path / "rows.jsonl", [{"question": r["prompt"], "label": r["label"]} for r in sql_rows()])


def empty_file(tmp_path):
    return write_rows(tmp_path / "rows.jsonl", [])


DATA_CASES = {
    "not_json": (not_json_second_line, lambda p: f"preflight: {p}:2: invalid JSON ("),
    "no_prompt": (
        rows_without_prompt,
        lambda p: (
            f"preflight: {p}:1: no 'prompt' key (--data.input_key prompt); 3 of 3 rows lack it (first at {p}:1, "
            f"{p}:2, {p}:3)"
        ),
    ),
    "empty": (empty_file, lambda p: f"preflight: {p}: no rows (the file is empty)"),
}


@pytest.mark.parametrize("case", sorted(DATA_CASES))
def test_cli_bad_data_is_one_line(tmp_path, case):
    make, expected = DATA_CASES[case]
    data = make(tmp_path)
    res = run(tmp_path, [*CLI, *flags(data), "--preflight-only"])
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(problem_lines(res.stderr)) == 1, res.stderr[-3000:]
    assert problem_lines(res.stderr)[0].startswith(expected(data)), problem_lines(res.stderr)


@pytest.mark.parametrize("case", ["not_json", "no_prompt", "empty"])
def test_embedded_default_stops_before_its_ray_head(tmp_path, case):
    make, expected = DATA_CASES[case]
    data = make(tmp_path).resolve()
    model = tmp_path / "model"
    model.mkdir()
    command = [sys.executable, "-m", "mrtpo_openrlhf.cli.default", "--task", "sql", "--data", str(data)]
    command += ["--model", str(model), "--steps", "1", "--out", str(tmp_path / "out"), "--timeout", "60"]
    res = run(tmp_path, command)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert len(problem_lines(res.stderr)) == 1 and problem_lines(res.stderr)[0].startswith(expected(data))
    assert not (tmp_path / "out").exists()  # not even the run folder


def test_bad_label_names_the_first_rows_and_the_count(tmp_path):
    rows = sql_rows(4)
    rows[1]["label"] = {"db_id": "bookstore"}  # no gold
    rows[3]["label"] = "not json"
    data = write_rows(tmp_path / "rows.jsonl", rows)
    res = run(tmp_path, [*CLI, *flags(data), "--preflight-only"])
    assert res.returncode == 2
    (line,) = problem_lines(res.stderr)
    assert line == (
        f"preflight: {data}:2: bad label (label field 'gold' (the reference SQL) is missing or empty); 2 of 4 labels "
        f"fail mrtpo_openrlhf.tasks.sql.reward.parse_label (first at {data}:2, {data}:4); the reward would score them 0"
    )


def test_label_that_no_response_can_score_stops_unless_accepted(tmp_path):
    rows = sql_rows(2)
    rows[0]["label"] = dict(rows[0]["label"], db_id="no_such_db")
    data = write_rows(tmp_path / "rows.jsonl", rows)
    res = run(tmp_path, [*CLI, *flags(data), "--preflight-only"])
    assert res.returncode == 2
    (line,) = problem_lines(res.stderr)
    assert line.startswith(f"preflight: {data}:1: no response can earn reward 'executable', 'execution' (database ")
    assert line.endswith(
        "1 of 2 labels are like it (first at " + f"{data}:1); pass --preflight-allow-unearnable to train anyway"
    )
    accepted = run(tmp_path, [*CLI, *flags(data), "--preflight-only", "--preflight-allow-unearnable"])
    assert accepted.returncode == 0, accepted.stderr[-3000:]
    assert "preflight: note: " in accepted.stderr and "preflight: ok in " in accepted.stderr


REWARD_FILES = {
    "import_fails": ("import json\n\nimport no_such_module_xyz\n", ":3: importing --reward.remote_url "),
    "no_reward_func": ("def reward(q, p, l):\n    return 1\n", ": defines no reward_func(queries, prompts, labels)"),
    "wrong_shape": (
        "def reward_func(queries, prompts, labels):\n    return {'rewards': [1.0, 2.0]}\n",
        ": reward_func on the first row (",
    ),
}


@pytest.mark.parametrize("case", sorted(REWARD_FILES))
def test_bad_reward_file_is_one_line(tmp_path, case):
    source, expected = REWARD_FILES[case]
    reward = tmp_path / "my_reward.py"
    reward.write_text(source)
    res = run(tmp_path, [*CLI, *flags(SQL_ROWS, reward), "--preflight-only"])
    assert res.returncode == 2, res.stderr[-3000:]
    (line,) = problem_lines(res.stderr)
    assert expected in line and str(reward) in line, line
    if case == "wrong_shape":
        assert line.endswith("answer has the wrong shape: expected one reward per response, got 2: [1.0, 2.0]")


def test_bad_flags_one_line_each_without_usage(tmp_path):
    res = run(
        tmp_path, [*CLI, *flags(SQL_ROWS, SQL_REWARD, "--algo.mrtpo.beta", "2"), "--rollout.n_samples_per_prompt", "1"]
    )
    assert res.returncode == 2
    errors = [ln for ln in res.stderr.splitlines() if ": error: " in ln]
    assert errors == [
        "train_ppo_ray.py: error: --algo.advantage.estimator mrtpo normalizes each reward inside a prompt's group: "
        "--rollout.n_samples_per_prompt must be >= 2 (got 1)",
        "train_ppo_ray.py: error: --algo.mrtpo.beta must be in [0, 1], got 2.0",
    ]
    assert "usage:" not in res.stderr and "preflight: " not in res.stderr
    unknown = run(tmp_path, [*CLI, *flags(SQL_ROWS), "--algo.mrtpo.bogus", "1"])
    assert unknown.returncode == 2 and "usage:" not in unknown.stderr
    assert [ln for ln in unknown.stderr.splitlines() if ": error: " in ln] == [
        "train_ppo_ray.py: error: unrecognized arguments: --algo.mrtpo.bogus 1"
    ]


def test_good_run_and_reward_server(tmp_path):
    from mrtpo_openrlhf.rewards import server as reward_server

    res = run(tmp_path, [*CLI, *flags(SQL_ROWS), "--preflight-only"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert problem_lines(res.stderr) == [ln for ln in res.stderr.splitlines() if ln.startswith("preflight: ok in ")]
    assert "3 rewards (format=1, executable=1, execution=1)" in res.stderr  # the reference answer, scored
    srv, thread = reward_server.start_in_thread("sql", port=0, workers=1)
    port = srv.server_address[1]  # the socket is closed after shutdown
    try:
        url = f"http://127.0.0.1:{port}/get_reward"
        served = run(tmp_path, [*CLI, *flags(SQL_ROWS, url), "--preflight-only"])
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
    assert served.returncode == 0, served.stderr[-3000:]
    assert f"--reward.remote_url {url} answered 3 rewards (format=1, executable=1, execution=1)" in served.stderr
    assert "labels parsed by mrtpo_openrlhf.tasks.sql.reward.parse_label" in served.stderr  # /health named the task
    dead = run(tmp_path, [*CLI, *flags(SQL_ROWS, url), "--preflight-only"])
    assert dead.returncode == 2
    (line,) = problem_lines(dead.stderr)
    assert line.startswith(f"preflight: --reward.remote_url {url}: http://127.0.0.1:{port}/health")


def test_check_time_on_bundled_sets(monkeypatch, capsys):
    """What the check adds to a start, per bundled set (printed; performance is not asserted)."""
    import torch

    figures = []
    for task in TASKS.values():
        for data in dict.fromkeys([task.train_data_path(), task.cpu_train_data_path()]):
            flat = parse_upstream(flags(data, task.reward_path()), monkeypatch)
            t0 = time.perf_counter()
            report = preflight.check(flat)
            figures.append(f"{task.name} {data.name}: {time.perf_counter() - t0:.3f}s")
            assert report.problems == [], report.problems
    with capsys.disabled():
        print(f"\n[preflight] check time ({torch.backends.cpu.get_cpu_capability()}): " + "; ".join(figures))


def test_gpu_script_dry_run_prints_the_command_then_checks(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: fake'\n")
    (fake / "nvidia-smi").chmod(0o755)
    data = not_json_second_line(tmp_path)
    path = f"{fake}:{Path(sys.executable).parent}:{os.environ['PATH']}"  # the command's `python` is this venv's
    script = [str(REPO / "examples" / "scripts" / "train_mrtpo_sql.sh")]
    res = run(tmp_path, ["bash", *script], PATH=path, DRY_RUN="1", DATA=str(data), OUT=str(tmp_path / "out"))
    assert res.returncode == 2
    assert shlex.split(res.stdout.strip().splitlines()[-1])[1:3] == ["-m", "mrtpo_openrlhf.cli.train_ppo_ray"]
    (line,) = problem_lines(res.stderr)
    assert line.startswith(f"preflight: {data}:2: invalid JSON (")
    ok = run(tmp_path, ["bash", *script], PATH=path, DRY_RUN="1", DATA=str(SQL_ROWS), ROLLOUT_BATCH="2")
    assert ok.returncode == 0 and "preflight: ok in " in ok.stderr, ok.stderr[-3000:]


def test_cpu_script_dry_run_prints_and_checks_but_never_trains(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    script = str(REPO / "examples" / "scripts" / "train_mrtpo_sql.sh")
    out = tmp_path / "out"
    res = run(tmp_path, ["bash", script, "--model", str(model), "--out", str(out)], MRTPO_CPU="1", DRY_RUN="1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "mrtpo_openrlhf.cli.train_ppo_ray" in res.stdout and "preflight: ok in " in res.stderr
    assert not out.exists()  # no run folder: nothing trained


def flat(data, **over):
    """The parsed flags as the hook sees them (flat, dotted), for the checks that need no CLI process."""
    values = {
        "data.prompt_dataset": str(data),
        "data.input_key": "prompt",
        "data.label_key": "label",
        "data.apply_chat_template": True,
        "data.max_samples": int(1e8),
        "data.prompt_split": "train",
        "rollout.batch_size": 2,
        "reward.remote_url": str(SQL_REWARD),
        "algo.advantage.estimator": "mrtpo",
        "actor.model_name_or_path": "unused/model",
    }
    values.update({k.replace("__", "."): v for k, v in over.items()})
    return argparse.Namespace(**values)


def test_a_gold_query_that_cannot_run_stops_the_preflight(tmp_path):
    """Issue 49 item 3: ``SELEC broken`` passed the pre-flight though every response would score 0 on execution;
    ``sql check`` caught it. The pre-flight now runs the same check (the task's ``unearnable``)."""
    from mrtpo_openrlhf.tasks.sql.reward import check_rows

    rows = sql_rows(3)
    rows[1]["label"] = dict(rows[1]["label"], gold="SELEC broken")
    data = write_rows(tmp_path / "rows.jsonl", rows)
    (expected,) = check_rows(rows, str(data))  # what `python -m mrtpo_openrlhf.cli.task sql check` reports
    report = preflight.check(flat(data))
    (line,) = report.problems
    assert line.startswith(f"{data}:2: no response can earn reward 'execution' (gold query failed: ")
    assert expected.split(": gold query failed: ")[1] in line and "1 of 3 labels are like it" in line


def test_attention_that_cannot_be_imported_stops_where_the_actors_run(tmp_path, monkeypatch):
    """Issue 47 item 4: with --ds.attn_implementation flash_attention_2 (upstream's default) and no flash-attn, every
    actor failed at import minutes in; on a machine where the actors run (CUDA here, no cluster) the pre-flight now
    stops in one line naming the fix and the sdpa alternative. Fake inputs: torch's CUDA answer, a package dir."""
    import torch

    data = write_rows(tmp_path / "rows.jsonl", sql_rows(2))
    monkeypatch.delenv("MRTPO_CPU", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    from mrtpo_openrlhf.cpu.flash_attn_stub import StubFinder

    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, StubFinder)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    (line,) = preflight.check(flat(data, ds__attn_implementation="flash_attention_2")).problems
    assert line.startswith("--ds.attn_implementation flash_attention_2: flash_attn cannot be imported (")
    assert line.endswith("or choose --ds.attn_implementation sdpa (ATTN_IMPL=sdpa)")
    assert preflight.check(flat(data, ds__attn_implementation="sdpa")).problems == []
    (site / "flash_attn").mkdir()
    (site / "flash_attn" / "__init__.py").write_text("__version__ = '2.8.3'\n")
    report = preflight.check(flat(data, ds__attn_implementation="flash_attention_2"))
    assert report.problems == [] and "flash_attn 2.8.3" in report.facts
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # the actors run on the cluster's nodes: the doctor's check
    report = preflight.check(flat(data, ds__attn_implementation="flash_attention_2"))
    assert report.problems == [] and any("cli.doctor" in note for note in report.notes)


def test_json_list_parquet_and_saved_folders_are_read_like_the_loader(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasets import Dataset, DatasetDict

    rows = sql_rows(3)
    listed = tmp_path / "rows.json"
    listed.write_text(json.dumps([rows[0], {"label": rows[1]["label"]}, rows[2]]))
    assert preflight.check(flat(listed)).problems == [
        f"{listed}: item 1: no 'prompt' key (--data.input_key prompt); 1 of 3 rows lack it (first at {listed}: item 1)"
    ]
    table = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"prompt": [r["prompt"] for r in rows], "label": [json.dumps(r["label"]) for r in rows]}), table
    )
    report = preflight.check(flat(table, rollout__batch_size=4))
    assert report.problems == [f"--rollout.batch_size 4: one rollout batch needs 4 prompts; {table} has 3"]
    saved = tmp_path / "saved"
    DatasetDict(
        {"test": Dataset.from_list([{"prompt": r["prompt"], "label": json.dumps(r["label"])} for r in rows])}
    ).save_to_disk(str(saved))
    assert preflight.check(flat(saved)).problems == [f"{saved}: no split 'train' (has test; --data.prompt_split)"]
    report = preflight.check(flat(saved, data__prompt_split="test"))
    assert report.problems == [] and "3 labels parsed by mrtpo_openrlhf.tasks.sql.reward.parse_label" in report.facts


def test_inputs_labels_and_chat_template(tmp_path):
    rows = sql_rows(2)
    chat = write_rows(
        tmp_path / "chat.jsonl", [dict(r, prompt=[{"role": "user", "content": r["prompt"]}]) for r in rows]
    )
    assert preflight.check(flat(chat)).problems == []
    assert preflight.check(flat(chat, data__apply_chat_template=False)).problems == [
        f"{chat}:1: 'prompt' is a list: chat messages need --data.apply_chat_template; 2 of 2 rows are like it "
        f"(first at {chat}:1, {chat}:2)"
    ]
    assert preflight.check(flat(SQL_ROWS, data__label_key=None)).problems == [
        "--data.label_key is not set: every label reaches the sql reward as '' and scores 0 "
        "(the bundled sets use --data.label_key label)"
    ]
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 8}))
    assert preflight.check(flat(SQL_ROWS, actor__model_name_or_path=str(model))).problems == [
        f"--data.apply_chat_template: the tokenizer in {model} has no chat template ({model / 'tokenizer_config.json'})"
    ]
    (model / "chat_template.jinja").write_text("{{ messages }}")
    assert preflight.check(flat(SQL_ROWS, actor__model_name_or_path=str(model))).problems == []


def test_preflight_pass_parses_like_upstream_without_its_imports(monkeypatch):
    """The pass with upstream's imports deferred sees the flags upstream's real parse gives, and leaves the real
    modules importable afterwards."""
    from mrtpo_openrlhf.cli import train_ppo_ray

    argv = flags(SQL_ROWS, SQL_REWARD, "--algo.mrtpo.beta", "0.25")
    seen = []
    monkeypatch.setattr(preflight, "run", seen.append)
    monkeypatch.setattr("sys.argv", ["train_ppo_ray", *argv])
    train_ppo_ray.preflight_pass()
    (deferred,) = seen
    real = parse_upstream(argv, monkeypatch)
    minute = "logger.wandb.run_name"  # upstream's default holds the minute it was built
    ours = {preflight.ONLY_DEST, preflight.SKIP_DEST, preflight.ALLOW_UNEARNABLE_DEST}  # parse_upstream lacks them
    assert {k: v for k, v in vars(deferred).items() if k not in ours | {minute}} == {
        k: v for k, v in vars(real).items() if k != minute
    }
    assert not any(isinstance(m, train_ppo_ray._Deferred) for m in sys.modules.values())


def test_cli_preflight_imports_no_ray_deepspeed_or_vllm(tmp_path):
    """What made the check cost ~8 s: a good check and a bad one end before any of these is imported."""
    heavy = ["ray", "deepspeed", "vllm", "transformers", "openrlhf.trainer", "openrlhf.utils"]
    code = (
        "import sys\nfrom mrtpo_openrlhf.cli import train_ppo_ray\nsys.argv = ['train_ppo_ray', *sys.argv[1:]]\n"
        "try:\n    train_ppo_ray.main()\nexcept SystemExit as exc:\n"
        f"    print('imported', [m for m in {heavy!r} if m in sys.modules], 'exit', exc.code)\n"
    )
    good = run(tmp_path, [sys.executable, "-c", code, *flags(SQL_ROWS), "--preflight-only"])
    assert good.stdout.strip() == "imported [] exit 0", good.stdout + good.stderr[-2000:]
    bad = run(tmp_path, [sys.executable, "-c", code, *flags(empty_file(tmp_path)), "--preflight-only"])
    assert bad.stdout.strip() == "imported [] exit 2", bad.stdout + bad.stderr[-2000:]
    assert len(problem_lines(bad.stderr)) == 1


def test_launcher_preflight_runs_in_process_under_the_run_environment(tmp_path, monkeypatch, capfd):
    """launch.runner.run_preflight: the CLI's check in the launcher's own process, the run's CPU environment
    applied while it runs and put back after; a bad file is one line and status 2."""
    from mrtpo_openrlhf.launch.runner import run_preflight

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    module = "mrtpo_openrlhf.cli.train_ppo_ray"
    data = not_json_second_line(tmp_path)
    assert run_preflight(module, flags(data)) == 2
    (line,) = problem_lines(capfd.readouterr().err)
    assert line.startswith(f"preflight: {data}:2: invalid JSON (")
    assert run_preflight(module, flags(SQL_ROWS)) == 0
    assert "preflight: ok in " in capfd.readouterr().err
    assert "HF_HUB_OFFLINE" not in os.environ and sys.argv[0] != module
