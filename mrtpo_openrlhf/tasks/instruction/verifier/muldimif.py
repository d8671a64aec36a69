"""MulDimIF constraints ``[category, subcategory, rule text]``.

A pair MulDimIF's own evaluation knows (``f"{category}_{subcategory}"`` in its dispatch table, e.g.
``Content_Keywords``, ``Length_Words``, ``Table_Row limit``) is decided as MulDimIF decides it: by the rule-text
semantics of its twelve scripts, re-implemented in ``muldimif_rules`` (docs/eval.md, "MulDimIF", gives the
measured agreement). Any other pair (other data sets written in the same triple shape) falls back to the
documented rule-text parser below (case-insensitive); a rule it cannot read raises UnsupportedInstruction with
the reason, never a silent 0.

Length (any category; the unit decides):
    "at most | no more than | not exceed | up to | maximum of N <unit>"     -> count <= N
    "fewer than | less than | under N <unit>"                               -> count < N
    "at least | no less than | no fewer than | minimum of N <unit>"         -> count >= N
    "more than | over N <unit>"                                             -> count > N
    "exactly N <unit>" / "N <unit>" alone                                   -> count == N
    "between N and M <unit>"                                                -> N <= count <= M
    units: words (\\w+ runs; CJK characters count one each), sentences (regex splitter), paragraphs
    (blank-line separated), lines (non-empty), characters, bullet points/items (lines starting with
    -, *, + or "1.").
Format:
    mentions JSON  -> the response (code fences allowed) parses as JSON
    mentions XML   -> parses as XML with one root element (code fences allowed)
    mentions table -> contains a markdown table: a line with "|", then (blank lines allowed) a separator line
                      of two or more --- cells, e.g. "|---|:---:|" (one line; checked line by line)
    mentions YAML/CSV are not parsed (unsupported)
    "heading(s)"/"title" with "#" or markdown -> at least one markdown heading line ("# ...")
Language (category Language or a rule that names one):
    "all capital/uppercase letters" -> response.isupper(); "all lowercase" -> response.islower()
    "in <Language>" / "<Language> only" with a language langdetect knows -> detected language matches
Content / keywords (quoted terms only; quotes "..." or '...' or \u201c...\u201d):
    "end with ..." / "start with ..." / "must not | do not | avoid | without ... <quoted>" /
    "include | contain | mention | use ... <quoted>"
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Callable, Sequence

from . import muldimif_rules
from .base import Checker, UnsupportedInstruction
from .text import detect_language, split_into_sentences

# Number words the rule parser reads (the parity benchmark probes around the same ones).
NUMBER_WORDS = {
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "fifty": 50,
    "hundred": 100,
}
_NUM = r"(\d+|" + "|".join(NUMBER_WORDS) + r")"
_UNITS = {
    "word": "words",
    "words": "words",
    "sentence": "sentences",
    "sentences": "sentences",
    "paragraph": "paragraphs",
    "paragraphs": "paragraphs",
    "line": "lines",
    "lines": "lines",
    "character": "characters",
    "characters": "characters",
    "bullet point": "bullets",
    "bullet points": "bullets",
    "bullet": "bullets",
    "bullets": "bullets",
    "item": "bullets",
    "items": "bullets",
}
_UNIT = r"(bullet points?|bullets?|items?|words?|sentences?|paragraphs?|lines?|characters?)"
_LANGS = {
    "english": "en",
    "chinese": "zh",
    "spanish": "es",
    "french": "fr",
    "german": "de",
    "japanese": "ja",
    "korean": "ko",
    "russian": "ru",
    "portuguese": "pt",
    "italian": "it",
    "arabic": "ar",
    "hindi": "hi",
}
_QUOTED = re.compile(r"\"([^\"]+)\"|\u201c([^\u201d]+)\u201d|'([^']+)'")
# Response patterns are written to run in linear time: a line-start anchor is ``^[^\S\n]*`` (spaces on that line),
# never ``^\s*``, which rescans every following blank line from each line start.
_BULLET_RE = re.compile(r"^[^\S\n]*(?:[-*+]|\d+[.)])\s+\S", flags=re.M)
_HEADING_RE = re.compile(r"^[^\S\n]*#{1,6}\s+\S", flags=re.M)
_TABLE_SEPARATOR_RE = re.compile(r"\|?[ \t]*:?-{3,}:?[ \t]*(?:\|[ \t]*:?-{3,}:?[ \t]*)+\|?")


def _num(tok: str) -> int:
    return int(tok) if tok.isdigit() else NUMBER_WORDS[tok]


def _unfence(text: str) -> str:
    """The body of a response that is one fenced block (```lang, body, ``` then only whitespace), else the
    stripped response. The body starts after the fence, its language tag and the whitespace after them; it ends
    before the last fence, less one newline."""
    start = len(text) - len(text.lstrip())
    if not text.startswith("```", start):
        return text.strip()
    i = start + 3
    while i < len(text) and text[i].isascii() and text[i].isalpha():
        i += 1
    while i < len(text) and text[i].isspace():
        i += 1
    close = text.rfind("```")
    if close < i or text[close + 3 :].strip():
        return text.strip()
    body = text[i:close]
    return body[:-1] if body.endswith("\n") else body


def _count(unit: str, text: str) -> int:
    if unit == "words":
        return len(re.findall(r"[\u4e00-\u9fff]|[^\W\u4e00-\u9fff]+", text))
    if unit == "sentences":
        return len(split_into_sentences(text))
    if unit == "paragraphs":
        return sum(1 for p in re.split(r"\n\s*\n", text) if p.strip())
    if unit == "lines":
        return sum(1 for ln in text.split("\n") if ln.strip())
    if unit == "characters":
        return len(text)
    return len(_BULLET_RE.findall(text))


def _length_rule(rule: str) -> Callable[[str], bool] | None:
    low = rule.lower()
    m = re.search(r"between\s+" + _NUM + r"\s+and\s+" + _NUM + r"\s+" + _UNIT, low)
    if m:
        lo, hi, unit = _num(m.group(1)), _num(m.group(2)), _UNITS[m.group(3)]
        return lambda r: lo <= _count(unit, r) <= hi
    ops = (
        (r"(?:at most|no more than|not exceed(?:ing)?|up to|a maximum of|maximum of)", lambda c, n: c <= n),
        (r"(?:fewer than|less than|under)", lambda c, n: c < n),
        (r"(?:at least|no less than|no fewer than|a minimum of|minimum of)", lambda c, n: c >= n),
        (r"(?:more than|over)", lambda c, n: c > n),
        (r"(?:exactly)", lambda c, n: c == n),
    )
    for op_pat, cmp in ops:
        m = re.search(op_pat + r"\s+" + _NUM + r"\s+" + _UNIT, low)
        if m:
            n, unit = _num(m.group(1)), _UNITS[m.group(2)]
            return lambda r, n=n, unit=unit, cmp=cmp: cmp(_count(unit, r), n)
    m = re.search(r"\b" + _NUM + r"\s+" + _UNIT + r"\b", low)
    if m:
        n, unit = _num(m.group(1)), _UNITS[m.group(2)]
        return lambda r: _count(unit, r) == n
    return None


def _is_json(r: str) -> bool:
    try:
        json.loads(_unfence(r))
    except (ValueError, RecursionError):  # nesting deeper than the parser goes is not JSON here
        return False
    return True


def _is_xml(r: str) -> bool:
    try:
        ET.fromstring(_unfence(r))
    except ET.ParseError:
        return False
    return True


def _has_table(r: str) -> bool:
    """A line holding ``|`` followed, after blank lines if any, by a separator line of two or more ``---`` cells."""
    lines = r.split("\n")
    following = ""  # the next non-blank line below the current one
    for line in reversed(lines):
        if "|" in line and _TABLE_SEPARATOR_RE.fullmatch(following.strip()):
            return True
        if line.strip():
            following = line
    return False


def _format_rule(rule: str) -> Callable[[str], bool] | None:
    low = rule.lower()
    if "json" in low:
        return _is_json
    if "xml" in low:
        return _is_xml
    if "table" in low:
        return _has_table
    if re.search(r"heading|headline|title", low) and ("#" in low or "markdown" in low):
        return lambda r: _HEADING_RE.search(r) is not None
    return None


def _language_rule(rule: str) -> Callable[[str], bool] | None:
    low = rule.lower()
    if re.search(r"(capital|upper ?case) letters|all caps|all capital|uppercase", low):
        return lambda r: r.isupper()
    if re.search(r"lower ?case", low):
        return lambda r: r.islower()
    for name, code in _LANGS.items():
        if re.search(r"\b" + name + r"\b", low):
            # langdetect reports zh-cn / zh-tw for Chinese
            return lambda r, code=code: (detect_language(r) or "").split("-")[0] == code
    return None


def _quoted_terms(rule: str) -> list[str]:
    return [next(g for g in m.groups() if g) for m in _QUOTED.finditer(rule)]


def _content_rule(rule: str) -> Callable[[str], bool] | None:
    low = rule.lower()
    terms = _quoted_terms(rule)
    if not terms:
        return None
    if re.search(r"\b(end|conclude|finish)\w*\b.{0,40}?\bwith\b", low):
        return lambda r: r.strip().lower().endswith(terms[-1].lower())
    if re.search(r"\b(start|begin)\w*\b.{0,40}?\bwith\b", low):
        return lambda r: r.strip().lower().startswith(terms[0].lower())
    if re.search(r"\b(not|never|avoid|without|forbidden|exclude)\b", low):
        return lambda r: not any(t.lower() in r.lower() for t in terms)
    if re.search(r"\b(include|contain|mention|use|feature|incorporate)s?\b", low):
        return lambda r: all(t.lower() in r.lower() for t in terms)
    return None


class MulDimIFConstraint(Checker):
    """One ``[category, subcategory, rule]`` triple. Name: ``muldimif:<category>/<subcategory>``."""

    instruction_id = "muldimif"

    def __init__(self, category: str, subcategory: str, rule: str):
        for field, value in (("category", category), ("subcategory", subcategory), ("rule", rule)):
            if not isinstance(value, str):
                raise ValueError(f"MulDimIF constraint {field} must be a string, got {type(value).__name__}")
        self.category, self.subcategory, self.rule = category.strip(), subcategory.strip(), rule.strip()
        self.instruction_id = f"muldimif:{self.category}/{self.subcategory}".lower()
        official = muldimif_rules.script_for(self.category, self.subcategory)
        if official is not None:  # MulDimIF's scripts see the rule text as the data spells it, unstripped
            self._check: Callable[[str], bool] | None = lambda response: official(rule, response)
        else:
            self._check = self._parse()

    @property
    def reported_category(self) -> tuple[str, str] | None:
        """(first, second) level MulDimIF reports this constraint under, or None for a pair it does not know."""
        return muldimif_rules.reported_category(self.category, self.subcategory)

    def _parse(self) -> Callable[[str], bool] | None:
        cat = self.category.lower()
        order: Sequence[Callable[[str], Callable[[str], bool] | None]]
        if cat == "length":
            order = (_length_rule,)
        elif cat == "format":
            order = (_format_rule, _length_rule)
        elif cat == "language":
            order = (_language_rule,)
        else:  # content and anything else: keywords first, then the generic shapes
            order = (_content_rule, _length_rule, _format_rule)
        for parse in order:
            fn = parse(self.rule)
            if fn is not None:
                return fn
        return None

    def description(self) -> str:
        return self.rule

    def check_supported(self) -> None:
        if self._check is None:
            raise UnsupportedInstruction(self.instruction_id, f"cannot parse the rule text {self.rule!r}")

    def check(self, response: str) -> bool:
        self.check_supported()
        return bool(self._check(response))
