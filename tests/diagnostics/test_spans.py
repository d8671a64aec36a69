"""Span locators on hand-written responses, and the character -> token mapping."""

import pytest

from mrtpo_openrlhf.diagnostics.spans import (
    constraint_target_spans,
    locate_spans,
    merge_spans,
    select_column_spans,
    spans_to_token_mask,
    tag_spans,
    token_char_offsets,
    tool_argument_spans,
    tool_function_name_spans,
)


def texts(text, spans):
    return [text[s:e] for s, e in spans]


SQL_RESPONSE = (
    "<think>\nCount per author; use a subquery.\n</think>\n```sql\n"
    "SELECT a.name, count(*) AS n FROM authors AS a WHERE a.id IN (SELECT author_id FROM books)\n"
    "GROUP BY a.name\n```<|im_end|>"
)


def test_tags_in_sql_response():
    assert texts(SQL_RESPONSE, tag_spans(SQL_RESPONSE)) == ["<think>", "</think>", "```sql", "```"]


def test_select_columns():
    assert texts(SQL_RESPONSE, select_column_spans(SQL_RESPONSE)) == ["a.name, count(*) AS n"]


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT DISTINCT title FROM books", "title"),
        ("select (SELECT max(price) FROM books), 'from' from books", "(SELECT max(price) FROM books), 'from'"),
        ("SELECT 1;", "1"),
        ("WITH x AS (SELECT a FROM t) SELECT b , c FROM x", "b , c"),
    ],
)
def test_select_columns_variants(sql, expected):
    text = f"<think>ok</think>\n```sql\n{sql}\n```"
    assert texts(text, select_column_spans(text)) == [expected]


def test_select_columns_absent():
    assert select_column_spans("<think>no query</think> sorry") == []


TOOL_RESPONSE = (
    "<think>Use <tool_call> for weather.</think>\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris, FR", "days": 3, '
    '"opts": {"unit": ["C", "F"]}}}\n</tool_call>'
)


def test_tool_arguments_single_call():
    assert texts(TOOL_RESPONSE, tool_argument_spans(TOOL_RESPONSE)) == ['"Paris, FR"', "3", '{"unit": ["C", "F"]}']
    # tags inside the reasoning are tags too (the format verifier counts them)
    assert texts(TOOL_RESPONSE, tag_spans(TOOL_RESPONSE)) == [
        "<think>",
        "<tool_call>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
    ]


def test_function_name_is_the_name_value_of_each_call():
    """The function reward reads which function is called: the "name" value (not a name quoted in the reasoning)."""
    assert texts(TOOL_RESPONSE, tool_function_name_spans(TOOL_RESPONSE)) == ['"get_weather"']
    text = (
        '<think>call "a"</think><tool_call>[{"name": "a", "arguments": {"x": 1.5}}, '
        '{"arguments": {"y": null}, "name": "b_fn"}]</tool_call>'
    )
    assert texts(text, tool_function_name_spans(text)) == ['"a"', '"b_fn"']
    assert (
        tool_function_name_spans('<think>x</think><tool_call>{"name": "a", "arguments": {"x": 1,}}</tool_call>') == []
    )
    assert tool_function_name_spans('<think>x</think><tool_call>{"arguments": {}}</tool_call>') == []


def test_tool_arguments_parallel_calls_and_invalid_json():
    text = (
        '<think>x</think><tool_call>[{"name": "a", "arguments": {"x": 1.5}}, '
        '{"name": "b", "arguments": {"y": null, "z": "s"}}]</tool_call>'
    )
    assert texts(text, tool_argument_spans(text)) == ["1.5", "null", '"s"']
    assert tool_argument_spans('<think>x</think><tool_call>{"name": "a", "arguments": {"x": 1,}}</tool_call>') == []
    assert tool_argument_spans("<think>x</think> no call") == []


END = "Is there anything else I can help with?"


@pytest.mark.parametrize(
    "text, iid, kwargs, expected",
    [
        (f"Rain falls.\n{END}<|im_end|>", "startend:end_checker", {"end_phrase": END}, [END]),
        (
            f"<think>{END}</think>Answer. is there anything else i can help with?",
            "startend:end_checker",
            {"end_phrase": END},
            ["is there anything else i can help with?"],
        ),
        ("<<A Poem>>\nRain <<not>> here", "detectable_format:title", {}, ["<<A Poem>>"]),
        (
            "Body text.\n\nP.S. see you\n<|im_end|>",
            "detectable_content:postscript",
            {"postscript_marker": "P.S."},
            ["P.S. see you"],
        ),
        (
            "Blue sky, BLUE sea, and rain.",
            "keywords:existence",
            {"keywords": ["blue", "rain"]},
            ["Blue", "BLUE", "rain"],
        ),
        ('"All wrapped."<|im_end|>', "startend:quotation", {}, ['"', '"']),
        ("Training in the rain.", "keywords:forbidden_words", {"forbidden_words": ["rain"]}, ["rain"]),
        ("No end phrase here.", "startend:end_checker", {"end_phrase": END}, []),
        ("Anything.", "punctuation:no_comma", {}, []),
    ],
)
def test_constraint_targets(text, iid, kwargs, expected):
    assert texts(text, constraint_target_spans(text, iid, kwargs)) == expected


def test_tags_follow_the_task_layout():
    text = "<think>a</think>\n```python\nx\n```\n<tool_call>[]</tool_call>"
    assert texts(text, tag_spans(text, "sql")) == ["<think>", "</think>", "```python", "```"]
    assert texts(text, tag_spans(text, "tool")) == ["<think>", "</think>", "<tool_call>", "</tool_call>"]
    assert texts(text, tag_spans(text, "instruction")) == ["<think>", "</think>"]


def test_locate_spans_by_task():
    assert set(locate_spans("sql", SQL_RESPONSE)) == {"tags", "select_columns"}
    assert set(locate_spans("tool", TOOL_RESPONSE)) == {"tags", "function_name", "tool_arguments"}
    out = locate_spans("instruction", f"x {END}", ("startend:end_checker", {"end_phrase": END}))
    assert texts(f"x {END}", out["target"]) == [END]
    with pytest.raises(ValueError, match="unknown task"):
        locate_spans("chess", "x")


def test_merge_and_mask():
    assert merge_spans([(5, 7), (0, 2), (2, 3), (6, 9), (4, 4)]) == [(0, 3), (5, 9)]
    offsets = [(0, 3), (3, 5), (5, 5), (5, 9)]
    assert spans_to_token_mask(offsets, [(4, 6)]) == [False, True, False, True]
    assert spans_to_token_mask(offsets, []) == [False] * 4


class ByteTokenizer:
    """Each id is one byte (a byte-level BPE in miniature): a multi-byte character spans several ids."""

    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode("utf-8", errors="replace")


def test_offsets_with_split_multibyte_character():
    ids = list("aéb".encode())  # a, 0xC3, 0xA9, b
    text, offsets = token_char_offsets(ByteTokenizer(), ids)
    assert text == "aéb"
    assert offsets == [(0, 1), (1, 1), (1, 2), (2, 3)]  # é belongs to the token completing it


def test_offsets_with_real_tokenizer_map_select_list():
    from mrtpo_openrlhf.models.prepare import load_smollm2_tokenizer

    tok = load_smollm2_tokenizer()
    ids = tok(SQL_RESPONSE, add_special_tokens=False)["input_ids"]
    text, offsets = token_char_offsets(tok, ids)
    assert text == SQL_RESPONSE
    assert offsets[0][0] == 0 and offsets[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))  # contiguous, monotone
    mask = spans_to_token_mask(offsets, select_column_spans(text))
    picked = "".join(tok.decode([t]) for t, m in zip(ids, mask) if m)
    assert "a.name, count(*) AS n" in picked and "FROM" not in picked


# The study's other constraint types: each located span is a thing its official checker counts, so the number of
# spans equals the checker's own count (the reference), and the checker's verdict is what that count gives.
_RESPONSE = (
    "<<A Quiet Farm>>\nToday the FARM sleeps, under a WIDE sky, and I wait at [address].\n"
    "* first point with *one highlight*\n* second point, with **bold words**\n- a dash point\n"
    "P.S. see you at [time]"
)


@pytest.mark.parametrize(
    "iid,kwargs,count,checker_kwargs_for_pass",
    [
        ("punctuation:no_comma", {}, 3, None),  # three commas: the checker fails on any
        ("detectable_content:number_placeholders", {}, 2, {"num_placeholders": 2}),
        ("detectable_format:number_bullet_lists", {}, 3, {"num_bullets": 3}),
    ],
)
def test_counted_targets_match_the_official_count(iid, kwargs, count, checker_kwargs_for_pass):
    from mrtpo_openrlhf.tasks.instruction.verifier import build_checker

    spans = constraint_target_spans(_RESPONSE, iid, kwargs)
    assert len(spans) == count
    if checker_kwargs_for_pass is not None:  # the checker, asked for exactly/at least that many, passes
        assert build_checker(iid, checker_kwargs_for_pass).check(_RESPONSE)
        more = {k: v + 1 for k, v in checker_kwargs_for_pass.items()}
        assert not build_checker(iid, more).check(_RESPONSE)
    else:
        assert not build_checker(iid, {}).check(_RESPONSE)
    assert all(_RESPONSE[a:b].strip() for a, b in spans)


def test_highlights_are_the_official_matches():
    from mrtpo_openrlhf.tasks.instruction.verifier import build_checker

    text = "The *first highlight* and **a bold one** and ** ** empty."
    spans = constraint_target_spans(text, "detectable_format:number_highlighted_sections", {})
    assert [text[a:b] for a, b in spans] == ["*first highlight*", "**a bold one**"]
    assert build_checker("detectable_format:number_highlighted_sections", {"num_highlights": 2}).check(text)
    assert not build_checker("detectable_format:number_highlighted_sections", {"num_highlights": 3}).check(text)


def test_capital_words_and_first_word():
    from mrtpo_openrlhf.tasks.instruction.verifier import build_checker

    caps = constraint_target_spans(_RESPONSE, "change_case:capital_word_frequency", {})
    words = [_RESPONSE[a:b] for a, b in caps]
    assert words == ["A", "FARM", "WIDE", "I", "P", "S"]
    checker = build_checker(
        "change_case:capital_word_frequency", {"capital_frequency": 3, "capital_relation": "at least"}
    )
    assert checker.check(_RESPONSE)
    text = "Today is bright. The farm sleeps."
    first = constraint_target_spans(text, "words:keywords_specific_position", {"keyword": "Today", "n": 1, "m": 1})
    assert [text[a:b] for a, b in first] == ["Today"]
    assert constraint_target_spans(text, "words:keywords_specific_position", {"keyword": "farm", "n": 2, "m": 2}) == []
    assert constraint_target_spans("No commas here", "punctuation:no_comma", {}) == []  # satisfied: nothing to read
