"""IFEval, IFBench, MulDimIF, BFCL scoring through ``--predictions``, the combined table, and bad inputs."""

import json
import math
from importlib.resources import files
from pathlib import Path

import pytest

from mrtpo_openrlhf.tasks.tool.verifier import load_bfcl, reference_calls, render_calls

EVAL_MINI = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data" / "instructions" / "eval_mini.jsonl"


def test_ifeval_strict_and_loose(tmp_path, run_cli, kit):
    # eval_mini.jsonl carries hand-checked strict/loose verdicts for each instruction of each response.
    rows = [json.loads(line) for line in EVAL_MINI.read_text(encoding="utf-8").splitlines()]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": r["key"], "response": r["response"]} for r in rows])
    code, out = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 0
    records = kit.read_records(out, "ifeval")
    for r in rows:
        assert records[r["key"]]["follow_instruction_list_strict"] == r["strict"], r["key"]
        assert records[r["key"]]["follow_instruction_list_loose"] == r["loose"], r["key"]
    summary = kit.read_summary(out)["benchmarks"]["ifeval"]
    strict = [x for r in rows for x in r["strict"]]
    loose = [x for r in rows for x in r["loose"]]
    n = len(rows)
    for mode in ("strict", "loose"):  # fractions; prompt-level with its binomial standard error over prompts
        p = sum(all(r[mode]) for r in rows) / n
        assert summary[f"prompt_{mode}"] == pytest.approx(p)
        assert summary[f"prompt_{mode}_stderr"] == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
    assert summary["inst_strict"] == pytest.approx(sum(strict) / len(strict))
    assert summary["inst_loose"] == pytest.approx(sum(loose) / len(loose))
    assert "inst_strict_stderr" not in summary  # instructions of one prompt are not independent draws


IFBENCH_CASES = {  # key -> (response, official verdict), checked by hand against the constraint text
    "17": ("Hardship can help: 2 towns rebuilt within 5 years.", True),  # exactly 2 numbers
    "41": (" ".join(["apple"] * 72), True),  # between 71 and 73 words
    "54": ("Lua is a small scripting language.", False),  # fewer than 85 unique words
    "36": ("No punctuation here at all", False),  # every standard punctuation mark is required
}


def test_ifbench_hand_checked(tmp_path, run_cli, kit):
    source = Path(str(files("ifbench") / "data" / "IFBench_test.jsonl"))
    data_dir = tmp_path / "ifbench"
    data_dir.mkdir()
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    kit.write_jsonl(data_dir / "IFBench_test.jsonl", [r for r in rows if str(r["key"]) in IFBENCH_CASES])
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": k, "response": v[0]} for k, v in IFBENCH_CASES.items()])
    code, out = run_cli("--benchmark", "ifbench", "--data-dir", data_dir, "--predictions", preds)
    assert code == 0
    records = kit.read_records(out, "ifbench")
    for key, (_, expected) in IFBENCH_CASES.items():
        assert records[key]["verdict"] is expected, (key, records[key]["reason"])
    summary = kit.read_summary(out)["benchmarks"]["ifbench"]
    assert summary["prompt_strict"] == pytest.approx(0.5) and summary["inst_strict"] == pytest.approx(0.5)
    assert summary["prompt_strict_stderr"] == pytest.approx(math.sqrt(0.25 / 3))


MULDIMIF_PREDICTIONS = [  # bundled fixture test.json; (id, response, per-constraint verdicts)
    ("m1", "The ocean stretches blue and endless under the sky.", [True, True]),
    ("m2", '{"Capital": "paris"}', [True, False]),  # valid JSON, but "Capital" is not lowercase
    ("m3", "| fruit | color |\n|---|---|\n| apple | red |\n| banana | yellow |", [True]),
    ("m4", "Cats are very independent.", [False]),
]


def test_muldimif(tmp_path, run_cli, kit):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": i, "response": r} for i, r, _ in MULDIMIF_PREDICTIONS])
    code, out = run_cli("--benchmark", "muldimif", "--predictions", preds)
    assert code == 0
    records = kit.read_records(out, "muldimif")
    for i, _, expected in MULDIMIF_PREDICTIONS:
        assert records[i]["constraint_results"] == expected
    summary = kit.read_summary(out)["benchmarks"]["muldimif"]
    assert summary["all_constraints"] == pytest.approx(0.5)
    assert summary["all_constraints_stderr"] == pytest.approx(math.sqrt(0.25 / 3))  # 2 of 4 items
    assert summary["constraint_level"] == pytest.approx(4 / 6)
    assert summary["by_category"]["Content"] == {"accuracy": 0.5, "stderr": 0.5, "correct": 1, "count": 2}
    assert summary["by_category"]["Language"] == {"accuracy": 0.0, "stderr": None, "correct": 0, "count": 1}


def _tool(payload) -> str:
    return f"<think>\nok\n</think>\n<tool_call>\n{json.dumps(payload)}\n</tool_call>"


BFCL_CASES = [  # (id, response, verdict), against the installed BFCL v4 data
    ("simple_python_0", _tool({"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}), True),
    ("simple_python_1", _tool({"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}), False),
    (
        "parallel_0",
        _tool(
            [
                {"name": "spotify.play", "arguments": {"artist": "Maroon 5", "duration": 15}},
                {"name": "spotify.play", "arguments": {"artist": "taylor swift", "duration": 20}},
            ]
        ),
        True,
    ),
    ("parallel_1", _tool([]), False),
    ("irrelevance_0", _tool([]), True),
    ("irrelevance_1", _tool({"name": "determine_body_mass_index", "arguments": {"weight": 1.0, "height": 2.0}}), False),
]


def test_bfcl(tmp_path, run_cli, kit):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": i, "response": r} for i, r, _ in BFCL_CASES])
    code, out = run_cli(
        "--benchmark",
        "bfcl",
        "--predictions",
        preds,
        "--limit",
        "2",
        "--bfcl-category",
        "simple_python",
        "--bfcl-category",
        "parallel",
        "--bfcl-category",
        "irrelevance",
    )
    assert code == 0
    records = kit.read_records(out, "bfcl")
    for i, _, expected in BFCL_CASES:
        assert records[i]["verdict"] is expected, (i, records[i]["reason"])
    summary = kit.read_summary(out)["benchmarks"]["bfcl"]
    assert summary["by_category"]["parallel"] == {"accuracy": 0.5, "stderr": 0.5, "correct": 1, "count": 2}
    assert summary["non_live_ast"] is None  # java/javascript/multiple not run: BFCL shows N/A
    assert summary["ast_mean"] == pytest.approx(0.5)  # simple_python 1/2, parallel 1/2
    # mean of two independent categories: sqrt((se_1 / 2)^2 + (se_2 / 2)^2), each se = sqrt(0.25 / 1)
    assert summary["ast_mean_stderr"] == pytest.approx(math.sqrt(2 * (0.5 / 2) ** 2))
    assert summary["headline"] == {"BFCL AST": pytest.approx(0.5)}


def test_bfcl_reference_calls_score_full_marks_on_a_category(tmp_path, run_cli, kit):
    items = load_bfcl("simple_python")[:40]
    rows = [
        {"id": it.id, "response": "<think>x</think>" + render_calls(reference_calls(it.ground_truth, it.functions))}
        for it in items
    ]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    code, out = run_cli(
        "--benchmark", "bfcl", "--bfcl-category", "simple_python", "--limit", "40", "--predictions", preds
    )
    assert code == 0
    assert kit.read_summary(out)["benchmarks"]["bfcl"]["by_category"]["simple_python"] == {
        "accuracy": 1.0,
        "stderr": 0.0,
        "correct": 40,
        "count": 40,
    }


def test_combined_table_with_average(tmp_path, run_cli, kit):
    rows = [{"benchmark": "muldimif", "id": i, "response": r} for i, r, _ in MULDIMIF_PREDICTIONS]
    rows += [{"benchmark": "bird", "id": "0", "sql": "SELECT COUNT(*) FROM flights WHERE departure LIKE '2024-05-01%'"}]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    code, out = run_cli("--benchmark", "bird", "--benchmark", "muldimif", "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)
    assert summary["average"] == pytest.approx((0.2 + 0.5) / 2)
    table = (out / "results.md").read_text(encoding="utf-8")
    # BIRD 1 of 5: se sqrt(0.2 * 0.8 / 4) = 0.2; MulDimIF 2 of 4: sqrt(0.25 / 3) = 0.2887
    assert "| BIRD EX | MulDimIF | Avg |" in table
    assert "| 0.2000 ± 0.2000 (1/5 predicted) | 0.5000 ± 0.2887 | 0.3500 |" in table


# ----------------------------------------------------------------------------------------------- bad inputs
def test_missing_data_dir_names_the_layout(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "0", "sql": "SELECT 1"}])
    code, _ = run_cli("--benchmark", "spider", "--data-dir", tmp_path / "nope", "--predictions", preds)
    err = capsys.readouterr().err
    assert code == 2 and "not found" in err and "database/<db_id>/<db_id>.sqlite" in err


def test_malformed_dev_json(tmp_path, run_cli, kit, capsys):
    data = kit.make_spider_dir(tmp_path / "spider", [{"db_id": "school", "question": "q", "query": "SELECT 1"}])
    (data / "dev.json").write_text('[{"db_id": "school", "question": "q"', encoding="utf-8")
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "0", "sql": "SELECT 1"}])
    code, _ = run_cli("--benchmark", "spider", "--data-dir", data, "--predictions", preds)
    err = capsys.readouterr().err
    assert code == 2 and "invalid JSON" in err and "dev.json" in err
    (data / "dev.json").write_text('[{"db_id": "school", "question": "q"}]', encoding="utf-8")
    code, _ = run_cli("--benchmark", "spider", "--data-dir", data, "--predictions", preds)
    err = capsys.readouterr().err
    assert code == 2 and "'query' is missing" in err


def test_unknown_prediction_ids(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "999", "sql": "SELECT 1"}, {"id": "0", "sql": "SELECT 1"}])
    code, _ = run_cli("--benchmark", "bird", "--predictions", preds)
    err = capsys.readouterr().err
    assert code == 2 and "'999'" in err and "not in the benchmark data" in err


def test_predictions_without_benchmark_field_for_several_benchmarks(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "0", "response": "x"}])
    code, _ = run_cli("--benchmark", "bird", "--benchmark", "muldimif", "--predictions", preds)
    assert code == 2 and "no 'benchmark' field" in capsys.readouterr().err
    code, _ = run_cli("--benchmark", "bird", "--benchmark", "muldimif", "--predictions", f"bird={preds}")
    err = capsys.readouterr().err  # a requested benchmark without any prediction is not scored as 0
    assert code == 2 and err.count("\n") == 1 and "muldimif: none of its 4 examples has a prediction" in err
    more = kit.write_jsonl(tmp_path / "m.jsonl", [{"id": "m1", "response": "x"}])
    args = (
        "--benchmark",
        "bird",
        "--benchmark",
        "muldimif",
        "--predictions",
        f"bird={preds}",
        "--predictions",
        f"muldimif={more}",
    )
    code, out = run_cli(*args)
    assert code == 0 and (out / "bird.records.jsonl").is_file()


def test_duplicate_prediction_ids(tmp_path, run_cli, kit, capsys):
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": "0", "sql": "SELECT 1"}, {"id": 0, "sql": "SELECT 2"}])
    code, _ = run_cli("--benchmark", "bird", "--predictions", preds)
    assert code == 2 and "duplicate prediction" in capsys.readouterr().err


def test_unsupported_instructions_reported_separately(tmp_path, run_cli, kit):
    from mrtpo_openrlhf.tasks.instruction.verifier.text import nltk_resource_missing

    if nltk_resource_missing("taggers/averaged_perceptron_tagger_eng/") is None:
        pytest.skip("an NLTK POS tagger is installed here: words:start_verb is supported")
    data_dir = tmp_path / "ifbench"
    data_dir.mkdir()
    rows = [
        {
            "key": k,
            "prompt": f"p{k}",
            "instruction_id_list": ["words:start_verb", "count:numbers"],
            "kwargs": [{}, {"N": 2}],
        }
        for k in ("a", "b", "c")
    ]
    kit.write_jsonl(data_dir / "IFBench_test.jsonl", rows)
    # a: 2 numbers (followed), b: 3 numbers (not followed), c: no prediction
    preds = kit.write_jsonl(
        tmp_path / "p.jsonl", [{"id": "a", "response": "Go 1 to 2."}, {"id": "b", "response": "Go 1 to 2 or 3."}]
    )
    code, out = run_cli("--benchmark", "ifbench", "--data-dir", data_dir, "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)["benchmarks"]["ifbench"]
    assert summary["n_unsupported"] == 2  # a and b; c has no prediction, so nothing of it was scored
    assert summary["prompt_strict"] == 0.0 and summary["inst_strict"] == pytest.approx(1 / 6)
    without = summary["without_unsupported"]
    assert without["n"] == 3 and without["prompt_strict"] == pytest.approx(1 / 3)
    assert without["inst_strict"] == pytest.approx(1 / 4)  # a:numbers ok; b:numbers, both of c (missing) fail
    assert summary["headline_without_unsupported"]["IFBench prompt"] == pytest.approx(1 / 3)
    table = (out / "results.md").read_text(encoding="utf-8")
    assert "0.0000 ± 0.0000 (2/3 predicted; 2 unsupported as failed; without: 0.3333)" in table
