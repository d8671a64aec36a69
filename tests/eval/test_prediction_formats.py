"""Prediction files in the formats people already have, samples (pass@k), partial-run coverage, bad ids."""

import json
import math
import statistics
from math import comb
from pathlib import Path

import pytest

from mrtpo_openrlhf.data.jsonl import read_jsonl
from mrtpo_openrlhf.tasks.tool.benchmarks import parse_openai_tool_calls, parse_python_calls

BIRD_SQL = {  # bundled BIRD mini: question_id -> (prediction, verdict checked by hand)
    "0": ("SELECT COUNT(flight_id) FROM flights WHERE departure LIKE '2024-05-01%'", True),
    "1": ("SELECT title FROM books WHERE genre IS NOT NULL", False),
    "2": ("SELECT MAX(T2.score) FROM exam_scores AS T2", False),
}
BIRD_DB = {"0": "flights", "1": "bookstore", "2": "school"}


def test_bird_official_json(tmp_path, run_cli, kit):
    path = tmp_path / "predict_dev.json"
    path.write_text(json.dumps({k: f"{sql}\t----- bird -----\t{BIRD_DB[k]}" for k, (sql, _) in BIRD_SQL.items()}))
    code, out = run_cli("--benchmark", "bird", "--predictions", path)
    assert code == 0
    records = kit.read_records(out, "bird")
    for key, (sql, verdict) in BIRD_SQL.items():
        assert records[key]["answer"] == sql and records[key]["verdict"] is verdict
    summary = kit.read_summary(out)["benchmarks"]["bird"]
    assert (summary["n"], summary["n_predicted"], summary["n_missing"]) == (5, 3, 2)
    assert summary["ex"] == pytest.approx(0.2)  # 1 of 5: the two unpredicted count as wrong
    assert "0.2000 ± 0.2000 (3/5 predicted)" in (out / "results.md").read_text(encoding="utf-8")


def test_bird_json_on_the_wrong_database_is_an_error(tmp_path, run_cli, capsys):
    path = tmp_path / "predict_dev.json"
    path.write_text(json.dumps({"0": "SELECT 1\t----- bird -----\tbookstore"}))
    code, _ = run_cli("--benchmark", "bird", "--predictions", path)
    assert code == 2 and "'bookstore'" in capsys.readouterr().err


def test_spider_official_one_query_per_line(tmp_path, run_cli, kit):
    items = [
        {"db_id": "school", "question": f"q{i}", "query": "SELECT name FROM students ORDER BY name"} for i in range(3)
    ]
    data = kit.make_spider_dir(tmp_path / "spider", items)
    # line 2 carries the gold file's "\tdb_id" tail, which the official reader drops; blank lines are skipped
    sql = "SELECT name FROM students ORDER BY name\n\nSELECT name FROM students\tschool\n"
    pred = tmp_path / "pred.sql"
    pred.write_text(sql, encoding="utf-8")
    code, out = run_cli("--benchmark", "spider", "--data-dir", data, "--predictions", f"spider={pred}")
    assert code == 0
    records = kit.read_records(out, "spider")
    assert records["0"]["verdict"] is True
    assert records["1"]["answer"] == "SELECT name FROM students" and records["1"]["verdict"] is False  # order
    assert records["2"]["reason"] == "no prediction"
    assert kit.read_summary(out)["benchmarks"]["spider"]["n_predicted"] == 2


def test_ifeval_rows_keyed_by_prompt_text(tmp_path, run_cli, kit):
    fixture = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf/data/eval_fixtures/ifeval/input_data.jsonl"
    rows = [json.loads(line) for line in fixture.read_text(encoding="utf-8").splitlines()]
    # the official shape: {"prompt", "response"}; the second prompt with spaces around it (allenai/IFBench strips)
    preds = kit.write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"prompt": rows[0]["prompt"], "response": "Rain falls softly."},
            {"prompt": "  " + rows[1]["prompt"] + " ", "response": "x"},
        ],
    )
    code, out = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 0
    records = kit.read_records(out, "ifeval")
    assert records[rows[0]["key"]]["follow_instruction_list_strict"] == [True, True]  # no comma, 3 < 10 words
    assert records[rows[1]["key"]]["response"] == "x"
    assert records[rows[2]["key"]]["reason"] == "no prediction"


def test_unknown_prompt_is_reported(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"prompt": "Never asked.", "response": "x"}])
    code, _ = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 2 and "Never asked." in capsys.readouterr().err


def test_unknown_ids_error_names_the_first_in_file_order(tmp_path, run_cli, kit, capsys):
    rows = [{"id": i, "sql": "SELECT 1"} for i in ("77", "0", "9", "12", "5000", "31", "8", "40")]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    code, _ = run_cli("--benchmark", "bird", "--predictions", preds)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"{preds}: 7 of its 8 bird prediction id(s) are not in the benchmark data (5 examples)" in err
    assert "the first: '77', '9', '12', '5000', '31' ..." in err and "'8'" not in err


# ----------------------------------------------------------------------------------------------- BFCL
def test_python_call_list_parsed_without_eval():
    parsed = parse_python_calls(
        "```\n[get_weather(city='Paris', days=-2), math.hypot(x=3*2, y=[1, 2.5], z={'a': None})]\n```"
    )
    assert parsed.ok
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("get_weather", {"city": "Paris", "days": -2}),
        ("math.hypot", {"x": 6, "y": [1, 2.5], "z": {"a": None}}),
    ]
    assert parse_python_calls("f(x=1)").calls[0].arguments == {"x": 1}  # brackets added, as BFCL does
    # a nested call without keywords stays text, as in BFCL's decoder: nothing is ever executed
    assert parse_python_calls("[f(x=(lambda: 1)())]").calls[0].arguments == {"x": "(lambda: 1)()"}
    for bad in (
        "[__import__('os').system('echo hi')]",
        "[f(x=lambda: 1)]",
        "[f(x=2**1000000)]",
        "hello there",
        "[f(1)]",
    ):
        assert not parse_python_calls(bad).ok, bad


def test_openai_tool_calls_parsing():
    parsed = parse_openai_tool_calls([{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}])
    assert [(c.name, c.arguments) for c in parsed.calls] == [("f", {"a": 1})]
    assert not parse_openai_tool_calls([{"type": "function", "function": {"name": "f", "arguments": "{"}}]).ok


def test_bfcl_formats_score_like_the_project_layout(tmp_path, run_cli, kit):
    rows = [
        {"id": "simple_python_0", "response": "[calculate_triangle_area(base=10, height=5)]"},  # BFCL prompt mode
        {"id": "simple_python_1", "result": "[calculate_triangle_area(base=10, height=5)]"},  # BFCL result field
        {
            "id": "parallel_0",
            "tool_calls": [  # OpenAI style
                {
                    "type": "function",
                    "function": {
                        "name": "spotify.play",
                        "arguments": json.dumps({"artist": "Maroon 5", "duration": 15}),
                    },
                },
                {
                    "type": "function",
                    "function": {
                        "name": "spotify.play",
                        "arguments": json.dumps({"artist": "taylor swift", "duration": 20}),
                    },
                },
            ],
        },
        {"id": "parallel_1", "result": [{"spotify.play": json.dumps({"artist": "Maroon 5", "duration": 15})}]},
    ]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    code, out = run_cli(
        "--benchmark",
        "bfcl",
        "--predictions",
        preds,
        "--bfcl-category",
        "simple_python",
        "--bfcl-category",
        "parallel",
        "--bfcl-category",
        "multiple",
    )
    assert code == 0
    records = kit.read_records(out, "bfcl")
    assert records["simple_python_0"]["verdict"] is True
    assert records["simple_python_1"]["verdict"] is False  # item 1 asks for other values (see test_other_eval)
    assert records["parallel_0"]["verdict"] is True
    assert records["parallel_1"]["verdict"] is False
    summary = kit.read_summary(out)["benchmarks"]["bfcl"]
    assert "multiple" not in summary["by_category"]  # no prediction at all: not run
    assert summary["n"] == 400 + 200 + 200 and summary["n_predicted"] == 4
    assert "(4/800 predicted)" in (out / "results.md").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------------------------- samples
def _naive_pass_at_k(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k) if n - c >= k else 1.0


def test_samples_give_mean_accuracy_and_pass_at_k(tmp_path, run_cli, kit):
    good = BIRD_SQL["0"][0]
    rows = [{"id": "0", "sample": s, "sql": good if s in (0, 3) else "SELECT 2"} for s in range(4)]
    rows += [{"id": "1", "sample": s, "sql": "SELECT title FROM books WHERE genre IS NULL"} for s in range(4)]
    rows += [{"id": "2", "sample": s, "sql": "SELECT 0"} for s in range(4)]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    code, out = run_cli("--benchmark", "bird", "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)["benchmarks"]["bird"]
    # examples 3, 4 have no prediction: 0; example 0: 2 of 4; example 1: 4 of 4; example 2: 0 of 4
    per_example = [0.5, 1.0, 0.0, 0.0, 0.0]
    assert summary["ex"] == pytest.approx(0.3)
    # the standard error is over the 5 examples (their mean over samples), not over the 14 records
    assert summary["ex_stderr"] == pytest.approx(statistics.stdev(per_example) / math.sqrt(5))
    assert summary["correct"] == pytest.approx(1.5)  # an expected count with samples
    samples = summary["samples"]
    assert samples["n_min"] == samples["n_max"] == 4
    assert samples["mean_accuracy"] == pytest.approx(summary["ex"])
    for k in (1, 2, 4):
        values = [_naive_pass_at_k(4, 2, k), _naive_pass_at_k(4, 4, k), 0.0, 0.0, 0.0]
        assert samples["pass_at_k"][f"pass@{k}"] == pytest.approx(sum(values) / 5)
        assert samples["pass_at_k_stderr"][f"pass@{k}"] == pytest.approx(statistics.stdev(values) / math.sqrt(5))
    assert summary["by_difficulty"]["simple"]["count"] == 2
    assert len(kit.read_records_list(out, "bird")) == 12 + 2


def test_responses_list_is_samples_and_plain_repeat_is_a_duplicate(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "m1", "responses": ["a", "b", "c"]}])
    code, out = run_cli("--benchmark", "muldimif", "--predictions", preds)
    assert code == 0 and kit.read_summary(out)["benchmarks"]["muldimif"]["samples"]["n_min"] == 3
    preds = kit.write_jsonl(
        tmp_path / "q.jsonl", [{"id": "m1", "sample": 0, "response": "a"}, {"id": "m1", "response": "b"}]
    )
    code, _ = run_cli("--benchmark", "muldimif", "--predictions", preds)
    assert code == 2 and "duplicate prediction" in capsys.readouterr().err


def test_jsonl_with_a_byte_order_mark(tmp_path, run_cli, kit):
    path = tmp_path / "p.jsonl"
    path.write_text("\ufeff" + json.dumps({"id": "0", "sql": BIRD_SQL["0"][0]}) + "\n", encoding="utf-8")
    code, out = run_cli("--benchmark", "bird", "--predictions", path)
    assert code == 0 and kit.read_records(out, "bird")["0"]["verdict"] is True


def test_jsonl_errors_name_the_file_and_line(tmp_path, run_cli, capsys):
    path = tmp_path / "p.jsonl"
    good = json.dumps({"id": "0", "sql": BIRD_SQL["0"][0]})
    path.write_text(good + "\n\n" + '{"id": "1", "sql": \n', encoding="utf-8")
    code, _ = run_cli("--benchmark", "bird", "--predictions", path)
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:3: invalid JSON" in err
    path.write_text(good + "\n" + json.dumps(["not", "an", "object"]) + "\n", encoding="utf-8")
    code, _ = run_cli("--benchmark", "bird", "--predictions", path)
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:2: expected a JSON object" in err
    path.write_text(good + "\n" + json.dumps({"id": "1", "sql": "SELECT 1"}) + "\n", encoding="utf-8")
    code, _ = run_cli("--benchmark", "bird", "--benchmark", "spider", "--predictions", path)
    err = capsys.readouterr().err
    assert code == 2 and f"{path}:1: no 'benchmark' field" in err


def test_jsonl_row_with_a_line_separator_inside_a_string(tmp_path, run_cli, kit):
    # U+2028 is legal inside a JSON string; a reader splitting with str.splitlines() cut this row in two
    path = tmp_path / "p.jsonl"
    row = {"id": "m1", "response": "The ocean stretches blue\u2028and endless under the sky."}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    code, out = run_cli("--benchmark", "muldimif", "--predictions", path)
    assert code == 0
    records = {r["id"]: r for r in read_jsonl(out / "muldimif.records.jsonl")}  # the response keeps its U+2028
    assert records["m1"]["constraint_results"] == [True, True]


# ----------------------------------------------------------------------------------------------- bad files
@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_empty_predictions_file_is_an_error(tmp_path, run_cli, capsys, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    code, out = run_cli("--benchmark", "bird", "--predictions", path)
    err = capsys.readouterr().err
    assert code == 2 and err == f"error: {path}: no predictions in the file (it is empty)\n"
    assert not out.exists()  # no "0/5 predicted" results


def test_coverage_warning_names_bfcl_categories_only_for_bfcl(tmp_path, run_cli, kit, caplog):
    fixture = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf/data/eval_fixtures/ifeval/input_data.jsonl"
    key = json.loads(fixture.read_text(encoding="utf-8").splitlines()[0])["key"]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": key, "response": "Rain falls."}])
    with caplog.at_level("WARNING"):
        assert run_cli("--benchmark", "ifeval", "--predictions", preds)[0] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["ifeval: 1 of 7 examples have a prediction (the others count as wrong)"]
    caplog.clear()
    preds = kit.write_jsonl(tmp_path / "t.jsonl", [{"id": "irrelevance_0", "response": "No call."}])
    with caplog.at_level("WARNING"):
        args = ("--benchmark", "bfcl", "--bfcl-category", "irrelevance", "--bfcl-category", "parallel")
        assert run_cli(*args, "--predictions", preds)[0] == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "bfcl: 1 of 440 examples have a prediction (the others count as wrong; BFCL categories without any are "
        "left out)"
    ]


def test_spider_pred_sql_with_more_lines_than_the_data(tmp_path, run_cli, capsys):
    pred = tmp_path / "pred.sql"  # the bundled Spider mini has 5 questions
    pred.write_text("".join(f"SELECT {i}\n" for i in range(7)), encoding="utf-8")
    code, _ = run_cli("--benchmark", "spider", "--predictions", f"spider={pred}")
    err = capsys.readouterr().err
    assert code == 2 and err == (
        f"error: {pred}: 7 queries for the 5 spider examples (one query per line, in dev.json order): "
        "queries 6-7 have no example\n"
    )


# ----------------------------------------------------------------------------------------------- chat completions
def _call(name: str, **arguments) -> dict:
    return {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_chat_completion_message_and_choices(tmp_path, run_cli, kit):
    right = _call("calculate_triangle_area", base=10, height=5)  # simple_python_0's reference call
    spotify = [
        _call("spotify.play", artist="Maroon 5", duration=15),
        _call("spotify.play", artist="taylor swift", duration=20),
    ]
    rows = [
        {"id": "simple_python_0", "message": {"role": "assistant", "content": None, "tool_calls": [right]}},
        {  # a whole chat completion with n = 2: each choice is a sample
            "id": "parallel_0",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": None, "tool_calls": spotify}},
                {"index": 1, "message": {"role": "assistant", "content": None, "tool_calls": spotify[:1]}},
            ],
        },
        # no tool_calls: the text is the response (BFCL's prompt-mode python call list here)
        {
            "id": "simple_python_1",
            "message": {"role": "assistant", "content": "[calculate_triangle_area(base=10, height=5)]"},
        },
        {"id": "irrelevance_0", "choices": [{"message": {"role": "assistant", "content": "No function fits."}}]},
    ]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    args = ["--benchmark", "bfcl", "--predictions", preds, "--limit", "2"]
    for category in ("simple_python", "parallel", "irrelevance"):
        args += ["--bfcl-category", category]
    code, out = run_cli(*args)
    assert code == 0
    records = {(r["id"], r.get("sample")): r for r in kit.read_records_list(out, "bfcl")}
    assert records[("simple_python_0", None)]["verdict"] is True
    assert records[("parallel_0", 0)]["verdict"] is True and records[("parallel_0", 1)]["verdict"] is False
    assert records[("simple_python_1", None)]["verdict"] is False  # item 1 asks for other values
    assert records[("irrelevance_0", None)]["verdict"] is True  # no call made
    assert kit.read_summary(out)["benchmarks"]["bfcl"]["by_category"]["parallel"]["correct"] == pytest.approx(0.5)


def test_chat_completion_message_for_text_benchmarks(tmp_path, run_cli, kit, capsys):
    rows = [
        {
            "id": "m1",
            "message": {"role": "assistant", "content": "The ocean stretches blue and endless under the sky."},
        },
        {"id": "m4", "choices": [{"message": {"content": [{"type": "text", "text": "Cats are very independent."}]}}]},
    ]
    code, out = run_cli("--benchmark", "muldimif", "--predictions", kit.write_jsonl(tmp_path / "p.jsonl", rows))
    assert code == 0
    records = kit.read_records(out, "muldimif")
    assert records["m1"]["constraint_results"] == [True, True] and records["m4"]["constraint_results"] == [False]
    bad = kit.write_jsonl(tmp_path / "q.jsonl", [{"id": "m1", "message": {"role": "assistant", "tool_calls": []}}])
    code, _ = run_cli("--benchmark", "muldimif", "--predictions", bad)
    assert code == 2 and f"{bad}:1: the message has no 'content'" in capsys.readouterr().err


def test_spider_pred_sql_with_one_line_too_many_names_that_query(tmp_path, run_cli, capsys):
    """Issue 49, item 11: one surplus line read "queries 6-6 have no example"."""
    pred = tmp_path / "pred.sql"
    pred.write_text("".join(f"SELECT {i}\n" for i in range(6)), encoding="utf-8")
    code, _ = run_cli("--benchmark", "spider", "--predictions", f"spider={pred}")
    err = capsys.readouterr().err
    assert code == 2 and err.endswith(": query 6 has no example\n"), err
