"""End-to-end runs of ``python -m mrtpo_openrlhf.diagnose`` on a tiny random model."""

import json
import math
from pathlib import Path

import pytest

from mrtpo_openrlhf.cli.diagnose import main
from mrtpo_openrlhf.data.jsonl import read_jsonl, write_jsonl

DATA = Path(__file__).resolve().parents[2] / "mrtpo_openrlhf" / "data"

SQL_GOOD = "<think>\nCount the rows of books.\n</think>\n```sql\nSELECT count(*) FROM books\n```"
SQL_BAD = "I think the answer is\n```sql\nSELECT nme, title FROM books WHERE\n```"
END = "Is there anything else I can help with?"


def naive_stats(q):
    """Tokens for 80% of the distance, the top 20% tokens' share and the total, by a plain loop over sorted q."""
    srt, total = sorted(q, reverse=True), sum(q)
    need, acc = 0, 0.0
    while acc < 0.8 * total:
        acc += srt[need]
        need += 1
    top = srt[: max(1, math.ceil(0.2 * len(q)))]
    return {"tokens_for_80pct": need / len(q), "top20_share": sum(top) / total, "total_distance": total}


def test_sql_responses_write_all_files(tmp_path, tiny_model_dir):
    row = read_jsonl(DATA / "sql" / "train_mini.jsonl")[0]  # "How many books are there?"
    responses = tmp_path / "responses.jsonl"
    write_jsonl(
        responses, [{"prompt": row["prompt"], "response": r, "label": row["label"]} for r in (SQL_GOOD, SQL_BAD)]
    )
    out = tmp_path / "out"
    args = ["--model", str(tiny_model_dir), "--data", "sql", "--responses", str(responses), "--out", str(out)]
    assert main(args) == 0
    for name in ("index.html", "relevance.jsonl", "summary.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0

    everything = read_jsonl(out / "relevance.jsonl")
    recs = [r for r in everything if r.get("null") is not True]
    assert [r["reward"] for r in recs] == ["format", "executable", "execution"] * 2
    # the null block, replayed on each response: inline where the format description sits in the prompt,
    # appended where the SQLite error / reference query go
    nulls = {(r["response_index"], r["reward"]) for r in everything if r.get("null") is True}
    assert {name for _, name in nulls} <= {"null:inline", "null:appended"} and {i for i, _ in nulls} == {0, 1}
    for rec in recs:
        if rec["replayed"]:
            assert (rec["null"], rec["response_index"]) in {(n, i) for i, n in nulls}
    good = {r["reward"]: r for r in recs if r["response_index"] == 0}
    bad = {r["reward"]: r for r in recs if r["response_index"] == 1}
    assert good["format"]["value"] == 1.0 and good["execution"]["value"] == 1.0
    assert bad["executable"]["value"] == 0.0 and bad["executable"]["block"]  # the SQLite error is the block
    assert not good["executable"]["replayed"]  # ran fine: empty block, nothing to replay
    for rec in recs:
        if rec["replayed"]:
            assert len(rec["q"]) == len(rec["tokens"]) == len(rec["token_ids"])
            assert sum(rec["q"]) > 0  # removing a block changes a random model's predictions too
            want = naive_stats(rec["q"])
            assert rec["stats"]["tokens_for_80pct"] == pytest.approx(want["tokens_for_80pct"])
            assert rec["stats"]["top20_share"] == pytest.approx(want["top20_share"])
            assert rec["stats"]["total_distance"] == pytest.approx(want["total_distance"], rel=1e-5)
    # the SELECT list span is found and mapped to tokens that really spell it
    sel = good["execution"]["spans"]["select_columns"]
    text = "".join(good["execution"]["tokens"])
    assert [text[s:e] for s, e in sel] == ["count(*)"]
    assert good["execution"]["stats"]["spans"]["select_columns"]["n_tokens"] >= 1

    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_total"] == 6
    assert summary["pairs_replayed"] == sum(r["replayed"] for r in recs) == 5
    assert set(summary["rewards"]) == {"format", "executable", "execution"}
    assert summary["run"]["task"] == "sql"

    page = (out / "index.html").read_text()
    assert page.count('class="heat"') == 5
    assert "<script" not in page.lower()
    assert "&lt;think&gt;" in page


def test_instruction_target_span_through_pipeline(tmp_path, tiny_model_dir):
    prompt = (
        f"Write about rain. Finish your response with this exact phrase {END}. "
        "No other words should follow this phrase."
    )
    label = {
        "instruction_id_list": ["startend:end_checker", "punctuation:no_comma"],
        "kwargs": [{"end_phrase": END}, {}],
    }
    responses = tmp_path / "r.jsonl"
    write_jsonl(responses, [{"prompt": prompt, "response": f"Rain falls softly.\n{END}", "label": label}])
    out = tmp_path / "out"
    assert main(["--model", str(tiny_model_dir), "--responses", str(responses), "--out", str(out)]) == 0
    recs = {r["reward"]: r for r in read_jsonl(out / "relevance.jsonl")}
    assert recs["null:inline"]["null"] is True  # the constraints sit in the prompt: the null is cut like them
    end = recs["startend:end_checker"]
    assert end["value"] == 1.0 and end["replayed"]
    text = "".join(end["tokens"])
    assert [text[s:e] for s, e in end["spans"]["target"]] == [END]
    assert 0 < end["stats"]["spans"]["target"]["token_share"] < 1
    assert "target" not in recs["punctuation:no_comma"]["stats"]["spans"]


def test_bad_inputs_fail_clearly(tmp_path, tiny_model_dir, capsys):
    out = str(tmp_path / "o")
    assert main(["--model", str(tmp_path / "nope"), "--data", "sql", "--out", out]) == 2
    assert "--model" in capsys.readouterr().err
    assert main(["--model", str(tiny_model_dir), "--data", str(tmp_path / "missing.jsonl"), "--out", out]) == 2
    assert "no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "p", "label": {"gold": "SELECT 1", "db_id": "x"}}\n{"prompt": 3, "label": {}}\n')
    assert main(["--model", str(tiny_model_dir), "--data", str(bad), "--out", out]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    assert not Path(out).exists()


@pytest.mark.slow
def test_generation_on_tiny_model(tmp_path, tiny_model_dir):
    out = tmp_path / "gen"
    args = [
        "--model",
        str(tiny_model_dir),
        "--data",
        "tool",
        "--out",
        str(out),
        "--limit",
        "2",
        "--samples-per-prompt",
        "2",
        "--max-new-tokens",
        "12",
    ]
    assert main(args) == 0
    recs = read_jsonl(out / "relevance.jsonl")
    assert len({r["response_index"] for r in recs}) == 4
    assert {r["prompt_index"] for r in recs} == {0, 1}
    assert all(1 <= len(r["token_ids"]) <= 12 for r in recs)
    assert any(r["replayed"] for r in recs)  # the format block is never empty
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["task"] == "tool" and summary["run"]["responses"] == 4


def test_empty_response_and_given_ids(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    row = read_jsonl(DATA / "tool" / "train_mini.jsonl")[0]
    ids = tok("<think>ok</think><tool_call>[]</tool_call>", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    responses = tmp_path / "r.jsonl"
    write_jsonl(
        responses,
        [
            {"prompt": row["prompt"], "response": "", "label": row["label"]},
            {"prompt": row["prompt"], "response": "ignored", "response_ids": ids, "label": row["label"]},
        ],
    )
    out = tmp_path / "out"
    assert main(["--model", str(tiny_model_dir), "--responses", str(responses), "--out", str(out)]) == 0
    recs = [r for r in read_jsonl(out / "relevance.jsonl") if r.get("null") is not True]
    empty = [r for r in recs if r["response_index"] == 0]
    assert all(not r["replayed"] and r["tokens"] == [] for r in empty)
    given = [r for r in recs if r["response_index"] == 1]
    assert all(r["token_ids"] == ids for r in given)
    assert given[0]["reward"] == "format" and given[0]["value"] == 1.0  # scored on the decoded ids, not "ignored"
    assert [r["sample"] for r in recs] == [0, 0, 1, 1]
