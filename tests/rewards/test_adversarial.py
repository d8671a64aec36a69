"""A fast subset of the adversarial corpus (``adversarial_corpus.py``): every reward call returns in time.

Payloads are as long as a verifier reads (the response bound, less the layout around them), which is where the
quadratic patterns of issue 15 took 10 s to minutes; the oversize family sends 1 MB. The bound asserted here is the
issue's 3 s per call, on CPU time (robust to a loaded machine); ``benchmarks/adversarial.py`` prints the measured
worst wall and CPU times and memory. The full sweep
(every instruction checker on every flood) is marked slow.
"""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import adversarial_corpus as corpus  # noqa: E402

from mrtpo_openrlhf.tasks import get_reward_func  # noqa: E402
from mrtpo_openrlhf.verifiers.response import MAX_RESPONSE_CHARS  # noqa: E402

SIZE = MAX_RESPONSE_CHARS - 200
LIMIT_S = 3.0
# the checkers whose official patterns were quadratic, and the ones that read the whole text in other ways
HOT_CHECKERS = (
    "detectable_format:number_bullet_lists",
    "detectable_content:postscript",
    "detectable_content:number_placeholders",
    "detectable_format:title",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "length_constraints:number_sentences",
    "length_constraints:number_paragraphs",
)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("adversarial")


@pytest.fixture(scope="module")
def warm(workdir):
    """The one-time loads a running server already has: gold results, the NLTK punkt model, langdetect profiles."""
    for case in corpus.sql_compare_cases(workdir) + corpus.instruction_cases(100):
        if case.name.split("/")[0] in HOT_CHECKERS + ("muldimif",):
            _score(case)


def _score(case):
    """(CPU seconds, output) of one reward call. CPU time, not wall time: the machine running the tests may be
    shared, and what a regression to a quadratic scan changes is the work done (wall figures: the benchmark)."""
    func = get_reward_func(case.task)
    start = time.process_time()
    out = func([case.query], [case.prompt], [case.label])
    took = time.process_time() - start
    assert len(out["rewards"]) == 1
    return took, out


def _assert_all_in_time(cases):
    slow = []
    for case in cases:
        took, _ = _score(case)
        if took > LIMIT_S:
            slow.append(f"{case.family}/{case.name}: {took:.2f} s")
    assert not slow, slow


SQL_CASES = {case.name: case for case in corpus.sql_cases(SIZE)}


@pytest.mark.parametrize("name", sorted(SQL_CASES))
def test_sql_case_within_the_limit(name, warm):
    took, out = _score(SQL_CASES[name])
    assert took < LIMIT_S
    if SQL_CASES[name].family == "sql_exec":  # none of these queries may count as one that ran
        assert out["extra_logs"]["mrtpo_reward_values"][1] == 0.0 or name in (
            "big_literal",
            "in_list",
            "runaway_cross_join",
        )


def test_sql_compare_cases_within_the_limit(workdir, warm):
    _assert_all_in_time(corpus.sql_compare_cases(workdir))


def test_hot_instruction_checkers_and_muldimif_within_the_limit(warm):
    _assert_all_in_time(
        [c for c in corpus.instruction_cases(SIZE) if c.name.split("/")[0] in HOT_CHECKERS + ("muldimif",)]
    )


def test_tool_and_oversize_cases_within_the_limit():
    _assert_all_in_time(corpus.tool_cases(SIZE) + corpus.oversize_cases())


def test_oversize_responses_lose_every_reward_with_the_reason():
    for case in corpus.oversize_cases():
        if case.name.split("/")[1] in ("newlines", "spaces", "space_newline", "stacked_end_markers"):
            continue  # whitespace and end markers are stripped before the bound applies: these are short responses
        _, out = _score(case)
        assert out["rewards"].item() == 0.0, case.name
        assert all("longer than the" in r for r in out["extra_logs"]["mrtpo_reward_reasons"]), case.name


def test_correct_answer_padded_with_newlines_still_scores():
    # the 34.6 s case: a correct 3-bullet answer followed by 64k newlines
    case = next(c for c in corpus.instruction_cases(SIZE, per_checker=False) if c.name == "bullets_padded")
    took, out = _score(case)
    assert out["rewards"].item() == 1.0 and took < LIMIT_S


def test_stacked_end_markers_strip_in_linear_time():
    from mrtpo_openrlhf.verifiers.response import response_from_query

    query = "prompt" + "answer" + "<|im_end|>\n" * 100_000  # 1.1 MB: 3.5 s with a copy per marker
    start = time.process_time()
    assert response_from_query(query, "prompt") == "answer"
    assert time.process_time() - start < 0.5


def test_unclosed_tool_call_tags_parse_in_linear_time():
    from mrtpo_openrlhf.tasks.tool.verifier import parse_tool_calls

    text = "<think>t</think>" + "<tool_call>" * 16_000  # 176 KB: 31 s with the old regular expression
    start = time.process_time()
    parsed = parse_tool_calls(text)
    assert not parsed.ok and time.process_time() - start < 0.5


def test_sql_layout_scans_are_linear():
    # 128k spaces took 40 s in the old format regex; the scans now cost microseconds per kilobyte
    from mrtpo_openrlhf.tasks.sql.verifier import check_format, extract_sql

    run = " " * 256_000
    texts = [
        "<think>t</think>\n```sql\nSELECT 1" + run + "x\n```",
        "<think>t</think>\n```sql\nSELECT 1\n```" + run + "x",
        "```" + run + "x",
        "x" + run + "<|im_end|>" + run + "y",
        "<|im_end|> " * 20_000 + "x",
    ]
    start = time.process_time()
    for text in texts:
        check_format(text)
        extract_sql(text)
    assert time.process_time() - start < 1.0


@pytest.mark.parametrize(
    "flood",
    [
        "newlines",
        "space_newline",
        "open_brackets",
        "angle_open",
        "ps_like",
        "bullets",
        "hashes_newline",
        "table_rows",
        "dashes",
        "stars",
    ],
)
def test_formerly_quadratic_checkers_are_linear(flood):
    # 256 KB, eight times the response bound: the old patterns took minutes here (34.6 s at 64k newlines)
    from mrtpo_openrlhf.tasks.instruction.verifier import MulDimIFConstraint, build_checker

    text = corpus.floods(256_000)[flood]
    checkers = [
        build_checker("detectable_format:number_bullet_lists", {"num_bullets": 3}),
        build_checker("detectable_content:number_placeholders", {"num_placeholders": 3}),
        build_checker("detectable_format:title", {}),
    ]
    checkers += [build_checker("detectable_content:postscript", {"postscript_marker": m}) for m in ("P.S.", "P.P.S")]
    checkers += [
        MulDimIFConstraint(*rule)
        for rule in corpus.MULDIMIF_RULES
        if rule[0] == "Format" and rule[1] in ("Bullets", "Table", "Heading", "Json")
    ]
    start = time.process_time()
    for checker in checkers:
        checker.check(text)
    assert time.process_time() - start < 2.0


@pytest.mark.slow
def test_every_checker_on_every_flood(workdir):
    slow = []
    for case in corpus.instruction_cases(SIZE, per_checker=True):
        took, _ = _score(case)
        if took > LIMIT_S:
            slow.append(f"{case.name}: {took:.2f} s")
    assert not slow, slow


def test_a_completion_sent_alone_keeps_its_opening():
    """Issue 49, item 11: a client that sends the completion alone (no prompt in ``query``) lost the response's
    opening ``<think>`` when the prompt's last line was ``<think>``: the text after it was taken as the response."""
    from mrtpo_openrlhf.verifiers.response import response_from_query

    prompt = "Say hi in one word.\nAnswer as:\n<think>"
    completion = "<think>short</think>hi<|im_end|>"
    assert response_from_query(completion, prompt) == "<think>short</think>hi"
    # a prompt changed by detokenization (its opening still there) is still cut after its last line
    changed = prompt.replace("one word.", "one word .") + completion
    assert response_from_query(changed, prompt) == "short</think>hi"
