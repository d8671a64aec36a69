"""The result files through ``eval/run.py``'s CLI: the fraction schema, an existing --out, file modes, and the files
the official harnesses write (IFEval's eval_results_*.jsonl, BFCL's *_score.json)."""

import contextlib
import io
import json
import math
import os
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mrtpo_openrlhf.cli.evaluate import main
from mrtpo_openrlhf.paths import REPO_ROOT

EVAL_MINI = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data" / "instructions" / "eval_mini.jsonl"
BIRD_RIGHT = "SELECT COUNT(flight_id) FROM flights WHERE departure LIKE '2024-05-01%'"  # bundled BIRD mini, id 0


def _eval_mini():
    return [json.loads(line) for line in EVAL_MINI.read_text(encoding="utf-8").splitlines()]


def _files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------- --out
def test_existing_out_is_refused_unless_overwrite(tmp_path, kit, capsys):
    out = tmp_path / "eval"
    bird = kit.write_jsonl(tmp_path / "b.jsonl", [{"id": "0", "sql": BIRD_RIGHT}])
    muldimif = kit.write_jsonl(tmp_path / "m.jsonl", [{"id": "m1", "response": "The ocean is wide."}])
    first = ["--benchmark", "bird", "--benchmark", "muldimif", "--predictions", f"bird={bird}"]
    assert main([*first, "--predictions", f"muldimif={muldimif}", "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in _files(out)}
    capsys.readouterr()

    code = main(["--benchmark", "bird", "--predictions", str(bird), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"--out {out} already holds results" in err and "--overwrite" in err
    assert {p: p.read_bytes() for p in _files(out)} == before  # nothing was touched

    (out / "notes.txt").write_text("mine", encoding="utf-8")  # not a file of the previous run: kept
    assert main(["--benchmark", "bird", "--predictions", str(bird), "--out", str(out), "--overwrite"]) == 0
    names = {str(p.relative_to(out)) for p in _files(out)}
    assert names == {"bird.records.jsonl", "summary.json", "results.md", "notes.txt"}  # no stale muldimif file
    assert kit.read_summary(out)["files"] == ["bird.records.jsonl", "results.md", "summary.json"]

    empty = tmp_path / "empty"
    empty.mkdir()  # an existing but empty folder is fine
    assert main(["--benchmark", "bird", "--predictions", str(bird), "--out", str(empty)]) == 0


def test_out_that_is_a_file(tmp_path, kit, capsys):
    bird = kit.write_jsonl(tmp_path / "b.jsonl", [{"id": "0", "sql": BIRD_RIGHT}])
    code = main(["--benchmark", "bird", "--predictions", str(bird), "--out", str(bird)])
    assert code == 2 and "is a file, not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_every_result_file_has_the_mode_of_a_new_file(tmp_path, kit, umask, mode):
    rows = [{"id": r["key"], "response": r["response"]} for r in _eval_mini()]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    bfcl = kit.write_jsonl(tmp_path / "t.jsonl", [{"id": "irrelevance_0", "response": "No call."}])
    old = os.umask(umask)
    try:
        args = ["--benchmark", "ifeval", "--benchmark", "bfcl", "--bfcl-category", "irrelevance"]
        args += ["--predictions", f"ifeval={preds}", "--predictions", f"bfcl={bfcl}", "--out", str(tmp_path / "o")]
        assert main(args) == 0
    finally:
        os.umask(old)
    files = _files(tmp_path / "o")
    assert len(files) == 7  # records x2, summary, results, IFEval strict/loose, one BFCL score file
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {mode}  # records files were 0600 before


# ----------------------------------------------------------------------------------------------- schema
def test_summary_is_fractions_with_stderr_and_provenance(tmp_path, run_cli, kit):
    rows = _eval_mini()
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": r["key"], "response": r["response"]} for r in rows])
    code, out = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)
    assert summary["schema_version"] == 2 and summary["scores"].startswith("fractions in [0, 1]")
    meta = summary["meta"]
    assert meta["backend"] is None and meta["device"] is None  # predictions: nothing generated
    import torch

    assert meta["versions"]["torch"] == torch.__version__ and meta["versions"]["openrlhf"] == "0.11.2"
    bench = summary["benchmarks"]["ifeval"]
    n, p = len(rows), sum(all(r["strict"]) for r in rows) / len(rows)
    assert 0 <= bench["prompt_strict"] <= 1 and bench["headline"]["IFEval prompt"] == pytest.approx(p)
    assert bench["headline_stderr"] == {
        "IFEval prompt": pytest.approx(math.sqrt(p * (1 - p) / (n - 1))),
        "IFEval inst": None,  # a mean over instructions: no standard error
    }
    assert summary["average"] == pytest.approx((bench["prompt_strict"] + bench["inst_strict"]) / 2)


def test_results_md_has_loose_scores_and_per_instruction_tables(tmp_path, run_cli, kit):
    rows = _eval_mini()
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": r["key"], "response": r["response"]} for r in rows])
    code, out = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 0
    text = (out / "results.md").read_text(encoding="utf-8")
    n = len(rows)
    cells = []
    for mode in ("strict", "loose"):
        p = sum(all(r[mode]) for r in rows) / n
        cells.append(f"{p:.4f} ± {math.sqrt(p * (1 - p) / (n - 1)):.4f}")
    assert f"| prompt | {cells[0]} | {cells[1]} |" in text
    flat = {mode: [x for r in rows for x in r[mode]] for mode in ("strict", "loose")}
    inst = [sum(flat[m]) / len(flat[m]) for m in ("strict", "loose")]
    assert f"| instruction | {inst[0]:.4f} | {inst[1]:.4f} |" in text
    # per instruction id, hand-counted from eval_mini.jsonl
    per_id: dict[str, list[tuple[bool, bool]]] = {}
    for r in rows:
        for iid, s, lo in zip(r["instruction_id_list"], r["strict"], r["loose"]):
            per_id.setdefault(iid, []).append((s, lo))
    assert "per instruction (instruction-level)" in text and "| instruction | strict | loose | count |" in text
    for iid, pairs in per_id.items():
        strict, loose = sum(s for s, _ in pairs) / len(pairs), sum(lo for _, lo in pairs) / len(pairs)
        assert f"| {iid} | {strict:.4f} | {loose:.4f} | {len(pairs)} |" in text, iid
    assert "per instruction group (instruction-level)" in text


# ----------------------------------------------------------------------------------------------- official files
def test_ifeval_official_result_files(tmp_path, run_cli, kit, monkeypatch):
    """eval_results_{strict,loose}.jsonl in IFEval evaluation_main's format: the rows the official
    ``OutputExample``/``write_outputs`` (as shipped by the installed ifbench package) write, and its
    ``generate_report`` on them gives the summary's numbers."""
    # evaluation_lib imports the instruction registry (spaCy, not installed); the output code never uses it
    monkeypatch.setitem(sys.modules, "ifbench.instructions_registry", types.ModuleType("ifbench.instructions_registry"))
    monkeypatch.delitem(sys.modules, "ifbench.evaluation_lib", raising=False)
    from ifbench import evaluation_lib as official

    rows = _eval_mini()
    given = rows[:-1]  # the last prompt has no prediction: the official code would see a blank response
    preds = kit.write_jsonl(tmp_path / "p.jsonl", [{"id": r["key"], "response": r["response"]} for r in given])
    code, out = run_cli("--benchmark", "ifeval", "--predictions", preds)
    assert code == 0
    summary = kit.read_summary(out)["benchmarks"]["ifeval"]
    for mode in ("strict", "loose"):
        lines = (out / "ifeval" / f"eval_results_{mode}.jsonl").read_text(encoding="utf-8").splitlines()
        ours = [json.loads(line) for line in lines]
        assert len(ours) == len(rows)
        expected = [
            official.OutputExample(
                instruction_id_list=r["instruction_id_list"],
                prompt=r["prompt"],
                response=r["response"] if r in given else "",
                follow_all_instructions=all(r[mode]) if r in given else False,
                follow_instruction_list=r[mode] if r in given else [False] * len(r[mode]),
            )
            for r in rows
        ]
        official.write_outputs(str(tmp_path / f"official_{mode}.jsonl"), expected)
        theirs = [json.loads(line) for line in (tmp_path / f"official_{mode}.jsonl").read_text().splitlines()]
        assert ours == theirs and [list(o) for o in ours] == [list(t) for t in theirs]  # values and key order
        with contextlib.redirect_stdout(io.StringIO()):  # it also prints the report
            metrics = official.generate_report([official.OutputExample(**o) for o in ours], mode)
        assert metrics[f"{mode}:prompt-level"] == pytest.approx(summary[f"prompt_{mode}"])
        assert metrics[f"{mode}:instruction-level"] == pytest.approx(summary[f"inst_{mode}"])
        for iid, stats in {**summary["by_group"], **summary["by_instruction"]}.items():  # its tier0 and tier1
            assert metrics[f"{mode}:{iid}"] == pytest.approx(stats[mode]), iid


BFCL_TOOL = '<tool_call>\n{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}\n</tool_call>'


def test_bfcl_score_files_with_correct_and_total_counts(tmp_path, run_cli, kit):
    rows = [  # simple_python_0 asks for base 10 / height 5, item 1 for other values (tests/eval/test_other_eval)
        {"id": "simple_python_0", "response": BFCL_TOOL},
        {"id": "simple_python_1", "response": BFCL_TOOL},
        {"id": "irrelevance_0", "response": "None of these functions fits."},
    ]
    preds = kit.write_jsonl(tmp_path / "p.jsonl", rows)
    args = ["--benchmark", "bfcl", "--predictions", preds, "--limit", "3"]
    code, out = run_cli(*args, "--bfcl-category", "simple_python", "--bfcl-category", "irrelevance")
    assert code == 0
    summary = kit.read_summary(out)["benchmarks"]["bfcl"]
    simple = summary["by_category"]["simple_python"]
    assert (simple["correct"], simple["count"]) == (1, 3)  # simple_python_2 has no prediction: wrong
    folder = out / "bfcl" / "predictions" / "non_live"
    score = [json.loads(line) for line in (folder / "BFCL_v4_simple_python_score.json").read_text().splitlines()]
    assert score[0] == {"accuracy": pytest.approx(1 / 3), "correct_count": 1, "total_count": 3}
    assert [(e["id"], e["valid"], e["test_category"]) for e in score[1:]] == [
        ("simple_python_1", False, "simple_python"),
        ("simple_python_2", False, "simple_python"),
    ]
    assert score[2]["error"] == ["no prediction"]
    irrelevance = [json.loads(line) for line in (folder / "BFCL_v4_irrelevance_score.json").read_text().splitlines()]
    assert irrelevance[0] == {"accuracy": pytest.approx(1 / 3), "correct_count": 1, "total_count": 3}
    # issue 49, item 6: a wrong answer's entry has the fields of BFCL's own (eval_runner._evaluate_single_ast_entry
    # after ast_checker), with the test entry and possible answer as bfcl-eval's data files hold them
    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH

    def bfcl_row(path, item_id):
        return next(json.loads(ln) for ln in path.read_text().splitlines() if json.loads(ln)["id"] == item_id)

    wrong = score[1]
    assert set(wrong) == {
        "id", "model_name", "test_category", "valid", "error", "error_type", "prompt", "model_result_raw",
        "model_result_decoded", "possible_answer",
    }  # fmt: skip
    question = bfcl_row(PROMPT_PATH / "BFCL_v4_simple_python.json", "simple_python_1")
    answer = bfcl_row(POSSIBLE_ANSWER_PATH / "BFCL_v4_simple_python.json", "simple_python_1")
    assert wrong["prompt"] == {k: question[k] for k in ("id", "question", "function")}
    assert wrong["possible_answer"] == answer["ground_truth"]
    assert wrong["model_result_raw"] == BFCL_TOOL
    assert wrong["model_result_decoded"] == [{"calculate_triangle_area": {"base": 10, "height": 5}}]
    assert wrong["error_type"] == "simple_function_checker:wrong_func_name"  # item 1 asks for another function
    assert score[2]["error_type"] == "ast_decoder:decoder_failed" and score[2]["model_result_decoded"] is None
    for entry in irrelevance[1:]:  # BFCL's relevance entries: model_result and decoded_result
        assert entry["error_type"] == "irrelevance_error:decoder_success" and "decoded_result" in entry


def test_eval_run_py_runs_this_checkout(tmp_path, kit):
    """``python eval/run.py`` from another folder runs this checkout's code (not another installed copy), and
    summary.json names its commit."""
    preds = kit.write_jsonl(tmp_path / "b.jsonl", [{"id": "0", "sql": BIRD_RIGHT}])
    out = tmp_path / "o"
    args = [sys.executable, str(REPO_ROOT / "eval" / "run.py"), "--benchmark", "bird"]
    done = subprocess.run(
        [*args, "--predictions", str(preds), "--out", str(out)], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = kit.read_summary(out)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert summary["schema_version"] == 2 and summary["meta"]["git"]["commit"] == head.stdout.strip()
    assert "| predictions | 0.2000 ± 0.2000 (1/5 predicted) | 0.2000 |" in done.stdout
