"""The null block of the replay diagnostics: where it goes, how it is removed, and that the pipeline replays it."""

import json

from mrtpo_openrlhf.core.replay import context_texts
from mrtpo_openrlhf.data.jsonl import read_jsonl, write_jsonl
from mrtpo_openrlhf.diagnostics.cli import main
from mrtpo_openrlhf.diagnostics.runner import NULL_APPENDED, NULL_INLINE, NULL_TEXT, with_null_blocks

SEP = "\n\n"
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"


def test_inline_null_sits_before_the_first_constraint_and_is_cut_like_one():
    head = "Write about rain. End with Bye. Use no commas."
    prompt = head + SUFFIX
    blocks = ["End with Bye.", "Use no commas."]
    spans = [[18, 31], [32, 46]]
    assert [head[s:e] for s, e in spans] == blocks
    new, nb, ns, nulls = with_null_blocks(prompt, SUFFIX, blocks, spans, "Null here.")
    assert new == "Write about rain. Null here. End with Bye. Use no commas." + SUFFIX
    assert nulls == {NULL_INLINE: 2} and nb == [*blocks, "Null here."]
    assert ns == [[29, 42], [43, 57], [18, 28]]
    full, minus, _ = context_texts(new, nb, SEP, SUFFIX, ns)
    assert full == new
    # the null is cut at its span as a constraint is: the same stray space a cut constraint leaves
    assert minus[2] == "Write about rain.  End with Bye. Use no commas." + SUFFIX
    assert minus[0] == "Write about rain. Null here.  Use no commas." + SUFFIX  # the reward's minus keeps the null


def test_appended_null_goes_last_at_the_end_of_the_user_message():
    prompt = "Count the books." + SUFFIX
    blocks = ["no such column: nme", "", "SELECT count(*) FROM books"]
    new, nb, ns, nulls = with_null_blocks(prompt, SUFFIX, blocks, [None, None, None], "Null here.")
    assert new == prompt and nulls == {NULL_APPENDED: 3} and ns == [None] * 4
    full, minus, _ = context_texts(new, nb, SEP, SUFFIX, ns)
    assert full == "Count the books.\n\nno such column: nme\n\nSELECT count(*) FROM books\n\nNull here." + SUFFIX
    assert minus[3] == "Count the books.\n\nno such column: nme\n\nSELECT count(*) FROM books" + SUFFIX


def test_both_kinds_without_spans_and_switched_off():
    head = "Answer in <think> tags. Count the books."
    prompt = head + SUFFIX
    blocks = ["Answer in <think> tags.", "the reference query"]  # no spans: found where the text occurs
    new, nb, ns, nulls = with_null_blocks(prompt, SUFFIX, blocks, None, "Null.")
    assert new == "Null. Answer in <think> tags. Count the books." + SUFFIX
    assert nulls == {NULL_INLINE: 2, NULL_APPENDED: 3}
    assert ns == [[6, 29], None, [0, 5], None]
    assert with_null_blocks(prompt, SUFFIX, blocks, None, "") == (prompt, blocks, [[0, 23], None], {})


def test_pipeline_replays_the_null_on_every_response(tmp_path, tiny_model_dir):
    end = "Is there anything else I can help with?"
    prompt = (
        f"Write about rain. Finish your response with this exact phrase {end}. "
        "No other words should follow this phrase."
    )
    label = {
        "instruction_id_list": ["startend:end_checker", "punctuation:no_comma"],
        "kwargs": [{"end_phrase": end}, {}],
    }
    rows = [{"prompt": prompt, "response": r, "label": label} for r in (f"Rain falls softly.\n{end}", "Rain, rain.")]
    write_jsonl(tmp_path / "r.jsonl", rows)
    out = tmp_path / "out"
    assert main(["--model", str(tiny_model_dir), "--responses", str(tmp_path / "r.jsonl"), "--out", str(out)]) == 0
    recs = read_jsonl(out / "relevance.jsonl")
    nulls = [r for r in recs if r.get("null") is True]
    # the end phrase's sentence is in the prompt (inline null); the no-comma block is not, so it is appended
    # (as in training) and gets the appended null
    want = [(i, n) for i in (0, 1) for n in (NULL_INLINE, NULL_APPENDED)]
    assert [(r["response_index"], r["reward"]) for r in nulls] == want
    assert all(r["replayed"] and sum(r["q"]) > 0 and r["block"] == NULL_TEXT for r in nulls)
    pairs = [r for r in recs if r.get("null") is not True]
    for r in pairs:  # every replayed reward is compared against the null of its own kind, in its own response
        assert r["null"] == (NULL_INLINE if r["reward"] == "startend:end_checker" else NULL_APPENDED)
        assert r["controls"]["null"] is not None and 0 < r["controls"]["random"]["tokens_for_80pct"] <= 1
    end_rec = next(r for r in pairs if r["reward"] == "startend:end_checker" and r["response_index"] == 0)
    null_q = next(r for r in nulls if r["response_index"] == 0 and r["reward"] == NULL_INLINE)["q"]
    from transformers import AutoTokenizer

    from mrtpo_openrlhf.diagnostics.spans import spans_to_token_mask, token_char_offsets

    _, offsets = token_char_offsets(AutoTokenizer.from_pretrained(str(tiny_model_dir)), end_rec["token_ids"])
    mask = spans_to_token_mask(offsets, [tuple(sp) for sp in end_rec["spans"]["target"]])
    assert any(mask)
    want = sum(q for q, m in zip(null_q, mask) if m) / sum(null_q)  # the null's share on the end phrase's span
    got = end_rec["controls"]["null"]["spans"]["target"]["distance_share"]
    assert abs(got - want) < 1e-6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pairs_total"] == 4 and summary["null"]["modes"] == {NULL_INLINE: 2, NULL_APPENDED: 2}
    nc = summary["null_control"]["startend:end_checker"]
    assert nc["responses"] == 2 and set(nc["spans"]) <= {"target", "tags"}
    assert summary["run"]["null block"] == NULL_TEXT
    page = (out / "index.html").read_text()
    assert "<h2>Against the null block</h2>" in page and page.count('<tr><td class="name">') >= 2
    assert (
        main(
            [
                "--model",
                str(tiny_model_dir),
                "--responses",
                str(tmp_path / "r.jsonl"),
                "--out",
                str(tmp_path / "o2"),
                "--null",
                "",
            ]
        )
        == 0
    )
    assert not any(r.get("null") is True for r in read_jsonl(tmp_path / "o2" / "relevance.jsonl"))
    assert json.loads((tmp_path / "o2" / "summary.json").read_text())["null_control"] == {}
