"""MulDimIF's own verdicts: the rule-text semantics of its twelve scripts, re-implemented.

MulDimIF (Junjie-Ye/MulDimIF, ``Code/evaluation``, read at efd0c02) scores a constraint
``[category, subcategory, rule]`` by handing ``rule`` and the response to one of twelve scripts chosen by
``f"{category}_{subcategory}"`` (``SCRIPT_OF`` below, the table ``class_mapping`` of its ``evaluation.py``). Each
script is a set of regular expressions over the rule text. The functions here follow those decisions one for one,
quirks included, because the point is to score as the benchmark does (tests/eval/test_muldimif_official.py holds
cases whose expected verdict comes from the official scripts). Where the official code would raise (a rule its
regex half-parses), the function here returns False and the docstring says so.

``CATEGORY_OF`` is MulDimIF's ``constraint_mapping``: the ``First_Second`` pair a key is reported under.
"""

from __future__ import annotations

import json
import re
import string
from typing import Callable

from .base import UnsupportedInstruction

_SMALL = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_TEENS_TENS = {
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
    "hundred": 100,
}
_CJK_DIGITS = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10, "两": 2}


def _compound_number(text: str, table: dict[str, int]) -> int | None:
    """English number words joined by spaces/hyphens ("twenty five", "two hundred"), every part in ``table``."""
    total = current = 0
    for part in re.split(r"[\s-]+", text.strip().lower()):
        if part not in table:
            return None
        value = table[part]
        if value >= 100:
            total += max(current, 1) * value
            current = 0
        else:
            current += value
    return total + current


def _number(text: str, table: dict[str, int]) -> int | None:
    text = text.strip().replace(",", "")
    return int(text) if text.isdigit() else _compound_number(text, table)


def _is_cjk_keyword(keyword: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" for c in keyword)


def _keyword_regex(keyword: str) -> re.Pattern:
    """A CJK keyword matches anywhere, case-sensitively; any other matches case-insensitively between non-word
    characters (so "cat" is not found in "cats")."""
    if _is_cjk_keyword(keyword):
        return re.compile(re.escape(keyword))
    return re.compile(r"(?<!\w)" + re.escape(keyword) + r"(?!\w)", re.IGNORECASE)


# ----------------------------------------------------------------------------------------------- list-shaped text
# The "each <element>" rules look at the response's first shape: JSON (text opens with { or [), a markdown table
# (any line opening with |...|), a numbered list or a bullet list (the text opens with one), else plain text.
_OPENS_JSON = re.compile(r"^\s*[{\[]")
# Line-start patterns below use ``^[^\S\n]*`` where the official ones have ``^\s*`` (re.M): the same matches exist
# (a path through blank lines also starts at the last of them), but a newline flood is scanned once, not N^2/2 times.
_TABLE_LINE = re.compile(r"^[^\S\n]*\|.+\|", re.M)
_NUMBERED = re.compile(r"^\s*\d+\.\s+")
_BULLET = re.compile(r"^\s*[-*] ")


def _shape(text: str) -> str:
    if _OPENS_JSON.search(text):
        return "json"
    if _TABLE_LINE.search(text):
        return "table"
    if _NUMBERED.search(text):
        return "numbered"
    if _BULLET.search(text):
        return "bullet"
    return "plain"


def _bullet_items(text: str) -> list[str]:
    return [line.split(" ", 1)[1].strip() for line in text.split("\n") if _BULLET.match(line)]


# ----------------------------------------------------------------------------------------------- Content_Keywords
_KW_COUNT_WORDS = {**_SMALL, "once": 1, "twice": 2}


def _keyword_rule(rule: str) -> dict:
    """The keyword rule a sentence states: keywords (quoted), how often each must occur, exclusion, OR, and the
    word-count / capitalisation / final-period side conditions."""
    rule = rule.strip()
    while re.match(r'^"+(.*[^"])"+$', rule):  # outer quotes, as often as they are doubled
        rule = re.sub(r'^"+(.*[^"])"+$', r"\1", rule)
    spec = {
        "keywords": [],
        "min_count": 1,
        "exclude": False,
        "any": False,
        "end_period": bool(re.search(r"must\s+end\s+with\s+(a\s+)?period", rule, re.I)),
        "capitalized": bool(re.search(r"must\s+use\s+capitalized\s+letters\s+for\s+each\s+word", rule, re.I)),
        "min_words": 0,
        "max_words": None,
    }
    m = re.search(r"(?:at\s+least|minimum\s+of)\s+(\S+)\s+word", rule, re.I)
    if m:
        spec["min_words"] = _number(m.group(1), _KW_COUNT_WORDS)
    m = re.search(r"(?:not\s+exceed|at\s+most|no\s+more\s+than|maximum\s+of)\s+(\S+)\s+word", rule, re.I)
    if m:
        spec["max_words"] = _number(m.group(1), _KW_COUNT_WORDS)
    if re.search(r"is\s+a\s+single\s+word", rule, re.I):
        spec["min_words"] = spec["max_words"] = 1
    if re.search(r"(avoid\s+using\s+(the\s+)?term|must\s+be\s+avoided)", rule, re.I):
        m = re.search(r"[\"']([^\"']+)[\"']", rule)  # the first quoted term is the one to avoid
        if m:
            spec["keywords"], spec["exclude"] = [m.group(1)], True
        return spec
    spec["any"] = bool(re.search(r"\bOR\b", rule, re.I))
    m = re.search(
        r"at least (\d+|one|two|three|four|five|six|seven|eight|nine|ten|once|twice)(?:\s+times?)?\b"
        r"(?!\s+words\s+long)",
        rule,
        re.I,
    )
    if m:
        word = m.group(1).lower()
        spec["min_count"] = int(word) if word.isdigit() else _KW_COUNT_WORDS.get(word, 1)
    if re.search(r"must appear multiple times", rule, re.I):
        spec["min_count"] = 2
    doubled = r'["”]{2}([^"“]+)["“]{2}'  # ""keyword"" (doubled quotes) wins over single quotes
    quoted = doubled if re.search(doubled, rule) else r"[\"'「“]([^\"']+)[\"'」”]"
    spec["keywords"] = [m.group(1) for m in re.finditer(quoted, rule)]
    return spec


def _keyword_rule_holds(text: str, spec: dict) -> bool:
    words = text.split()
    if spec["capitalized"] and any(not w[0].isupper() for w in words):
        return False
    if spec["end_period"] and not text.strip().endswith("."):
        return False
    # an unparsed count word ("at least fifty words") is no bound (the official code would raise on it)
    if spec["min_words"] is not None and len(words) < spec["min_words"]:
        return False
    if spec["max_words"] is not None and len(words) > spec["max_words"]:
        return False
    counts = [len(_keyword_regex(k).findall(text)) for k in spec["keywords"]]
    if spec["exclude"]:
        return not any(counts)
    if spec["any"]:
        return any(c >= spec["min_count"] for c in counts)
    return all(c >= spec["min_count"] for c in counts)


def _table_column_for(text: str, target: str) -> list[str]:
    """The cells of the table column whose header shares most words with ``target`` (else the wordiest column);
    rows whose cell count differs from the header's are skipped. Leading ``#`` marks are dropped from cells."""
    lines = [ln.strip() for ln in text.split("\n") if ln.strip().startswith("|") and ln.strip().endswith("|")]
    if len(lines) < 3:
        return []
    headers = [h.strip() for h in lines[0].split("|")[1:-1]]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == len(headers):
            rows.append(dict(zip(headers, cells)))
    if not headers or not rows:
        return []

    def norm(word: str) -> str:
        return re.sub(r"\W", "", word).lower()

    def clean(cell: str) -> str:
        return re.sub(r"^#+\s*", "", cell).strip()

    wanted = {norm(w) for w in target.split() if norm(w)}
    best, best_hits = None, -1
    for header in headers:
        hits = sum(1 for w in header.split() if norm(w) and norm(w) in wanted)
        if hits > best_hits:
            best, best_hits = header, hits
    if best_hits <= 0:
        mean_words = {}
        for header in headers:
            cells = [clean(r[header]) for r in rows if header in r]
            if cells:
                mean_words[header] = sum(len(c.split()) for c in cells) / len(cells)
        if not mean_words:
            return []
        best = max(mean_words, key=mean_words.get)
    return [clean(r[best]) for r in rows if best in r]


def _is_rule_separator(line: str) -> bool:
    line = line.strip()
    return len(line) >= 3 and line[0] in "-*=" and all(c == line[0] for c in line)


def _keyword_elements(text: str, target: str) -> list[str] | None:
    shape = _shape(text)
    if shape == "table":
        return _table_column_for(text, target)
    if shape == "json":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            return []
        if isinstance(data, dict):
            return [str(v) for v in data.values()]
        return [str(v) for v in data] if isinstance(data, list) else None
    if shape == "numbered":
        return [line.split(".", 1)[1].strip() for line in text.split("\n") if _NUMBERED.match(line)]
    if shape == "bullet":
        return _bullet_items(text)
    sections, current = [], []  # plain text: sections between ---/***/=== lines
    for line in text.split("\n"):
        if _is_rule_separator(line):
            if current:
                sections.append("\n".join(current).strip())
                current = []
        else:
            current.append(line)
    if current:
        sections.append("\n".join(current).strip())
    return sections or [text]


def content_keywords(rule: str, text: str) -> bool:
    """Content_Keywords: quoted keywords must occur (whole words, case-insensitive unless CJK), ``at least N
    times``; ``avoid using the term``; ``OR``; "each/every X must ..." applies the rule to every list item, table
    cell of the best-matching column, JSON value or ---separated section."""
    if re.search(r"\b(each|every)\b", rule, re.I) and "for each word" not in rule:
        m = re.search(r"\b(each|every)\s+(.+?)\s+(must|should|needs to|has to)\s+(.*)", rule, re.I)
        if not m:
            return False
        spec = _keyword_rule(m.group(4))
        elements = _keyword_elements(text, m.group(2).lower())
        return bool(elements) and all(_keyword_rule_holds(e, spec) for e in elements)
    include = re.search(r"includes?\s+the\s+keyword\s+[\"']([^\"']+)[\"']", rule, re.I)
    avoid = re.search(r"avoids?\s+the\s+keyword\s+[\"']([^\"']+)[\"']", rule, re.I)
    if include and avoid:  # plain substrings here, case-sensitive
        return include.group(1) in text and avoid.group(1) not in text
    topics = re.findall(
        r"If discussing\s+([^,]+),\s*the summary must include the keyword\s+[\"']([^\"']+)[\"']", rule, re.I
    )
    if topics:
        for topic, keyword in topics:
            if _topic_mentioned(topic, text) and keyword not in text:
                return False
        return True
    return _keyword_rule_holds(text, _keyword_rule(rule))


def _topic_mentioned(topic: str, text: str) -> bool:
    """ "X a/b Y" stands for "X a Y" or "X b Y"; a slash elsewhere separates alternatives."""
    if "/" not in topic:
        return topic in text
    m = re.match(r"^(.*\s)(\S+)\/(\S+)(\s.*)$", topic)
    if m:
        pre, a, b, post = m.groups()
        return pre + a + post in text or pre + b + post in text
    return any(part.strip() in text for part in topic.split("/"))


# ----------------------------------------------------------------------------------------------- Content_Others
# Runs of these code points count as one "emoji" each (the official character class, which is wide: it takes in
# everything from U+24C2 up, CJK included).
_EMOJI_RUN = re.compile(
    "[\U0001f600-\U0001f64f\U0001f300-\U0001f5ff\U0001f680-\U0001f6ff\U0001f700-\U0001f77f"
    "\U0001f780-\U0001f7ff\U0001f800-\U0001f8ff\U0001f900-\U0001f9ff\U0001fa00-\U0001fa6f"
    "\U0001fa70-\U0001faff\U00002702-\U000027b0\U000024c2-\U0001f251\U00010000-\U0010ffff]+"
)
_SOURCES_AT_END = re.compile(r"Sources:\s*.+$")
_BLURB_RULES = (
    "Response must be written as a short blurb",
    "ensure that the response is written as a short blurb",
    "ensure the response is a short blurb",
    "The response must be short and simple",
)


def content_others(rule: str, text: str) -> bool:
    """Content_Others (Content_Identifiers, Content_Length, Citations_In-text, Content_Quotes, Content_Sources,
    Content_Mention): a fixed list of rule sentences, most matched exactly; any other rule fails."""
    if rule == "Keep it a paragraph long":
        return "\n" not in text
    start = re.match(r"Start identifier( must be|:)(?:.*)?\s'([^']+)'", rule)
    if "Each example must start with" in rule:
        return start is not None and start.group(2) in text  # official: raises without the quoted identifier
    if start:
        return text.lstrip(" #").lower().startswith(start.group(2).lower())
    start = re.search(
        r"(?:Start|start|begin|it is essential to start) (?:with|by) the (?:identifier|phrase) "
        r"'?([^']+)'?",
        rule,
        re.I,
    )
    if start:
        return text.lstrip(" #").lower().startswith(start.group(1).lower())
    if rule in (
        "End identifier: Sources must be cited at the end of the response",
        "make sure to conclude your response by citing your sources, as this is a crucial part of the answer",
    ):
        return bool(_SOURCES_AT_END.search(text.strip()))
    m = re.match(r"The name of the showroom must start with the letter '([A-Za-z])'\.", rule)
    if m:
        return bool(re.search(rf"\b{m.group(1).upper()}[a-zA-Z]*\b", text))
    if rule in _BLURB_RULES:
        return len(text) <= 200
    if rule == "The response should be concise, with a maximum of 50 words":
        return len(text.split()) <= 50
    if rule == "Each sentence must include at least three emojis.":
        parts = (s.strip() for s in re.split(r"(?<=[.!?])\s+(?=\S)", text))
        return all(len(_EMOJI_RUN.findall(s)) >= 3 for s in parts if s)
    m = re.search(r"[Mm]ust mention (.+) and the (.+)", rule)
    if m:
        return m.group(1) in text and f"the {m.group(2)}" in text
    if rule in ("Must include quotes from the sources", "with quotes from these sources"):
        return bool(re.search(r"[\"“”‘’']", text))
    if rule in ("Must provide sources that are cited", "The response must include sources that are cited"):
        return bool(_SOURCES_AT_END.search(text) and re.search(r"\[\d+\]", text))
    if rule == "It must include in-text citations":
        return bool(re.search(r"\[\d+\]|\([A-Za-z]+, \d{4}\)", text))
    return "be in full sentences" in rule


# ----------------------------------------------------------------------------------------------- Content_Punctuation
_PUNCT_NAMES = {"period": ".", "question mark": "?", "exclamation mark": "!", "semicolon": ";"}


def _sentences(text: str) -> list[str]:
    from .text import ensure_punkt

    ensure_punkt()
    import nltk

    return nltk.sent_tokenize(text)


def content_punctuation(rule: str, text: str) -> bool:
    """Content_Punctuation: how the response (or each sentence / line / table cell / bullet) must end.

    Units: a rule naming "paragraph"/"section" checks each non-blank line; "each"/"any"/"all" (as substrings)
    each NLTK sentence; "table"/"cell" each cell below the first two lines; "bullet point" each sentence of every
    ``-``/``*``/``•`` line; otherwise the whole stripped response. The endings named (period, question mark,
    exclamation mark, semicolon; "punctuation mark" = any ASCII punctuation) must (or, after "must not", "avoid",
    "exclude", "do not use", must not) end every unit; "<name> followed by a `x`" requires that pair."""
    low = rule.strip().lower().rstrip(".")
    whole = text.strip()
    if "paragraph" in low or "section" in low:
        units = [ln.strip() for ln in whole.split("\n") if ln.strip()]
    elif "each" in low or "any" in low or "all" in low:
        units = _sentences(whole)
    else:
        units = [whole]
    if "table" in low or "cell" in low:
        rows = whole.split("\n")
        rows = rows[2:] if len(rows) > 1 else rows
        cells = (c.strip() for row in rows for c in re.split(r"\s*\|\s*", row.strip("|")) if c.strip())
        units = [c for c in cells if c.strip("-")]
    if "bullet point" in low:
        wanted = next((p for name, p in _PUNCT_NAMES.items() if name in low), None)
        points = re.findall(r"^[\-\*\•]\s.*$", whole, re.M)
        return all(
            (s.strip().endswith(wanted) if wanted else s.strip()[-1] in string.punctuation)
            for point in points
            for s in _sentences(point)
        )
    negative = re.search(r"\b(must not|avoid|exclude|not end with|do not use)\b", low) is not None
    if any(not u for u in units):
        return negative
    pair = re.search(r"(period|question mark|exclamation mark|semicolon)\s+followed by a `([^`]+)`", low)
    if pair:
        ending = _PUNCT_NAMES.get(pair.group(1), "") + pair.group(2)
        return all(u.endswith(ending) for u in units)
    names = [
        n.rstrip("s")
        for n in re.findall(r"\b(periods?|question marks?|exclamation marks?|semicolons?|punctuation marks?)\b", low)
    ]
    if any("punctuation mark" in n for n in names):
        allowed = set(string.punctuation)
    else:
        allowed = {_PUNCT_NAMES[n] for n in names if n in _PUNCT_NAMES}
    return all((u[-1] in allowed) != negative for u in units if u)


# ----------------------------------------------------------------------------------------------- Format_Json
_JSON_N = r"(\d+|two|three)"
_JSON_EXACT = [
    r"exactly {n} levels? of nesting",
    r"structured as a json object with a nesting level of {n}",
    r"json example with exactly {n} levels?",
    r"object nesting levels must be {n}",
    r"answer must include a json example with exactly {n} levels?",
    r"nesting level of {n}",
    r"be limited to {n} levels of nesting",
]
_JSON_MAX = [
    r"must not exceed {n} levels? of nesting",
    r"no more than {n} levels?",
    r"maximum of {n} nesting levels",
    r"maximum of {n} object nesting levels",
    r"maximum of {n} levels",
    r"not exceed {n} levels",
    r"levels not exceeding {n}",
    r"with the structure not exceeding {n} levels",
    r"object nesting levels must not exceed {n} levels",
    r"object nesting levels must not exceed {n}",
    r"json must have a maximum of {n} nesting levels",
    r"response must not exceed {n} levels? of nesting",
    r"and at most {n}",
]
_JSON_MIN = [
    r"at least {n} levels? of nesting",
    r"at least {n} levels? deep",
    r"must include a json object with at least {n} levels?",
    r"answer must include a json object with at least {n} levels?",
    r"and at least {n}",
]


def _json_level(word: str) -> int:
    return int(word) if word.isdigit() else {"two": 2, "three": 3}[word]


def _json_depth(value) -> int:
    """Containers add one level; an empty container or a scalar adds none (``{"a": 1}`` is 1, ``[]`` is 0)."""
    if isinstance(value, dict) and value:
        return 1 + max(_json_depth(v) for v in value.values())
    if isinstance(value, list) and value:
        return 1 + max(_json_depth(v) for v in value)
    return 0


def format_json(rule: str, text: str) -> bool:
    """Format_Json: nesting depth of the response's JSON (the first ```json block, else the whole response; JSON
    ``null`` counts as unparsed) against "exactly N" (first phrase found), else the tightest "at most"/"at least".
    A rule with no bound fails."""
    s = re.sub(r"[^\w\s]", "", rule.lower())
    exact = lo = hi = None
    for pat in _JSON_EXACT:
        m = re.search(pat.format(n=_JSON_N), s)
        if m:
            exact = _json_level(m.group(1))
            break
    if exact is None:
        his = [_json_level(v) for pat in _JSON_MAX for v in re.findall(pat.format(n=_JSON_N), s)]
        los = [_json_level(v) for pat in _JSON_MIN for v in re.findall(pat.format(n=_JSON_N), s)]
        hi, lo = (min(his) if his else None), (max(los) if los else None)
    fenced = re.search(r"```json(.*?)```", text, re.S)
    try:
        value = json.loads(fenced.group(1).strip() if fenced else text)
        depth = _json_depth(value)
    except (json.JSONDecodeError, RecursionError):  # nesting past Python's recursion limit: the official code raises
        return False
    if value is None:
        return False
    if exact is not None:
        return depth == exact
    if hi is None and lo is None:
        return False
    return (lo is None or depth >= lo) and (hi is None or depth <= hi)


# ----------------------------------------------------------------------------------------------- Format_Markdown
_MD_N = r"(\b(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)\b)"
_MD_VERBS = (
    r"include|includes|included|including|use|using|used|uses|formatted|presented|organized|structured|"
    r"feature|should be|incorporate"
)
_MD_HEADINGS_PHRASES = (
    "include headings",
    "includes headings",
    "use heading levels",
    "using heading levels",
    "presented under a separate heading",
    "separated with headings",
    "with headings",
)
_MD_QUOTE_PHRASES = (
    "use block quotes",
    "using block quotes",
    "include a block quote",
    "using markdown block quotes",
    "employ block quotes",
    "present the headline as a block quote",
)


def _md_number(word: str) -> int | None:
    word = word.strip().lower()
    return int(word) if word.isdigit() else _SMALL.get(word)


def _markdown_clause_rule(clause: str, rule: str) -> dict | None:
    """The heading rule one comma-clause states (None: the clause states none). ``rule`` is the whole sentence:
    some phrases are looked up there, as the official parser does."""
    whole = rule.lower()
    if (
        "include headings at two levels: main and subheadings" in whole
        or "be structured with a main heading and subheadings" in whole
    ):
        return {"type": "levels", "levels": {1, 2}}
    if rule == "Questions must be organized under a level 2 heading.":
        return {"type": "questions_at", "levels": {2}}
    if "include a single level 1 heading" in whole:
        return {"type": "count_at_level", "level": 1, "count": 1}
    if "be structured using a minimum of two heading levels" in whole or "include headings at two levels" in whole:
        return {"type": "distinct_levels", "op": "at least", "count": 2}
    if (
        rule == "format the response using Markdown, employing '##' for main points and '###' for subpoints to "
        "clearly organize the information"
    ):
        return {"type": "levels", "levels": {2, 3}}
    m = re.search(rf"(?i)use heading levels {_MD_N} and {_MD_N}", clause) or re.search(
        rf"(?i)use heading levels.*?level\s*{_MD_N}.*?level\s*{_MD_N}", clause
    )
    if m:
        a, b = _md_number(m.group(1)), _md_number(m.group(2))
        return {"type": "levels", "levels": {a, b}} if a is not None and b is not None else None
    found = (
        re.findall(rf"(?i)a heading level {_MD_N}", clause)
        or re.findall(r"(?i)H(\d+)", clause)
        or re.findall(rf"(?i)Level {_MD_N} for", clause)
    )
    if found and ("must include" in clause or "should" in clause):
        return {"type": "levels", "levels": {_md_number(x) for x in found}}
    if "titled" in clause:
        c = clause.strip().rstrip(".")
        m = re.search(rf"(?i)level {_MD_N} heading titled [\"'](.*?)[\"']", c) or re.search(
            rf"(?i)(?:a|at least one|two|three|four|five|six|seven|eight|nine|ten|\d+) level {_MD_N} heading with the "
            r"text [\"'](.*?)[\"']",
            c,
        )
        if m:
            level = _md_number(m.group(1))
            return {"type": "titled", "level": level, "content": m.group(2)} if level is not None else None
    c = (clause.strip().rstrip(".") if "titled" in clause else clause).strip().lower().rstrip(".")
    if re.search(_MD_VERBS, c, re.I):
        m = (
            re.search(rf"(?i)(?:a|at least \d+) heading level {_MD_N}", c)
            or re.search(
                rf"(?i)(?:a|at least one|two|three|four|five|six|seven|eight|nine|ten|\d+) level {_MD_N} "
                r"heading",
                c,
            )
            or re.search(r"(?i)must use a heading level of H(\d+)", c)
        )
        if m:
            level = _md_number(m.group(1))
            return {"type": "at_level", "level": level} if level is not None else None
        m = re.search(
            rf"(?i)(at least|at most|exactly|up to|a maximum of|under) {_MD_N} heading levels?", c
        ) or re.search(rf"(?i)(at least|at most|exactly|up to|a maximum of|under) {_MD_N} levels?", c)
        if m:
            op = m.group(1).lower()
            op = "at most" if op in ("up to", "a maximum of", "under") else op
            count = _md_number(m.group(2))
            return {"type": "distinct_levels", "op": op, "count": count} if count is not None else None
    m = re.search(rf"(?i)(?:heading levels)? must (?:not exceed|be limited to)\s+(?:level\s+)?{_MD_N}", c)
    if m:
        level = _md_number(m.group(1))
        return {"type": "max_level", "level": level} if level is not None else None
    m = re.search(rf"(?i)must begin with a level {_MD_N} heading", c)
    if m:
        level = _md_number(m.group(1))
        return {"type": "first_level", "level": level} if level is not None else None
    m = re.search(rf"(?i)use heading level {_MD_N}", c)
    if m:
        level = _md_number(m.group(1))
        return {"type": "at_level", "level": level} if level is not None else None
    if any(p in whole for p in _MD_HEADINGS_PHRASES):
        return {"type": "at_level", "level": None}
    return None


def _headings(text: str) -> list[tuple[int, str]]:
    out = []
    for line in text.split("\n"):
        m = re.match(r"^(#+)\s+(.*?)\s*$", line.strip())
        if m:
            out.append((len(m.group(1)), m.group(2).strip()))
    return out


def _heading_rule_holds(rule: dict, heads: list[tuple[int, str]]) -> bool:
    kind, levels = rule["type"], {lv for lv, _ in heads}
    if kind == "distinct_levels":  # the only rule an empty heading list can pass
        n, want = len(levels), rule["count"]
        return {"at least": n >= want, "at most": n <= want, "exactly": n == want}.get(rule["op"], False)
    if not heads:
        return False
    if kind == "at_level":  # level None: any heading
        return rule["level"] is None or rule["level"] in levels
    if kind == "titled":
        return any(lv == rule["level"] and content == rule["content"] for lv, content in heads)
    if kind == "max_level":
        return all(lv <= rule["level"] for lv in levels)
    if kind == "first_level":
        return heads[0][0] == rule["level"]
    if kind == "levels":
        return rule["levels"] <= levels
    if kind == "questions_at":
        return all(lv in rule["levels"] for lv, content in heads if "?" in content)
    if kind == "count_at_level":
        return sum(lv == rule["level"] for lv, _ in heads) == rule["count"]
    return False


def _block_quotes_ok(rule: str, text: str) -> bool:
    lines = text.split("\n")
    quoted = sum(1 for ln in lines if ln.strip() and ln.strip().startswith(">"))
    low = rule.lower()
    if "at least" in low:
        m = re.search(rf"(?i){_MD_N} block quotes", rule)
        want = _md_number(m.group(1)) if m else None
        return want is not None and quoted >= want  # official: raises without "N block quotes"
    if any(p in low for p in _MD_QUOTE_PHRASES):
        return quoted > 0
    return quoted == len(lines)  # every line, blank lines included, must be quoted


def format_markdown(rule: str, text: str) -> bool:
    """Format_Markdown: ATX headings (``#`` runs then whitespace, on a stripped line) against the heading rules of
    each clause (clauses split at a comma between two word characters); "block quotes", "bold", "bullet points" add
    their own checks. With "each"/"any" in the rule, every heading must pass the rules on its own."""
    low = rule.lower()
    if "block quotes" in low and not _block_quotes_ok(rule, text):
        return False
    if "bold" in low and not re.search(r"(\*\*.*?\*\*|__.*?__)", text):
        return False
    if "bullet points" in low and not any(re.search(r"^\s*[-\*\+]\s", ln) for ln in text.split("\n")):
        return False
    rules = [r for r in (_markdown_clause_rule(c, rule) for c in re.split(r"\b(?:,)\b", rule)) if r is not None]
    heads = _headings(text)
    if "each" in low or "any" in low:
        return bool(heads) and all(_heading_rule_holds(r, [h]) for h in heads for r in rules)
    return all(_heading_rule_holds(r, heads) for r in rules)


# ----------------------------------------------------------------------------------------------- Format_Others
_FO_N = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_XML_TAG = re.compile(r"<\s*([a-zA-Z_:][\w:.-]*)\s*(?:\s+[a-zA-Z_:][\w:.-]*=['\"][^'\"]*['\"])*\s*/?>")


def _xml_attribute_counts(text: str) -> list[int] | None:
    """Attribute count of every start tag (in the first ```xml block when the text has one; None when that block is
    not closed)."""
    if "```xml" in text:
        m = re.search(r"```xml(.*?)```", text, re.S)
        if not m:
            return None
        text = m.group(1)
    return [len(re.findall(r"(\w+)=[\"'][^\"']*[\"']", t.group(0))) for t in _XML_TAG.finditer(text)]


def _attrs(test: Callable[[int, int], bool]) -> Callable[[str, int], bool]:
    def check(text: str, n: int) -> bool:
        counts = _xml_attribute_counts(text)
        return counts is not None and all(test(c, int(n)) for c in counts)

    return check


def _markdown_table_rows_at_most(text: str, n: int) -> bool:
    rows = [r for r in re.findall(r"^\|.*\|$", text, re.M) if not re.match(r"^\|(\s*-+\s*\|)+$", r)]
    return len(rows) <= int(n) and text.lower().count("<tr>") <= int(n)


_FORMAT_OTHERS: list[tuple[str, Callable[..., bool], tuple]] = [
    (rf"no more than {_FO_N} attributes?", _attrs(lambda c, n: c <= n), ()),
    (rf"must not exceed {_FO_N}(?:.*)?attributes?", _attrs(lambda c, n: c <= n), ()),
    (r"Limit the number of attributes to two", _attrs(lambda c, n: c == n), (2,)),
    (rf"Number of attributes must be exactly {_FO_N}", _attrs(lambda c, n: c == n), ()),
    (rf"must have exactly {_FO_N} attributes?", _attrs(lambda c, n: c == n), ()),
    (rf"must include exactly {_FO_N} attributes?", _attrs(lambda c, n: c == n), ()),
    (rf"at least {_FO_N} attributes?", _attrs(lambda c, n: c >= n), ()),
    (r"Must include '(.*?)'", lambda t, phrase: bool(re.search(r"\b" + re.escape(str(phrase)) + r"\b", t, re.I)), ()),
    (r"Must be in APA format", lambda t: bool(re.search(r"\(\s*\w+,\s*\d{4}\s*\)", t)), ()),
    (r"must be provided in APA format", lambda t: bool(re.search(r"\(\s*\w+,\s*\d{4}\s*\)", t)), ()),
    (r"No bullet points", lambda t: not re.search(r"^[^\S\n]*[-*]", t, re.M), ()),
    (r"Must be listed as bullet points", lambda t: bool(re.search(r"^[^\S\n]*[-*]", t, re.M)), ()),
    (r"is structured as bullet points", lambda t: bool(re.search(r"^[^\S\n]*[-*]", t, re.M)), ()),
    (r"block quotes format", lambda t: bool(re.search(r"^>", t, re.M)) or "<blockquote>" in t.lower(), ()),
    (r"be formatted in block quotes", lambda t: bool(re.search(r"^>", t, re.M)) or "<blockquote>" in t.lower(), ()),
    (rf"no more than {_FO_N} rows", _markdown_table_rows_at_most, ()),
    (rf"table with no more than {_FO_N} rows", _markdown_table_rows_at_most, ()),
    (rf"a table, which is limited to a maximum of {_FO_N} rows", _markdown_table_rows_at_most, ()),
    (r"full sentences", lambda t: True, ()),
    (r"short blurb", lambda t: len(t) <= 200, ()),
    (
        rf"The answer must include at least {_FO_N} references?",
        lambda t, n: len(re.findall(r"(\[\d+\]|\([A-Za-z]+, \d{4}\))", t)) >= int(n),
        (),
    ),
    (r"No lists", lambda t: not re.search(r"^[^\S\n]*(\d+\.)\s", t, re.M), ()),
    (r"No number points", lambda t: not re.search(r"^[^\S\n]*\d+\.", t, re.M), ()),
    (r"Response must be written at medium length", lambda t: 200 < len(t) <= 400, ()),
]


def format_others(rule: str, text: str) -> bool:
    """Format_Others (XML attributes, block quotes, bullets, APA, references, row limits, blurbs): the first of
    the phrases above found in the rule (case-insensitive) decides; none found fails."""
    for pattern, test, extra in _FORMAT_OTHERS:
        m = re.search(pattern, rule, re.I)
        if m:
            args = [_SMALL.get(a.lower(), a) if isinstance(a, str) else a for a in (*m.groups(), *extra)]
            return test(text, *args)
    return False


# ----------------------------------------------------------------------------------------------- Format_Table
_TABLE_WORDS = {**_SMALL, **_TEENS_TENS}
_TN = r"(\d+|\b(?:" + "|".join(_TABLE_WORDS) + r")\b)"
_ROW_RULES = [
    (r"exactly\s+{n}\s+rows?", "exact"),
    (r"no\s+more\s+than\s+{n}\s+rows?", "max"),
    (r"not\s+have\s+more\s+than\s+{n}\s+rows?", "max"),
    (r"must\s+not\s+exceed\s+{n}\s+rows?", "max"),
    (r"not\s+exceed\s+{n}\s+rows?", "max"),
    (r"not\s+exceeding\s+{n}\s+rows?", "max"),
    (r"should\s+not\s+exceed\s+{n}\s+rows?", "max"),
    (r"row\s+limit\s+of\s+{n}", "max"),
    (r"{n}\s+rows?\s+must\s+be\s+included", "exact"),
    (r"exactly\s+.+and {n}\s+rows?", "exact"),
    (r"not exceed\s+.+and {n}\s+rows?", "max"),
    (r"a maximum of\s+{n}\s+rows", "max"),
    (r"limited to a maximum of\s+{n}\s+rows", "max"),
    (r"limited to\s+{n}\s+rows", "max"),
    (r"a row limit of\s+{n}", "max"),
    (r"a maximum of\s+.+and {n}\s+rows?", "max"),
    (r"limit the number of rows to\s+{n}", "max"),
    (r"limit it to\s+{n}\s+rows", "max"),
    (r"limit the table to\s+{n}\s+rows", "max"),
    (r"the number of rows in each table does not exceed\s+{n}", "max"),
]
_COLUMN_RULES = [
    (r"exactly\s+{n}\s+columns?", "exact"),
    (r"no\s+more\s+than\s+{n}\s+columns?", "max"),
    (r"not\s+have\s+more\s+than\s+{n}\s+columns?", "max"),
    (r"must\s+not\s+exceed\s+{n}\s+columns?", "max"),
    (r"not\s+exceed\s+{n}\s+columns?", "max"),
    (r"not\s+exceeding\s+{n}\s+columns?", "max"),
    (r"should\s+not\s+exceed\s+{n}\s+columns?", "max"),
    (r"column\s+limit\s+of\s+{n}", "max"),
    (r"must\s+have\s+exactly\s+{n}\s+columns?", "exact"),
    (r"exactly\s+.+and {n}\s+columns?", "exact"),
    (r"in\s+{n}\s+columns", "exact"),
    (r"not exceed\s+.+and {n}\s+columns?", "max"),
    (r"maximum of\s+{n}\s+columns", "max"),
    (r"maximum\s+{n}\s+columns", "max"),
    (r"at most\s+{n}\s+columns", "max"),
    (r"limited to a maximum of\s+{n}\s+columns", "max"),
    (r"limited to\s+{n}\s+columns", "max"),
    (r"a column limit of\s+{n}", "max"),
    (r"a maximum of\s+.+and {n}\s+columns?", "max"),
    (r"limit the number of columns to\s+{n}", "max"),
    (r"limit it to\s+{n}\s+columns", "max"),
    (r"limit the table to\s+{n}\s+columns", "max"),
    (r"the number of columns in each table does not exceed\s+{n}", "max"),
    (r"(a|each) (single) column", "single"),
    (r"presented in (a|one) single column", "single"),
    (r"title must not exceed {n}\s+words", "title"),
]
_COLUMN_NAME_RULES = [  # (pattern, kind): "names" lists column names, "content" lists what rows must hold
    (r"columns?\s+should\s+be\s+([\w\s,]+)", "names"),
    (r"columns:\s+([\w\s,']+)", "names"),
    (r'must include columns for\s+"([^"]+)"', "names"),
    (r"must include the\s+([\w\s,]+)", "content"),
    (
        r"each (entry|row|item|game|series) must include (?:the\s+)?([\w\s,]+(?:\s+and\s+(?:its|their)\s+[\w\s,]+)?)",
        "content",
    ),
    (r'table must include columns (for|named)\s+["]([^"]+)["]', "names"),
    (
        r"each (entry|row|item|game|series) should (?:be )?(present|include|contain|show)(?:ed)? (?:in|with)?\s+"
        r"([\w\s,]+)",
        "content",
    ),
]
# "if you use a table ..." makes the table optional. The last two phrases are one in the official list (a missing
# comma joins them), so neither alone makes a table optional.
_OPTIONAL_TABLE = [
    r"if you (include|use|utilize|incorporate|present) (a |any )?(tables?|tabular data)",
    r"if you (decide|choose|opt) to (use|include|incorporate|present|utilize) (a |any )?(tables?|tabular data)",
    r"if (a |any )?(tables?|tabular data|table format) (is|are) (used|included|utilized|incorporated|presented|chosen)",
    r"if there (is|are) (a |any )?(tables?|tabular data|table format) (used|included|utilized|incorporated|presented|"
    r"chosen)",
    r"if you (decide|choose|opt) to (use|include|incorporate|present|utilize) (your )?information in a table"
    r"if presented in a table",
]


def _table_number(word: str) -> int:
    return _TABLE_WORDS[word] if word in _TABLE_WORDS else int(word)


def _table_rule(low: str) -> dict:
    spec: dict = {"rows": None, "cols": None, "markdown": "markdown" in low, "columns": [], "content": []}
    for pat, kind in _ROW_RULES:
        m = re.search(pat.format(n=_TN), low)
        if m:
            spec["rows"] = (kind, _table_number(m.group(1)))
            break
    for pat, kind in _COLUMN_RULES:
        m = re.search(pat.format(n=_TN), low)
        if m:
            if kind == "single":
                spec["cols"] = ("exact", 1)
            elif kind == "title":
                spec["title_words"] = _table_number(m.group(1))
            else:
                spec["cols"] = (kind, _table_number(m.group(1)))
            break
    if "series must include" in low and "title" in low and "author" in low:
        spec["content"] = ["title", "author", "year", "publication"]
    if "film title" in low and "release year" in low:
        spec["content"] = ["film title", "release year"]
    if "columns for" in low and '"' in low:
        names = [c.strip().rstrip(",").strip() for c in re.findall(r'"([^"]+)"', low)]
        if any(names):
            spec["columns"] = [c for c in names if c]
            return spec  # quoted column names: nothing else in the rule is read
    for pat, kind in _COLUMN_NAME_RULES:
        m = re.search(pat, low)
        if not m:
            continue
        if kind == "names":
            if m.group(1):
                spec["columns"] += [c for c in (c.strip("'\" ") for c in re.split(r"[,、，和and]", m.group(1))) if c]
        elif len(m.groups()) > 1:
            wanted = m.groups()[-1]
            if " and " in wanted:
                left, right = wanted.split(" and ")[:2]
                spec["content"] += [x.strip() for x in left.split(",")] if "," in left else [left.strip()]
                spec["content"].append(right[4:].strip() if right.startswith("its ") else right.strip())
            else:
                spec["content"] += [c for c in (c.strip() for c in re.split(r"[,、，]", wanted)) if c]
    m = re.search(r'include columns for\s+(?:"([^"]+)",?\s*)+', low)
    if m:
        spec["columns"] += [c.strip() for c in re.findall(r'"([^"]+)"', m.group(0)) if c.strip()]
    quoted = [c.strip().rstrip(",").strip() for c in re.findall(r'["]([^"]+)["]', low)]
    if quoted and not spec["columns"]:
        spec["columns"] += [c for c in quoted if c]
    m = re.search(r"each\s+\w+\s+must\s+include\s+(?:the\s+)?([\w\s]+\s+and\s+its\s+[\w\s]+)", low)
    if m:
        spec["content"] += [p.strip() for p in re.split(r"\s+and\s+its\s+", m.group(1)) if p.strip()]
    if "single column" in low:
        spec["cols"] = ("exact", 1)
    m = re.search(r"title\s+must\s+not\s+exceed\s+" + _TN + r"\s+words", low)
    if m:
        spec["title_words"] = _table_number(m.group(1))
    spec["content"] = [c for c in dict.fromkeys(spec["content"]) if c]
    return spec


# A header that answers a content requirement by name (the official special cases).
_CONTENT_HEADERS = {
    "film title": ("film", "title"),
    "release year": ("release", "year"),
    "title": ("title",),
    "author": ("author",),
    "year": ("year",),
    "year of publication": ("year",),
}


def format_table(rule: str, text: str) -> bool:
    """Format_Table: the markdown table (from the first ``|`` to the last) against row / column / title-length limits
    and required column names or contents. Rows = non-blank lines less the header (and the ``---`` line when the
    second line has one); columns = cells of the first line. No ``|`` at all passes only if the rule does not say
    "table" or says the table is optional."""
    low = rule.lower()
    spec = _table_rule(low)
    if "|" not in text:
        return "table" not in low or any(re.search(p, low, re.S) for p in _OPTIONAL_TABLE)
    span = re.search(r"(\|.*\|)", text, re.S)  # none when the text has a single "|"
    lines = [ln.strip() for ln in (span.group(1) if span else "").split("\n") if ln.strip()]
    headers = [h.strip().lower() for h in lines[0].split("|")[1:-1]] if lines else []
    if spec["markdown"] and not any(re.match(r"^\s*\|", ln) for ln in lines):
        return False
    if spec["rows"]:
        kind, n = spec["rows"]
        rows = len(lines) - (2 if len(lines) > 1 and "---" in lines[1] else 1)
        if (kind == "exact" and rows != n) or (kind == "max" and rows > n):
            return False
    if spec["cols"]:
        kind, n = spec["cols"]
        cols = len(lines[0].split("|")) - 2 if lines else None
        if cols is None or (kind == "exact" and cols != n) or (kind == "max" and cols > n):
            return False
    if "title_words" in spec and (not lines or len(lines[0].strip("|").strip().split()) > spec["title_words"]):
        return False
    if "series must include" in low and "title" in low and "author" in low and "year" in low:
        return all(any(w in h for h in headers) for w in ("title", "author", "year"))
    if "columns for" in low and spec["columns"]:  # a name matches a header containing it or contained in it
        return all(any(c.lower() in h or h in c.lower() for h in headers) for c in spec["columns"])
    if spec["columns"] and not all(any(c.lower() in h for h in headers) for c in spec["columns"]):
        return False
    if "film title" in low and "release year" in low:
        return any("film" in h or "title" in h for h in headers) and any("release" in h or "year" in h for h in headers)
    body = " ".join(" ".join(ln.split("|")) for ln in lines).lower()
    for want in (c.lower() for c in spec["content"]):
        if any(w in h for w in _CONTENT_HEADERS.get(want, ()) for h in headers):
            continue
        if want == "publication" or want in body:
            continue
        if not any(w in h for h in headers for w in want.split()):
            return False
    return True


# ----------------------------------------------------------------------------------------------- Language_Chinese
def _zhconv():
    try:
        import zhconv
    except ImportError:
        raise UnsupportedInstruction(
            "muldimif:language/chinese", "needs zhconv (traditional/simplified tables), which is not installed"
        ) from None
    return zhconv.convert


def _has_traditional(text: str) -> bool:
    convert = _zhconv()
    return any(convert(c, "zh-cn") != c for c in text)


def _has_simplified(text: str) -> bool:
    convert = _zhconv()
    return any(convert(c, "zh-tw") != c for c in text)


def _only(locale: str) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        convert = _zhconv()  # first: without the tables the rule is unsupported whatever the text
        return not re.search(r"[A-Za-z]", text) and convert(text, locale) == text

    return check


_CHINESE_RULES: list[tuple[str, Callable[..., bool]]] = [
    (r'Must include the phrase "{1,2}(.+?)"{1,2}', lambda t, phrase: phrase in t),
    (r'Must write the name "Shen Lim" in Simplified Chinese', lambda t: "沈林" in t),
    (r"Must (?:use|convert into|be converted into) Traditional Chinese characters", _only("zh-tw")),
    (r"include .*?Traditional Chinese characters", _has_traditional),
    (r"use .*?Traditional Chinese characters", _has_traditional),
    (r"使用繁體中文", _has_traditional),
    (r"(?:The answer must ){0,1}include some content in Simplified Chinese", _has_simplified),
    (r"Use Simplified Chinese characters", _has_simplified),
    (
        r"(?:must be|must use|must write|must be presented|answer must be|essential|is|should be|必须|请|需要) {0,1}"
        r"(?:in|provided in|written in|to use|conducted in|用|使用|提供|书写|翻译为|将文本翻译为) {0,1}"
        r"(?:Simplified Chinese|简体中文)",
        _has_simplified,
    ),
    (r"用中文简体描述", _has_simplified),
    (r"Names must be in Simplified Chinese", _has_simplified),
    (r"Must translate the text into Simplified Chinese", _only("zh-cn")),
    (r"Simplified", _has_simplified),
]


def language_chinese(rule: str, text: str) -> bool:
    """Language_Chinese: a quoted phrase; or some (any one character that converts) / only (no Latin letter, and
    conversion changes nothing) Traditional or Simplified characters, via zhconv's tables. Unknown rules fail."""
    for pattern, test in _CHINESE_RULES:
        m = re.search(pattern, rule, re.I)
        if m:
            return test(text, *(g for g in m.groups() if g is not None))
    return False


# ----------------------------------------------------------------------------------------------- Language_English
def _english_kind(low: str) -> str | None:
    if (
        re.search(r"\ball[- ]?uppercase\b", low)
        or "in all uppercase letters" in low
        or "in capitalized form" in low
        or low == "all uppercase"
    ):
        return "upper"
    if (
        "capitalize the first letter of each word" in low
        or "capitalized letters for each word" in low
        or "have each word capitalized" in low
        or "each word must be capitalized" in low
        or "each word in" in low
        or re.search(r"\bcapitalized\b", low)
        or ("each" in low and any(w in low for w in ("a capital letter", "capitalize", "capital")))
    ):
        return "title"
    if "must be in lowercase" in low or "all lowercase" in low or re.search(r"\blowercase\b", low):
        return "lower"
    return "blurb" if "written as a short blurb" in low else None


def _table_cells(text: str, part: str) -> str:
    """Cells (``|``-split, blank ones dropped) of the header line, the lines below it, or every line."""
    if "|" not in text:
        return text
    rows = [r.strip() for r in text.split("\n") if r.strip()]
    if part == "headers":
        rows = rows[:1]
    elif part == "entries":
        if len(rows) < 2:
            return text
        rows = rows[1:]
    return " ".join(c.strip() for r in rows for c in r.split("|") if c.strip())


def _heading_text(text: str) -> str:
    heads = re.findall(r"^#+\s*(.+)$", text, re.M)
    return " ".join(heads) if heads else text


def _english_scope(low: str, text: str) -> str:
    """The part of the response the case rule applies to: table headers/entries/cells, JSON keys/values, heading
    lines, or all of it (also when the named part is not there)."""
    if "headings" in low and "table" in low:
        return _table_cells(text, "all") or _heading_text(text) or text
    if "table" in low:
        part = "headers" if "header" in low else "entries" if "entries" in low else "all"
        return _table_cells(text, part)
    if "json" in low:
        if "{" not in text or "}" not in text:
            return text
        pat = r'"([^"]+)"\s*:' if "keys" in low else r':\s*"([^"]+)"' if "values" in low else None
        found = re.findall(pat, text) if pat else []
        return " ".join(found) if found else text
    if "heading" in low:
        return _heading_text(text)
    return text


def language_english(rule: str, text: str) -> bool:
    """Language_English: all uppercase (``s == s.upper()``), title case (no word starts with a-z), all lowercase,
    or "short blurb" (always passes), over the scope the rule names. A blank response or an unknown rule fails."""
    if not text.strip():
        return False
    low = rule.strip().lower()
    scoped = _english_scope(low, text)
    kind = _english_kind(low)
    if kind == "upper":
        return scoped == scoped.upper()
    if kind == "title":
        return not any("a" <= w[0] <= "z" for w in scoped.split())
    if kind == "lower":
        return scoped == scoped.lower()
    return kind == "blurb"


# ----------------------------------------------------------------------------------------------- Length_Paragraphs
_PN = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
_PARAGRAPH_RULES = [  # (pattern, kind): first match decides; "range" takes two digit groups
    (rf"exactly {_PN} paragraphs?", "exact"),
    (rf"must be exactly {_PN} paragraphs?", "exact"),
    (rf"(?:should|must) contain {_PN} paragraphs?", "exact"),
    (r"(?:must|should)? be a single paragraph", "single"),
    (r"(?:the response|the text|the answer) must be a single paragraph", "single"),
    (rf"at least {_PN} paragraphs?", "min"),
    (rf"least: {_PN} paragraphs?", "min"),
    (rf"a minimum of {_PN}(?: distinct)? paragraphs?", "min"),
    (rf"at most {_PN} paragraphs?", "max"),
    (rf"not exceeding {_PN} paragraphs?", "max"),
    (rf"no more than {_PN} paragraphs?", "max"),
    (r"最多(?:分为)?(\d+|一|两|二|三|四|五|六|七|八|九|十)个段落", "max"),
    (r"range (\d+)-(\d+) paragraphs?", "range"),
    (r"range: (\d+)-(\d+)", "range"),
    (r"between (\d+) and (\d+) paragraphs?", "range"),
    (r"between (\d+) to (\d+) paragraphs?", "range"),
    (r"(\d+) to (\d+) paragraphs?", "range"),
    (r"(?:divided)? into (\d+) to (\d+) paragraphs?", "range"),
    (r"a range of (\d+) to (\d+) paragraphs?", "range"),
    (rf"organized into at least {_PN} paragraphs?", "min"),
    (rf"structured into at most {_PN} paragraphs?", "max"),
]


def _bounds(kind: str, groups: tuple, number: Callable[[str], int]) -> tuple[int | None, int | None]:
    if kind == "single":
        return 1, 1
    if kind == "range":
        return number(groups[0]), number(groups[1])
    n = number(groups[0])
    return {"exact": (n, n), "min": (n, None), "max": (None, n)}[kind]


def _within(count: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or count >= lo) and (hi is None or count <= hi)


def length_paragraphs(rule: str, text: str) -> bool:
    """Length_Paragraphs: paragraphs = non-blank pieces between "\\n\\n"; a rule with no count fails. An unknown
    number word counts as 0."""
    low = rule.lower()
    for pattern, kind in _PARAGRAPH_RULES:
        m = re.search(pattern, low, re.I)
        if m:
            lo, hi = _bounds(kind, m.groups(), lambda w: int(w) if w.isdigit() else {**_SMALL, **_CJK_DIGITS}.get(w, 0))
            return _within(sum(1 for p in text.split("\n\n") if p.strip()), lo, hi)
    return False


# ----------------------------------------------------------------------------------------------- Length_Sentences
_SENTENCE_WORDS = {
    **_SMALL,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "fifty": 50,
    "hundred": 100,
    "thousand": 1000,
    **_CJK_DIGITS,
}
_SN = "(" + "|".join([r"\d+", *_SENTENCE_WORDS]) + ")"  # no word boundaries: "at least one" also reads "at least o..."
_CJK_SENT = r"(?:个句子|句话|句|個句子)"
_SENTENCE_RULES = [
    (rf"exactly(?:[:])? {_SN} (?:topic )?sentences?", "exact"),
    (rf"(?:should|must) contain {_SN} sentences?", "exact"),
    (rf"must be exactly {_SN} sentences?", "exact"),
    (r"(?:must|should)? be a single sentence", "single"),
    (r"consisting of (?:only )?one sentence", "single"),
    (r"(?:the response|the text|the answer) must be a single sentence", "single"),
    (r"in a single sentence", "single"),
    (rf"at least(?:[:])? {_SN} sentences?", "min"),
    (rf"a minimum of {_SN} sentences?", "min"),
    (rf"no fewer than {_SN} sentences?", "min"),
    (rf"(?:包含)?(?:至少|最少)(?:包含)?{_SN}{_CJK_SENT}", "min"),
    (rf"(?:must )?contain at most {_SN} sentences?", "max"),
    (rf"at most(?:[:])? {_SN} sentences?", "max"),
    (rf"not exceeding {_SN} sentences?", "max"),
    (rf"no (?:more|longer) than {_SN} sentences?", "max"),
    (rf"limited to {_SN} sentences?", "max"),
    (rf"(?:must|should)? not exceed {_SN} sentences?", "max"),
    (rf"a maximum (?:length )?of {_SN} sentences?", "max"),
    (rf"not to exceed {_SN} sentences?", "max"),
    (rf"not surpass(?: a total of)? {_SN} sentences?", "max"),
    (rf"(?:至多|最多)(?:包含)?{_SN}{_CJK_SENT}", "max"),
    (rf"range(?:[:])? {_SN}-{_SN} sentences?", "range"),
    (rf"between {_SN} and {_SN} sentences?", "range"),
    (rf"between {_SN} to {_SN} sentences?", "range"),
    (rf"into {_SN} to {_SN} sentences?", "range"),
    (rf"a range of {_SN} to {_SN} sentences?", "range"),
    (rf"be composed of {_SN} to {_SN} sentences?", "range"),
    (rf"consists? of {_SN} to {_SN} sentences?", "range"),
    (rf"consisting of {_SN} to {_SN} sentences?", "range"),
    (rf"{_SN}到{_SN}{_CJK_SENT}", "range"),
    (rf"organized into at least {_SN} sentences?", "min"),
    (rf"structured into at most {_SN} sentences?", "max"),
]


def length_sentences(rule: str, text: str) -> bool:
    """Length_Sentences: one sentence per ``.``, ``!`` or ``?`` character (the official count, non-blank
    ``[^.!?]*[.!?]`` matches, is exactly that: "Wait..." is three; text after the last one is not counted). A rule
    with no count passes (the official check never rejects an unparsed rule)."""
    low = rule.lower().strip()
    for pattern, kind in _SENTENCE_RULES:
        m = re.search(pattern, low)
        if m:
            lo, hi = _bounds(kind, m.groups(), lambda w: int(w) if w.isdigit() else _SENTENCE_WORDS.get(w.lower(), 0))
            return _within(sum(text.count(c) for c in ".!?"), lo, hi)
    return True


# ----------------------------------------------------------------------------------------------- Length_Words
_WORD_NUMBERS = {"zero": 0, **_SMALL, **_TEENS_TENS}
_CJK_CHAR = r"[\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\u3000-\u303f\uff00-\uffef]"
_EACH_WORD_BOUNDS = [  # (pattern, kind) on the rule with number words already turned into digits
    (r"between (\d+) and (\d+) words", "range"),
    (r"range: (\d+)-(\d+) words", "range"),
    (r"at least (\d+) words", "min"),
    (r"a minimum of (\d+) words", "min"),
    (r"a minimum length of (\d+) words", "min"),
    (r"at most (\d+) words", "max"),
    (r"exactly (\d+) words", "exact"),
    (r"no more than (\d+) words", "max"),
    (r"not exceed (\d+) words", "max"),
    (r"a maximum of (\d+) words", "max"),
    (r"a maximum length of (\d+) words", "max"),
    (r"limit of (\d+) words", "max"),
    (r"not exceeding (\d+) words", "max"),
    (r"less than (\d+) words", "max"),  # "less than N" means <= N here
]
_WORD_RANGES = [
    r"between\s+([a-z0-9-– ]+?)\s+to\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
    r"between\s+([a-z0-9-– ]+?)\s+and\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
    r"range:?\s*([a-z0-9-– ]+?)\s+to\s+([a-z0-9-– ]+?)(?=\s*word|$|\b)",
    r"range:?\s*([a-z0-9-– ]+?)\s*[-–]\s*([a-z0-9-– ]+?)(?=\s*word|$|\b)",
    r"(\b[a-z0-9-–]+\b)\s+to\s+(\b[a-z0-9-–]+\b)(?=\s*word|$|\b)",
    r"(\b[a-z0-9-–]+\b)\s*[-–]\s*(\b[a-z0-9-–]+\b)(?=\s*word|$|\b)",
    r"([0-9]+)\s*到\s*([0-9]+)(?=\s*个|字)",
]


def _table_cells_for(text: str, target: str) -> list[str]:
    """Cells of the columns whose header contains ``target`` (cells equal to their header skipped); when no header
    does, every cell of the table, header cells included. Data cells are regrouped into rows of the header's width."""
    cells: list[str] = []
    for line in text.split("\n"):
        line = line.strip()
        if not line.startswith("|"):
            continue
        if re.match(r"^[\s|*-]+$", line):
            cells.append("\0split")
        else:
            cells += [c.strip() for c in line[1:-1].split("|") if c.strip()]
    if "\0split" in cells:
        at = cells.index("\0split")
        headers, data = cells[:at], [c for c in cells[at + 1 :] if c != "\0split"]
    else:
        headers, data = cells, []
    if not headers:
        return []
    width = len(headers)
    found = [
        value
        for i in range(0, len(data) - width + 1, width)
        for key, value in dict(zip(headers, data[i : i + width])).items()
        if key.lower() != value.lower() and target.lower() in key.lower()
    ]
    return found or cells


def _each_word_elements(text: str, target: str | None) -> list[str]:
    shape = _shape(text)
    if shape == "table":
        return _table_cells_for(text, target if target is not None else "cells")
    if shape == "json":
        try:
            data = json.loads(text)
            if "entry" in target:
                return [str(v) for v in data.values()]
            return [str(data.get(target.split()[-1], ""))]
        except (ValueError, TypeError, AttributeError, IndexError, RecursionError):  # bad JSON, a list, no target
            return []
    if shape == "numbered":
        return [ln.split(":", 1)[-1].split(".", 1)[-1].strip() for ln in text.split("\n") if _NUMBERED.match(ln)]
    if shape == "bullet":
        return _bullet_items(text)
    return [
        ln.strip().lstrip("#").strip()
        for ln in text.split("\n")
        if ln.strip() and not ln.strip().strip("*#'\"").endswith(":") and not re.match(r"^\|.*\|$", ln.strip())
    ]


def _each_length_words(rule: str, text: str) -> bool:
    """ "Each X ..." word limits: every list item / matching table cell / JSON value / non-label line is checked."""
    if re.search(r"each word must be", rule, re.I):
        m = re.search(
            r"(?i)must be (at most|at least) (\b(?:one|two|three|four|five|six|seven|eight|nine|ten|\d+)\b) "
            r"characters",
            rule,
        )
        if m is None:
            return False  # the official code raises here
        if m.group(1) in ("at most", "at least"):  # only lower-case: "At most" falls through to the word limits
            if not m.group(2).isdigit():
                return False  # the official code raises on a limit spelled as a word
            n, words = int(m.group(2)), text.split(" ")
            return all(len(w) <= n for w in words) if m.group(1) == "at most" else all(len(w) >= n for w in words)
    rule = re.sub(
        r"\b(" + "|".join(_WORD_NUMBERS) + r")\b", lambda m: str(_WORD_NUMBERS[m.group().lower()]), rule, flags=re.I
    )
    m = re.search(
        r"(?:each entry in the|Each entry in the|Each|each|The|the)\s+(.+?)\s+(?:is|in the table|column|"
        r"must|consists of|contains?|should|have)",
        rule,
        re.I,
    )
    target = m.group(1).lower().replace('"', "").replace("'", "") if m else None
    for pattern, kind in _EACH_WORD_BOUNDS:
        m = re.search(pattern, rule, re.I)
        if m:
            lo, hi = _bounds(kind, m.groups(), int)
            break
    else:
        return False
    elements = _each_word_elements(text, target)
    return bool(elements) and all(_within(len(e.split()), lo, hi) for e in elements)


def length_words(rule: str, text: str) -> bool:
    """Length_Words: words = whitespace-split tokens, or, when the text has any CJK character / CJK punctuation /
    full-width form, the count of those characters. "exactly N" alone decides; else ranges ("between N and M",
    "N to M", "N-M"), "at least", "at most"-like phrases, sentence bounds ("." "!" "?" runs) and quoted keywords
    that must appear. A rule naming "each" checks every element (``_each_length_words``)."""
    if re.search(r"\beach\b", rule, re.I):
        return _each_length_words(rule, text)
    low = re.sub(r"\s+", " ", rule.lower().strip('"').strip())
    low = low.replace("-word", " word").replace("a total of ", "").replace("words", "word")
    low = low.replace("a single", "exactly one").strip()
    cjk = re.findall(_CJK_CHAR, text)
    words = len(cjk) if cjk else len(text.split())
    sentences = len(re.findall(r"[.!?]+", text))

    def number(s: str) -> int | None:
        return _number(s, _WORD_NUMBERS)

    m = re.search(r"exactly\s+([a-z0-9-, ]+?)\s+(\S+)", low)
    if m and number(m.group(1)) is not None:
        return words == number(m.group(1))
    lo = hi = None
    for pattern in _WORD_RANGES:  # the last range phrase found stands, even half-parsed, unless one parses fully
        m = re.search(pattern, low)
        if m:
            lo, hi = number(m.group(1).strip()), number(m.group(2).strip())
            if lo is not None and hi is not None:
                lo, hi = min(lo, hi), max(lo, hi)
                break
    if lo is None:
        m = re.search(r"(?:at\s+least|minimum\s+of|minimum\s+length\s+of|no\s+less\s+than)\s+(\S+)\s+word", low)
        lo = number(m.group(1)) if m else None
    if hi is None:
        m = re.search(
            r"(?:not\s+exceed|not\s+exceeding|not\s+surpass|at\s+most|no\s+more\s+than|maximum\s+of|"
            r"maximum\s+length\s+of|no\s+longer\s+than|limit\s+of|within|within\s+a)\s+(\S+)\s+word",
            low,
        )
        hi = number(m.group(1)) if m else None
    if hi is None:
        m = re.search(r"(?:最多)([0-9]+)(?:个|字)", low) or re.search(
            r"(?:在)([0-9]+)\s*(?:个单词以内|个字以内|字以内|单词以内|词以内|字)", low
        )
        hi = number(m.group(1)) if m else None
    m = re.search(r"(?:at\s+least|minimum\s+of)\s+(\S+)\s+sentence", low)
    s_lo = number(m.group(1)) if m else None
    m = re.search(
        r"(?:not\s+exceed|at\s+most|no\s+more\s+than|maximum\s+of|maximum\s+length\s+of|no\s+longer\s+than)"
        r"\s+(\S+)\s+sentence",
        low,
    )
    s_hi = number(m.group(1)) if m else None
    for m in re.finditer(r"[\"']([^\']*)[\"']", low):  # quoted keywords (from the lower-cased rule) must appear
        if not _keyword_regex(m.group(1)).search(text):
            return False
    return _within(words, lo, hi) and _within(sentences, s_lo, s_hi)


# ----------------------------------------------------------------------------------------------- dispatch
_SCRIPTS: dict[str, Callable[[str, str], bool]] = {
    "Content_Keywords": content_keywords,
    "Content_Others": content_others,
    "Content_Punctuation": content_punctuation,
    "Format_Json": format_json,
    "Format_Markdown": format_markdown,
    "Format_Others": format_others,
    "Format_Table": format_table,
    "Language_Chinese": language_chinese,
    "Language_English": language_english,
    "Length_Paragraphs": length_paragraphs,
    "Length_Sentences": length_sentences,
    "Length_Words": length_words,
}
# key (f"{category}_{subcategory}" as the data spells it) -> (script, the First_Second it is reported under)
_KEYS: dict[str, tuple[str, str]] = {
    "Content_Keywords": ("Content_Keywords", "Content_Keywords"),
    "Content_Keywords: Must include": ("Content_Keywords", "Content_Keywords"),
    "Length_Words": ("Length_Words", "Length_Words"),
    "Length_Words: At most": ("Length_Words", "Length_Words"),
    "Length_Words: At least": ("Length_Words", "Length_Words"),
    "Length_Words: Range": ("Length_Words", "Length_Words"),
    "Length_Sentences": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: At least": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: At most": ("Length_Sentences", "Length_Sentences"),
    "Length_Sentences: Range": ("Length_Sentences", "Length_Sentences"),
    "Length_Paragraphs": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: At most": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: At least": ("Length_Paragraphs", "Length_Paragraphs"),
    "Length_Paragraphs: Range": ("Length_Paragraphs", "Length_Paragraphs"),
    "Paragraphs_At most": ("Length_Paragraphs", "Length_Paragraphs"),
    "Format_Table": ("Format_Table", "Format_Table"),
    "Table_Row limit": ("Format_Table", "Format_Table"),
    "Table_Column limit": ("Format_Table", "Format_Table"),
    "Format_Table: Row limit": ("Format_Table", "Format_Table"),
    "Format_Table: Column limit": ("Format_Table", "Format_Table"),
    "Punctuation_Ending punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Content_Punctuation: Ending punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Content_Punctuation": ("Content_Punctuation", "Content_Punctuation"),
    "Language_English": ("Language_English", "Language_English"),
    "Language_English: Capitalized": ("Language_English", "Language_English"),
    "Language_English: All Uppercase": ("Language_English", "Language_English"),
    "Format_Markdown": ("Format_Markdown", "Format_Markdown"),
    "Markdown_Heading levels": ("Format_Markdown", "Format_Markdown"),
    "Format_Markdown: Heading levels": ("Format_Markdown", "Format_Markdown"),
    "Markdown_Block quotes": ("Format_Markdown", "Format_Markdown"),
    "Json_Object nesting levels": ("Format_Json", "Format_Json"),
    "Format_Json": ("Format_Json", "Format_Json"),
    "Language_Chinese": ("Language_Chinese", "Language_Chinese"),
    "Language_Chinese: Simplified": ("Language_Chinese", "Language_Chinese"),
    "Language_Chinese: Traditional": ("Language_Chinese", "Language_Chinese"),
    "Content_Identifiers": ("Content_Others", "Content_Identifiers"),
    "Content_Length": ("Content_Others", "Length_Words"),
    "Citations_In-text": ("Content_Others", "Content_Identifiers"),
    "Content_Quotes": ("Content_Others", "Content_Punctuation"),
    "Content_Sources": ("Content_Others", "Content_Identifiers"),
    "Content_Mention": ("Content_Others", "Content_Keywords"),
    "Format_Markdown: Block quotes": ("Format_Others", "Format_Markdown"),
    "Format_Text": ("Format_Others", "Content_Identifiers"),
    "XML_Number of attributes": ("Format_Others", "Format_XML"),
    "References_Format": ("Format_Others", "Content_Identifiers"),
    "Format_Bullet Points": ("Format_Others", "Content_Identifiers"),
    "Format_XML": ("Format_Others", "Format_XML"),
    "Format_Blurb": ("Format_Others", "Length_Words"),
    "Table_Table": ("Format_Others", "Format_Table"),
    "Sentences_At most": ("Length_Sentences", "Length_Sentences"),
    "Sentences_At least": ("Length_Sentences", "Length_Sentences"),
    "Words_At most": ("Length_Words", "Length_Words"),
    "Json_Number of attributes": ("Format_Json", "Format_Json"),
    "Format_Word Count": ("Length_Words", "Length_Words"),
    "Format_Length": ("Format_Others", "Length_Words"),
}


def official_key(category: str, subcategory: str) -> str:
    return f"{category}_{subcategory}"


def script_for(category: str, subcategory: str) -> Callable[[str, str], bool] | None:
    """MulDimIF's checker for this pair (None: MulDimIF has none; its own evaluation would raise)."""
    key = _KEYS.get(official_key(category, subcategory))
    return _SCRIPTS[key[0]] if key else None


def reported_category(category: str, subcategory: str) -> tuple[str, str] | None:
    """The (first, second) level MulDimIF reports this pair under (its ``constraint_mapping``), or None."""
    key = _KEYS.get(official_key(category, subcategory))
    return tuple(key[1].split("_")) if key else None
