"""Agreement of the harness's verdicts with the benchmark owners' own scorers, run here on inputs made here.

    python benchmarks/eval_parity.py [--only ifbench,ifeval,bfcl,spider,muldimif] [--bfcl-limit N]
        [--ifbench-src /tmp/ifbench_main] [--ifeval-data /tmp/ifeval_data] [--spider-src /tmp/test-suite-sql-eval]
        [--muldimif-src /tmp/muldimif_eval] [--muldimif-limit N]

The official code is NOT part of this repository: point each ``--*-src`` at a read-only copy outside it
(docs/eval.md says which commit was used and how it was copied). A benchmark whose source is missing is skipped.

1. IFBench: allenai/IFBench main (``evaluation_lib.test_instruction_following_strict/_loose``), one instruction at a
   time, on its ``data/IFBench_test.jsonl`` (300 prompts) with the ``sample_output.jsonl`` responses and
   perturbations of them (case, punctuation, quotes, sentences and lines dropped or joined, emoji, ...).
   ``nltk.download`` is replaced by a no-op; punkt comes from ``text.ensure_punkt`` and the stopword corpus from the
   list this package ships. ``words:start_verb`` cannot run offline on either side and is reported as not compared.
2. IFEval: google-research ``instruction_following_eval``'s checkers, as allenai/IFBench main vendors them verbatim
   (``ifbench/classic_instructions.py``; same protocol), on the bundled IFEval prompts and the responses of
   ``data/instructions/eval_mini.jsonl`` plus perturbations.
3. BFCL: ``bfcl_eval``'s ``ast_checker`` (installed package) on each item's reference call and 3 perturbations, and
   BFCL's prompt-mode decoder ``default_decode_ast_prompting`` against ``predictions.parse_python_calls``.
4. Spider: test-suite ``exec_eval.eval_exec_match`` on the SQL cases of tests/eval/test_sql_eval.py, with and
   without ``keep_distinct``.
5. MulDimIF: its ``Code/evaluation`` scripts (``class_mapping[f"{category}_{subcategory}"].check``) on every
   constraint of ``Data/test.json`` with shared shapes, prompt edits and ``targeted_muldimif`` boundary responses;
   Language_Chinese only when ``zhconv`` is importable.
Prints the agreement per benchmark and every disagreement (first 40).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import types
from pathlib import Path

from mrtpo_openrlhf.evaluation import Prediction, load_benchmark, score_examples
from mrtpo_openrlhf.evaluation.runner import EvalConfig
from mrtpo_openrlhf.tasks.instruction.verifier.muldimif import NUMBER_WORDS
from mrtpo_openrlhf.tasks.tool.verifier import ToolCall, reference_calls, render_calls

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------- instruction following
def perturbations(text: str) -> list[str]:
    """The response and edits of it that move many checkers' verdicts."""
    lines = text.split("\n")
    sentences = re.split(r"(?<=[.!?])\s+", text)
    rng = random.Random(len(text))
    words = text.split()
    shuffled = words[:]
    rng.shuffle(shuffled)
    return [
        text,
        text.lower(),
        text.upper(),
        text.title(),
        re.sub(r"[^\w\s]", "", text),
        text.replace('"', "\u201c").replace("'", "\u2019"),
        " ".join(sentences[1:]),
        " ".join(sentences[:2]),
        text[: len(text) // 2],
        " ".join(lines),
        "\n".join(ln for ln in lines if ln.strip()),
        "\n".join(ln + " \U0001f600" for ln in lines),
        text.replace(" and ", "/"),
        text.rstrip(".!? \n"),
        " ".join(shuffled[:40]),
        "*" + text + "\n*",
        "\n".join(words[:60]),
    ]


GENERIC = [
    "a",
    "A.",
    "Hello world.",
    "Dr. Smith went home at 5 p.m. He slept. Did he? Yes!",
    "Is it? Yes. It is. Wow! Really? Sure. Fine.",
    "\U0001f600 Start. End \U0001f600",
    "The iPhone Is Great",
    "A Tale of Two Cities",
    "a Tale Of Two",
    "Emma met Liam, Sophia and Emmanuel; Noah's dog saw Avatar.",
    "she/her and they/them, who? whoever! each of you, all of us, none.",
    '"quoted" then text "more"',
    "one two three\nfour five six\n\nseven",
]


def targeted(iid: str, kwargs: dict, prompt: str) -> list[str]:
    """Responses near each checker's decision boundary, built from the instruction's own kwargs."""
    out: list[str] = []
    kwargs = {k: int(v) if isinstance(v, float) and v == int(v) else v for k, v in kwargs.items()}
    if iid == "repeat:repeat_span":
        text, a, b = kwargs["prompt_to_repeat"], kwargs["n_start"], kwargs["n_end"]
        out += [
            text[a : b + 1],
            text[a:b],
            text[a - 1 : b + 1] if a else text[a : b + 2],
            " ".join(text.split()[a:b]),
            text[a : b + 1].upper(),
        ]
    elif iid == "repeat:repeat_change":
        text = kwargs["prompt_to_repeat"]
        out += [text, "Changed " + " ".join(text.split()[1:]), " ".join(text.split()[1:])]
    elif iid in ("words:keywords_specific_position", "words:words_position", "sentence:keyword"):
        kw = kwargs.get("keyword") or kwargs.get("word")
        n, m = kwargs.get("n", kwargs.get("N", 1)), kwargs.get("m", 2)
        filler = ["We", "walk", "to", "the", "old", "mill", "and", "back", "again", "today", "slowly", "now"]
        sentence = " ".join((filler * 5)[: m - 1] + [kw] + filler[:3]) + "."
        for lead in (
            sentence,
            sentence.replace(kw, kw.upper()),
            sentence.replace(kw, kw + ","),
            sentence.replace(kw, "un" + kw),
            sentence.replace(" " + kw, ", " + kw),
        ):
            out.append(" ".join(["This is one."] * (n - 1) + [lead, "The end."]))
        out += [f"A {kw} b c {kw} d.", f"A {kw} b c {kw}.", f"A {kw} b c {kw} d", f"The {kw.capitalize()} x {kw}!"]
    elif iid == "ratio:stop_words":
        pct = kwargs["percentage"]
        for share in (pct - 5, pct, pct + 5):
            k = max(0, min(100, share))
            out.append(" ".join(["the"] * k + ["mountain"] * (100 - k)))
        out.append(" ".join(["The", "doesn't", "she'd", "It's", "You", "river"] * 10))
    elif iid == "ratio:overlap":
        ref, pct = kwargs["reference_text"], kwargs["percentage"]
        cut = max(3, len(ref) * pct // 100)
        out += [ref[:cut] + " zqxj wvkp" * 3, ref, ref[: cut + 2] + "#" * 40]
    elif iid == "count:person_names":
        n = kwargs["N"]
        names = ["Emma", "Liam", "Sophia", "Jackson", "Olivia", "Noah", "Ava", "Lucas", "Isabella", "Mason"]
        out += [
            ", ".join(names[:n]) + ".",
            ", ".join(names[: n - 1]) + " and Emmanuel.",
            " ".join(x + "s" for x in names[:n]),
            " ".join(names[:n]).lower(),
        ]
    elif iid == "count:pronouns":
        n = kwargs["N"]
        out += [
            " ".join(["she/her"] * (n // 2 + 1)),
            "This and that, these or those? " * (n // 4 + 1),
            " ".join(["Everyone"] * (n - 1)),
            "I'm sure you'll see it " * (n // 3 + 1),
        ]
    elif iid == "format:title_case":
        out += ["A Tale Of Two Cities", "a Tale Of Two", "The iPhone Story", "Rock 'n' Roll Lives", "I Am X"]
    elif iid == "ratio:sentence_type":
        out += ["One. Two? Three.", "One. Two. Three? Four. Five. Six?", "Mr. Smith came. Why? Dr. No left."]
    elif iid == "words:paragraph_last_first":
        out += ["word one word\n*****\nnext two next", "Go home go.\n...\nStay, then stay!"]
    elif iid == "format:quote_unquote":
        out += ["\u201cA\u201d is a letter", 'He said "hi" to me', 'He said "hi"', "\u201cquoted\u201d"]
    return out


def targeted_ifeval(iid: str, kw: dict, prompt: str) -> list[str]:
    """IFEval responses at each checker's boundary (counts n-1, n, n+1; near-miss spellings)."""
    kw = {k: int(v) if isinstance(v, float) and v == int(v) else v for k, v in kw.items()}
    out: list[str] = []

    def around(n: int, make) -> None:
        out.extend(make(k) for k in (max(n - 1, 0), n, n + 1))

    if iid == "keywords:existence":
        out += [" ".join(kw["keywords"]) + ".", " ".join(kw["keywords"][:-1]) + ".", " ".join(kw["keywords"]).upper()]
    elif iid == "keywords:frequency":
        around(kw["frequency"], lambda k: " ".join([kw["keyword"]] * k + ["end"]))
    elif iid == "keywords:forbidden_words":
        out += [" ".join("x" + w for w in kw["forbidden_words"]), "ok " + kw["forbidden_words"][0].upper()]
    elif iid == "keywords:letter_frequency":
        around(kw["let_frequency"], lambda k: " ".join([kw["letter"].upper()] * k + ["zz"]))
    elif iid == "length_constraints:number_words":
        around(kw["num_words"], lambda k: " ".join(["word"] * k))
    elif iid == "length_constraints:number_sentences":
        around(kw["num_sentences"], lambda k: " ".join(["It rains."] * k))
    elif iid == "length_constraints:number_paragraphs":
        around(kw["num_paragraphs"], lambda k: "\n***\n".join(["Text here."] * k))
        out.append("\n***\n".join(["Text here."] * kw["num_paragraphs"]) + "\n***\n")
    elif iid == "length_constraints:nth_paragraph_first_word":
        n, i, w = kw["num_paragraphs"], kw["nth_paragraph"], kw["first_word"]
        paras = [f"Para {j}." for j in range(n)]
        for first in (w, w.capitalize(), f'"{w}",', "x" + w):
            out.append("\n\n".join(p if j != i - 1 else f"{first} rest." for j, p in enumerate(paras)))
    elif iid == "detectable_content:postscript":
        m = kw["postscript_marker"]
        out += [f"Body.\n{m} note", f"Body. {m.lower()} note", f"Body.\n{m}"]
    elif iid == "detectable_content:number_placeholders":
        around(kw["num_placeholders"], lambda k: " ".join(["[x]"] * k + ["[]"]))
    elif iid == "detectable_format:number_bullet_lists":
        around(kw["num_bullets"], lambda k: "\n".join(["* a"] * k + ["- b"]))
    elif iid == "detectable_format:number_highlighted_sections":
        around(kw["num_highlights"], lambda k: " ".join(["*a*"] * k + ["**b**", "**"]))
    elif iid == "detectable_format:multiple_sections":
        sp = kw["section_spliter"]
        around(kw["num_sections"], lambda k: "\n".join(f"{sp} {j}\ntext" for j in range(1, k + 1)))
    elif iid == "detectable_format:title":
        out += ["<<Title>> body", "<<>> body", "<<a\nb>>"]
    elif iid == "detectable_format:json_format":
        out += ['{"a": 1}', '```json\n{"a": 1}\n```', "{bad", "```JSON\n[1]\n```"]
    elif iid == "detectable_format:constrained_response":
        out += ["My answer is yes.", "My answer is maybe.", "I think: My answer is no."]
    elif iid == "startend:end_checker":
        e = kw["end_phrase"]
        out += [f"x {e}", f"x {e} ", f"x {e.lower()}", f"x {e}!"]
    elif iid == "startend:quotation":
        out += ['"x"', '"x', "\u201cx\u201d", ' "x" ']
    elif iid == "change_case:capital_word_frequency":
        around(kw["capital_frequency"], lambda k: " ".join(["WORD"] * k + ["tail"]))
    elif iid == "combination:repeat_prompt":
        r = kw["prompt_to_repeat"]
        out += [r + " answer", r.lower() + " answer", "x " + r]
    elif iid == "combination:two_responses":
        out += ["a\n******\nb", "a\n******\na", "a ****** b ****** c"]
    out += ["hello world", "HELLO WORLD", "Hello, world", "Hello world"]
    return out


def _offline_nltk(stopwords_dir: Path) -> None:
    import nltk

    from mrtpo_openrlhf.tasks.instruction.verifier import ensure_punkt
    from mrtpo_openrlhf.tasks.instruction.verifier.ifbench import STOPWORDS_FILE

    nltk.download = lambda *a, **k: True
    ensure_punkt()
    corpus = stopwords_dir / "corpora" / "stopwords"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "english").write_text(STOPWORDS_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    nltk.data.path.append(str(stopwords_dir))


def _import_official(src: Path, module: str, fresh: tuple[str, ...]):
    for name in list(sys.modules):
        if name.split(".")[0] in fresh:
            del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        return __import__(module, fromlist=["*"])
    finally:
        sys.path.remove(str(src))


def if_parity(
    lib, inputs, responses: dict[str, list[str]], examples: dict, bench: str
) -> tuple[int, int, dict[str, list[int]], list[str]]:
    """Compare every (instruction, mode) decision; returns agree, total, {instruction id: [agree, total]}, diffs."""
    agree = total = 0
    per_id: dict[str, list[int]] = {}
    diffs: list[str] = []
    skipped: dict[str, int] = {}
    cfg = EvalConfig([bench], workers=1)
    for inp in inputs:
        ex = examples[str(inp.key)]
        texts = responses.get(inp.prompt, [])
        ours = score_examples([ex] * len(texts), [Prediction(t) for t in texts], cfg)
        for variant, (text, rec) in enumerate(zip(texts, ours)):
            for mode, fn in (
                ("strict", lib.test_instruction_following_strict),
                ("loose", lib.test_instruction_following_loose),
            ):
                for index, (iid, kwargs) in enumerate(zip(inp.instruction_id_list, inp.kwargs)):
                    letter = str(kwargs.get("letter") or "a").lower()
                    if not rec["supported"][index] or not "a" <= letter <= "z":
                        # unsupported offline on both sides, or IFEval's letter_frequency with a non-letter (the
                        # official checker then draws a random letter): not comparable
                        per_id.setdefault(iid, [0, 0])
                        skipped[iid] = skipped.get(iid, 0) + 1
                        continue
                    single = lib.InputExample(
                        key=inp.key,
                        instruction_id_list=[iid],
                        prompt=inp.prompt,
                        kwargs=[{k: v for k, v in kwargs.items() if v is not None}],
                    )
                    try:
                        official = fn(single, {inp.prompt: text}).follow_instruction_list[0]
                    except Exception as exc:  # noqa: BLE001 - the official checker crashed: the harness says False
                        official = f"crash ({type(exc).__name__})"
                    mine = rec[f"follow_instruction_list_{mode}"][index]
                    same = official == mine or (isinstance(official, str) and mine is False)
                    counts = per_id.setdefault(iid, [0, 0])
                    counts[0] += same
                    counts[1] += 1
                    agree += same
                    total += 1
                    if not same:
                        diffs.append(
                            f"{bench} {inp.key} v{variant} {mode} {iid}: official {official}, ours {mine} "
                            f"| {text[:100]!r}"
                        )
    diffs += [f"not compared: {iid} x{n}" for iid, n in sorted(skipped.items())]
    return agree, total, per_id, diffs


def ifbench_parity(src: Path) -> tuple[int, int, dict[str, list[int]], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        _offline_nltk(Path(tmp))
        lib = _import_official(src, "evaluation_lib", ("ifbench", "evaluation_lib"))
        data = src / "ifbench" / "data"
        inputs = lib.read_prompt_list(str(data / "IFBench_test.jsonl"))
        sample = lib.read_prompt_to_response_dict(str(src / "data" / "sample_output.jsonl"))
        responses = {}
        for inp in inputs:
            text = lib.get_response_for_prompt(inp, sample)
            extra = [
                t
                for iid, kw in zip(inp.instruction_id_list, inp.kwargs)
                for t in targeted(iid, {k: v for k, v in kw.items() if v is not None}, inp.prompt)
            ]
            responses[inp.prompt] = (perturbations(text) if text else []) + extra + GENERIC
        examples = {ex.id: ex for ex in load_benchmark("ifbench", data)}
        return if_parity(lib, inputs, responses, examples, "ifbench")


def ifeval_parity(src: Path, data_dir: Path, limit: int | None) -> tuple[int, int, dict[str, list[int]], list[str]]:
    """google-research IFEval's checkers as allenai/IFBench main vendors them verbatim (``classic_instructions.py``,
    registered under the IFEval ids); its ``count_sentences`` loads the punkt pickle, which no package ships: the
    same English punkt model is given through ``PunktTokenizer("english")`` (punkt_tab, ``text.ensure_punkt``)."""
    with tempfile.TemporaryDirectory() as tmp:
        _offline_nltk(Path(tmp))
        lib = _import_official(src, "evaluation_lib", ("ifbench", "evaluation_lib"))
        from nltk.tokenize.punkt import PunktTokenizer

        util = sys.modules["ifbench.instructions_util"]
        util._get_sentence_tokenizer = lambda: PunktTokenizer("english")
        inputs = lib.read_prompt_list(str(data_dir / "input_data.jsonl"))[:limit]
        sample = [
            json.loads(line)["response"]
            for line in (src / "data" / "sample_output.jsonl").read_text(encoding="utf-8").splitlines()
        ]
        mini = [
            json.loads(line)["response"]
            for line in (ROOT / "mrtpo_openrlhf/data/instructions/eval_mini.jsonl")
            .read_text(encoding="utf-8")
            .splitlines()
        ]
        pool = mini + sample
        responses = {}
        for index, inp in enumerate(inputs):
            texts = perturbations(pool[index % len(pool)])[:9]
            texts += [
                t
                for iid, kw in zip(inp.instruction_id_list, inp.kwargs)
                for t in targeted_ifeval(iid, {k: v for k, v in kw.items() if v is not None}, inp.prompt)
            ]
            responses[inp.prompt] = texts + GENERIC
        examples = {ex.id: ex for ex in load_benchmark("ifeval", data_dir)}
        return if_parity(lib, inputs, responses, examples, "ifeval")


# ----------------------------------------------------------------------------------------------- MulDimIF
MULDIMIF_SHAPES = [
    "| Name | Age | City |\n|---|---|---|\n| Ann | 30 | Rome |\n| Bob | 25 | Oslo |",
    '```json\n{"a": {"b": {"c": 1}}, "d": [1, 2]}\n```',
    "# Title\n\n## Part One\n\nText here.\n\n### Detail\n\nMore.",
    "THIS IS ALL UPPERCASE TEXT. IT HAS TWO SENTENCES.",
    "This Text Uses Capitalized Words Only. Every Word Counts.",
    "> A block quote.\n\nPlain text after it; it ends here.",
    "- one\n- two\n- three\n\nDone!",
    '<root a="1" b="2"><item c="3">x</item></root>',
    "Short answer.",
    "One. Two. Three. Four. Five. Six.",
]


def targeted_muldimif(rule: str) -> list[str]:
    """Responses on the boundaries a MulDimIF rule text names: every number n in it gives n-1, n, n+1 words,
    sentences, paragraphs, table rows/columns, heading levels, JSON depths, bullets and XML attributes; every quoted
    term is present, doubled, re-cased, glued inside a word and absent; endings and cases vary."""
    nums = {int(x) for x in re.findall(r"\d+", rule) if int(x) < 400}
    nums |= {v for k, v in NUMBER_WORDS.items() if re.search(rf"\b{k}\b", rule, re.I)}
    terms = [
        next(g for g in m.groups() if g) for m in re.finditer(r'"([^"]+)"|\u201c([^\u201d]+)\u201d|\'([^\']+)\'', rule)
    ][:3]
    out = []
    for n in sorted(nums)[:4]:
        for k in (max(n - 1, 0), n, n + 1):
            out += [
                " ".join(["word"] * k),
                " ".join(f"Sentence number {i}." for i in range(k)),
                "\n\n".join(f"Paragraph {i} text." for i in range(k)),
                "| A | B |\n|---|---|\n" + "\n".join(f"| {i} | x |" for i in range(k)),
                "| "
                + " | ".join(f"C{i}" for i in range(k))
                + " |\n|"
                + "---|" * k
                + "\n| "
                + " | ".join("v" for _ in range(k))
                + " |",
                "\n\n".join("#" * (i + 1) + f" Heading {i}" for i in range(min(k, 6))) + "\nBody.",
                "```json\n" + '{"a": ' * k + "1" + "}" * k + "\n```",
                "\n".join(f"- item {i}." for i in range(k)),
                "\n".join(f"{i + 1}. item {i}" for i in range(k)),
                "<root " + " ".join(f'a{i}="{i}"' for i in range(k)) + ">x</root>",
            ]
    for t in terms:
        out += [
            f"Here is {t} in a sentence.",
            f"{t} and again {t}.",
            f"{t.upper()} shouted.",
            f"x{t}x glued.",
            f"Nothing relevant here. {t}",
            f"# {t}\n\nBody text.",
            f"| {t} | Other |\n|---|---|\n| a | b |",
            f"- {t} first\n- second {t}",
        ]
    out += [
        "Hello there.",
        "Hello there!",
        "Hello there?",
        "Hello there;",
        "Hello there",
        "ALL CAPS ANSWER HERE.",
        "Every Word Capitalized Here.",
        "all lower case here.",
        "> quoted line\n> another",
        "**bold** text",
        "Sources: [1] Smith (Smith, 2020)",
        "First line.\nSecond line!\nThird?",
        "\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
        "\u4eca\u5929\u5929\u6c23\u5f88\u597d\u3002",
        "\u4eca\u5929 weather \u5f88\u597d",
        "\u6c88\u6797 \u4f60\u597d",
    ]
    return [t for t in out if t.strip()]  # a blank response fails every constraint here (docs/eval.md): not compared


def muldimif_parity(src: Path, limit: int | None) -> tuple[int, int, dict[str, list[int]], list[str]]:
    """MulDimIF's ``Code/evaluation`` (``evaluation.check``: ``class_mapping[cat_sub].check(rule, response)``) on its
    ``Data/test.json`` constraints, against the harness's checker, with the shared shapes, edits of the prompt and
    ``targeted_muldimif`` responses. Language_Chinese is compared only when ``zhconv`` (its tables) is importable;
    a decision where the official script raises is listed, not compared."""
    try:
        import zhconv  # noqa: F401 - both sides use the same tables when it is installed

        chinese = True
    except ImportError:
        sys.modules["zhconv"] = types.SimpleNamespace(convert=lambda text, locale: text)
        chinese = False
    from mrtpo_openrlhf.tasks.instruction.verifier import ensure_punkt

    ensure_punkt()  # Content_Punctuation calls nltk.sent_tokenize on both sides
    for path in (src / "Code", src / "Code" / "evaluation"):
        sys.path.insert(0, str(path))
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        official = __import__("evaluation")
    data = json.loads((src / "Data" / "test.json").read_text(encoding="utf-8"))[:limit]
    pool = MULDIMIF_SHAPES
    agree = total = 0
    per: dict[str, list[int]] = {}
    diffs: list[str] = []
    from mrtpo_openrlhf.tasks.instruction.verifier import MulDimIFConstraint, UnsupportedInstruction, check_strict

    for item in data:
        prompt = item["conversations"][0]["content"]
        shared = pool + perturbations(prompt)[:4]
        for constraint in item["constraints"]:
            for text in shared + targeted_muldimif(constraint[-1]):
                key = f"{constraint[0]}_{constraint[1]}"
                counts = per.setdefault(key, [0, 0])
                if key.startswith("Language_Chinese") and not chinese:
                    continue
                try:
                    theirs = bool(official.get_instance(key).check(constraint[-1], text))
                except Exception as exc:  # noqa: BLE001 - a rule the official regexes half-parse raises there
                    diffs.append(f"muldimif {item['id']} {key}: official raised {type(exc).__name__}, not compared")
                    continue
                try:
                    mine = check_strict(MulDimIFConstraint(*constraint), text)
                except UnsupportedInstruction:
                    mine = "unsupported"
                same = theirs == mine
                counts[0] += same
                counts[1] += 1
                agree += same
                total += 1
                if not same:
                    diffs.append(
                        f"muldimif {item['id']} {key}: {constraint[-1][:70]!r}: official {theirs}, "
                        f"ours {mine} | {text[:60]!r}"
                    )
    return agree, total, per, diffs


# ----------------------------------------------------------------------------------------------- BFCL
PY_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)


def _official_bfcl():
    stub = types.ModuleType("bfcl_eval.constants.model_config")

    class _Config:
        underscore_to_dot = False

    class _Mapping(dict):
        def __missing__(self, key):
            return _Config()

    stub.MODEL_CONFIG_MAPPING = _Mapping()
    sys.modules["bfcl_eval.constants.model_config"] = stub
    from unittest import mock

    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    # the decoder's module imports tree-sitter (Java/JavaScript parsers) and tenacity; the Python decoder uses neither
    default_decode_ast_prompting = None
    for _ in range(10):
        try:
            from bfcl_eval.model_handler.utils import default_decode_ast_prompting

            break
        except ModuleNotFoundError as exc:
            sys.modules[exc.name] = mock.MagicMock()
    return ast_checker, Language.PYTHON, default_decode_ast_prompting


def _variants(calls: list[ToolCall]) -> list[list[ToolCall]]:
    out = [calls]
    if calls:
        first = calls[0]
        out.append([ToolCall(first.name + "_v2", first.arguments)] + calls[1:])
        if first.arguments:
            key = next(iter(first.arguments))
            value = first.arguments[key]
            changed = {
                **first.arguments,
                key: (value + 1 if isinstance(value, int) and not isinstance(value, bool) else "zz_" + str(value)),
            }
            out.append([ToolCall(first.name, changed)] + calls[1:])
            dropped = {k: v for k, v in first.arguments.items() if k != key}
            out.append([ToolCall(first.name, dropped)] + calls[1:])
    return out


def _python_source(calls: list[ToolCall]) -> str:
    return (
        "["
        + ", ".join(f"{c.name}(" + ", ".join(f"{k}={v!r}" for k, v in c.arguments.items()) + ")" for c in calls)
        + "]"
    )


def bfcl_parity(limit: int | None) -> tuple[int, int, dict[str, list[int]], list[str]]:
    ast_checker, python, decode = _official_bfcl()
    agree, total, diffs = 0, 0, []
    per: dict[str, list[int]] = {}
    cfg = EvalConfig(["bfcl"], workers=1)
    for category in PY_CATEGORIES:
        for ex in load_benchmark("bfcl", options={"bfcl_category": (category,)})[:limit]:
            calls = reference_calls(ex.target["ground_truth"], ex.target["functions"])
            for k, variant in enumerate(_variants(calls)):
                model_output = [{c.name: c.arguments} for c in variant]
                official = ast_checker(
                    ex.target["functions"], model_output, ex.target["ground_truth"], python, category, "stub-model"
                )["valid"]
                ours = score_examples([ex], [Prediction("<think>x</think>" + render_calls(variant))], cfg)[0]
                checks = [("ast", official, ours["verdict"])]
                if decode is not None and variant:
                    source = _python_source(variant)
                    from mrtpo_openrlhf.tasks.tool.benchmarks import parse_python_calls

                    mine = parse_python_calls(source)
                    theirs = decode(source)
                    checks.append(("decode", theirs, [{c.name: c.arguments} for c in mine.calls or []]))
                for what, a, b in checks:
                    counts = per.setdefault(what, [0, 0])
                    counts[0] += a == b
                    counts[1] += 1
                    total += 1
                    agree += a == b
                    if a != b:
                        diffs.append(f"bfcl {what} {ex.id} variant {k}: official {str(a)[:120]}, ours {str(b)[:120]}")
    return agree, total, per, diffs


# ----------------------------------------------------------------------------------------------- Spider
SPIDER_CASES = [  # (gold, prediction) on the bundled school database (tests/eval/test_sql_eval.py and more)
    ("SELECT name FROM students ORDER BY name", "SELECT name FROM students ORDER BY name DESC"),
    ("SELECT name FROM students ORDER BY name", "SELECT T.name FROM students AS T ORDER BY T.name ASC"),
    ("SELECT name, city FROM students", "SELECT city, name FROM students"),
    ("SELECT name, city FROM students", "SELECT name, city FROM students GROUP BY name, city"),
    ("SELECT name, city FROM students", "SELECT DISTINCT name, city FROM students"),
    ("SELECT count(DISTINCT name) FROM students", "SELECT count(*) FROM students"),
    ("SELECT name FROM (SELECT name FROM students ORDER BY name)", "SELECT name FROM students ORDER BY name DESC"),
    ("SELECT name FROM students WHERE birth_year >= 2000", "SELECT name FROM students WHERE birth_year > = 2000"),
    ("SELECT name, city FROM students", "SELECT nope FROM students"),
    (
        "SELECT name FROM students WHERE birth_year > YEAR(CURDATE()) - 9",
        "SELECT name FROM students WHERE birth_year > 2011",
    ),
    (
        "SELECT name FROM students WHERE birth_year = 2010",
        "SELECT name FROM students WHERE birth_year = year( curdate( ) ) - 10",
    ),
    ("SELECT name, city FROM students", "SELECT DISTINCT name, city FROM students; SELECT 1"),
    ("SELECT name, city FROM students", "SELECT name, city FROM students; DELETE FROM students"),
    ("SELECT name, city FROM students", "SELECT name FROM students; SELECT name, city FROM students"),
    ("SELECT name FROM students WHERE city = 'Porto'", "SELECT name FROM students WHERE name = 'Ana'"),
    ("SELECT max(birth_year) FROM students", "SELECT birth_year FROM students ORDER BY birth_year DESC LIMIT 1"),
]


def spider_parity(src: Path) -> tuple[int, int, dict[str, list[int]], list[str]]:
    import shutil

    exec_eval = _import_official(src, "exec_eval", ("exec_eval", "parse", "process_sql"))
    agree, total, diffs = 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        db_dir = Path(tmp) / "database" / "school"
        db_dir.mkdir(parents=True)
        shutil.copy(ROOT / "mrtpo_openrlhf/data/sql/database/school/school.sqlite", db_dir / "school.sqlite")
        items = [{"db_id": "school", "question": f"q{i}", "query": gold} for i, (gold, _) in enumerate(SPIDER_CASES)]
        (Path(tmp) / "dev.json").write_text(json.dumps(items), encoding="utf-8")
        examples = load_benchmark("spider", tmp)
        for keep in (False, True):
            cfg = EvalConfig(["spider"], workers=1, options={"keep_distinct": keep})
            ours = score_examples(examples, [Prediction("", pred) for _, pred in SPIDER_CASES], cfg)
            for (gold, pred), rec in zip(SPIDER_CASES, ours):
                official = (
                    exec_eval.eval_exec_match(
                        str(db_dir / "school.sqlite"),
                        pred,
                        gold,
                        plug_value=False,
                        keep_distinct=keep,
                        progress_bar_for_each_datapoint=False,
                    )
                    == 1
                )
                total += 1
                agree += official == rec["verdict"]
                if official != rec["verdict"]:
                    diffs.append(f"spider keep_distinct={keep} {pred!r}: official {official}, ours {rec['verdict']}")
    return agree, total, {"exec": [agree, total]}, diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="ifbench,ifeval,bfcl,spider,muldimif")
    ap.add_argument("--bfcl-limit", type=int, default=None, help="items per BFCL category (default all)")
    ap.add_argument("--ifbench-src", type=Path, default=Path("/tmp/ifbench_main"))
    ap.add_argument(
        "--ifeval-data",
        type=Path,
        default=Path("/tmp/ifeval_data"),
        help="folder with IFEval's input_data.jsonl (541 prompts)",
    )
    ap.add_argument("--ifeval-limit", type=int, default=None, help="first N IFEval prompts")
    ap.add_argument(
        "--muldimif-src",
        type=Path,
        default=Path("/tmp/muldimif_eval"),
        help="copy of the MulDimIF repository's Code/ and Data/test.json",
    )
    ap.add_argument("--muldimif-limit", type=int, default=None, help="first N test items (default: all 1,200)")
    ap.add_argument("--spider-src", type=Path, default=Path("/tmp/test-suite-sql-eval"))
    ap.add_argument("--per-instruction", action="store_true", help="print agreement per instruction id")
    args = ap.parse_args()
    runs = {
        "ifbench": ("IFBench vs allenai/IFBench main", args.ifbench_src, lambda: ifbench_parity(args.ifbench_src)),
        "ifeval": (
            "IFEval vs google-research instruction_following_eval (as vendored by allenai/IFBench main)",
            args.ifbench_src,
            lambda: ifeval_parity(args.ifbench_src, args.ifeval_data, args.ifeval_limit),
        ),
        "bfcl": ("BFCL AST + prompt-mode decoding vs bfcl_eval", None, lambda: bfcl_parity(args.bfcl_limit)),
        "spider": ("Spider vs test-suite exec_eval", args.spider_src, lambda: spider_parity(args.spider_src)),
        "muldimif": (
            "MulDimIF vs Junjie-Ye/MulDimIF Code/evaluation",
            args.muldimif_src,
            lambda: muldimif_parity(args.muldimif_src, args.muldimif_limit),
        ),
    }
    for key in args.only.split(","):
        name, src, fn = runs[key]
        if src is not None and not src.is_dir():
            print(f"{name}: skipped ({src} not found)")
            continue
        agree, total, per, diffs = fn()
        print(f"{name}: {agree}/{total} decisions agree ({100 * agree / max(total, 1):.2f}%)")
        for iid, (a, t) in sorted(per.items()):
            if args.per_instruction or a != t or t == 0:
                print(f"  {iid}: {a}/{t}" + ("  (not compared: unsupported offline)" if t == 0 else ""))
        for line in diffs[:40]:
            print("  " + line)
        if len(diffs) > 40:
            print(f"  ... {len(diffs) - 40} more")
        sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
