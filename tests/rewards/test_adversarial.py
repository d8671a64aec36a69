"""A fast subset of the adversarial corpus (``adversarial_corpus.py``): every reward call returns in time.

Payloads are as long as a verifier reads (the response bound, less the layout around them), which is where the
quadratic patterns of issue 15 took 10 s to minutes; the oversize family sends 1 MB. The bound asserted here is the
issue's 3 s per call; ``benchmarks/adversarial.py`` prints the measured worst times and memory. The full sweep
(every instruction checker on every flood) is marked slow.
"""
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
import adversarial_corpus as corpus  # noqa: E402
from mrtpo_openrlhf.rewards.registry import get_reward_func  # noqa: E402
from mrtpo_openrlhf.verifiers.response import MAX_RESPONSE_CHARS  # noqa: E402

SIZE = MAX_RESPONSE_CHARS - 200
LIMIT_S = 3.0
# the checkers whose official patterns were quadratic, and the ones that read the whole text in other ways
HOT_CHECKERS = ("detectable_format:number_bullet_lists", "detectable_content:postscript",
                "detectable_content:number_placeholders", "detectable_format:title",
                "detectable_format:number_highlighted_sections", "detectable_format:multiple_sections",
                "length_constraints:number_sentences", "length_constraints:number_paragraphs")


def _fast_cases(workdir):
    cases = corpus.sql_cases(SIZE) + corpus.sql_compare_cases(workdir) + corpus.tool_cases(SIZE)
    cases += [c for c in corpus.instruction_cases(SIZE) if c.name.split("/")[0] in HOT_CHECKERS + ("muldimif",)
              or c.name == "bullets_padded"]
    return cases + corpus.oversize_cases()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("adversarial")


def _score(case):
    func = get_reward_func(case.task)
    start = time.perf_counter()
    out = func([case.query], [case.prompt], [case.label])
    took = time.perf_counter() - start
    assert len(out["rewards"]) == 1
    return took, out


def test_fast_subset_every_call_within_the_limit(workdir):
    # warm the one-time loads (gold results, the NLTK punkt model, langdetect profiles) as a running server has them
    for case in corpus.sql_compare_cases(workdir) + corpus.instruction_cases(100):
        _score(case)
    slow = []
    for case in _fast_cases(workdir):
        took, out = _score(case)
        if took > LIMIT_S:
            slow.append(f"{case.family}/{case.name}: {took:.2f} s")
    assert not slow, slow


def test_oversize_responses_lose_every_reward_with_the_reason():
    for case in corpus.oversize_cases():
        if case.name.split("/")[1] in ("newlines", "spaces", "space_newline"):
            continue  # surrounding whitespace is stripped before the bound applies: these are short responses
        _, out = _score(case)
        assert out["rewards"].item() == 0.0, case.name
        assert all("longer than the" in r for r in out["extra_logs"]["mrtpo_reward_reasons"]), case.name


def test_correct_answer_padded_with_newlines_still_scores():
    # the 34.6 s case: a correct 3-bullet answer followed by 64k newlines
    case = next(c for c in corpus.instruction_cases(SIZE, per_checker=False) if c.name == "bullets_padded")
    took, out = _score(case)
    assert out["rewards"].item() == 1.0 and took < LIMIT_S


def test_unclosed_tool_call_tags_parse_in_linear_time():
    from mrtpo_openrlhf.verifiers.tool import parse_tool_calls

    text = "<think>t</think>" + "<tool_call>" * 16_000  # 176 KB: 31 s with the old regular expression
    start = time.perf_counter()
    parsed = parse_tool_calls(text)
    assert not parsed.ok and time.perf_counter() - start < 0.5


@pytest.mark.slow
def test_every_checker_on_every_flood(workdir):
    slow = []
    for case in corpus.instruction_cases(SIZE, per_checker=True):
        took, _ = _score(case)
        if took > LIMIT_S:
            slow.append(f"{case.name}: {took:.2f} s")
    assert not slow, slow
