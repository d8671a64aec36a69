"""A small SQL lexer: enough to find statements, keywords and parenthesis depth safely.

It knows SQLite's quoting rules ('string', "ident", `ident`, [ident]) and comments (-- and /* */), so a
keyword inside a string literal or a comment is never mistaken for SQL. It does not parse SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
    |(?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
    |(?P<string>'(?:[^']|'')*(?:'|\Z))
    |(?P<ident>"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z))
    |(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<word>[^\W\d]\w*|\$\w+|[?:@]\w*)
    |(?P<punct>.)
    """,
    re.DOTALL | re.VERBOSE,
)

#: Token kinds that carry no SQL meaning.
_TRIVIA = frozenset({"ws", "comment"})


@dataclass(frozen=True)
class Token:
    kind: str  # one of ws, comment, string, ident, number, word, punct
    text: str

    @property
    def upper(self) -> str:
        return self.text.upper()


def tokenize(sql: str) -> list[Token]:
    """Split ``sql`` into tokens; ``"".join(t.text for t in tokenize(s)) == s`` always holds."""
    return [Token(m.lastgroup or "punct", m.group()) for m in _TOKEN_RE.finditer(sql)]


def _meaningful(tokens: list[Token]) -> list[Token]:
    return [t for t in tokens if t.kind not in _TRIVIA]


def split_statements(sql: str) -> list[str]:
    """Statements of ``sql`` split at semicolons outside strings/comments; empty statements are dropped.

    A trailing ``;`` (with or without comments after it) therefore yields one statement. Works on the regex
    matches directly (no Token objects): it runs on every model query before SQLite sees it.
    """
    statements: list[str] = []
    start, meaningful = 0, False
    for m in _TOKEN_RE.finditer(sql):
        kind = m.lastgroup
        if kind == "punct" and m.group() == ";":
            if meaningful:
                statements.append(sql[start : m.start()].strip())
            start, meaningful = m.end(), False
        elif kind not in _TRIVIA:
            meaningful = True
    if meaningful:
        statements.append(sql[start:].strip())
    return statements


def first_keyword(sql: str) -> str:
    """Upper-cased first word of the statement (``""`` when it starts with something else or is empty)."""
    for m in _TOKEN_RE.finditer(sql):  # stops at the first meaningful token
        if m.lastgroup not in _TRIVIA:
            return m.group().upper() if m.lastgroup == "word" else ""
    return ""


def has_top_level_order_by(sql: str) -> bool:
    """True iff ``ORDER BY`` occurs outside any parentheses (so not in a subquery or a window clause)."""
    depth = 0
    previous_word = ""
    for tok in _meaningful(tokenize(sql)):
        if tok.kind == "punct":
            depth += tok.text == "("
            depth -= tok.text == ")"
            previous_word = ""
        elif tok.kind == "word":
            if depth == 0 and previous_word == "ORDER" and tok.upper == "BY":
                return True
            previous_word = tok.upper
        else:
            previous_word = ""
    return False


def remove_distinct(sql: str) -> str:
    """Drop every ``DISTINCT`` keyword token (not inside strings or quoted identifiers).

    This mirrors the Spider test-suite evaluation, which removes the keyword everywhere (including
    ``COUNT(DISTINCT x)``) unless asked to keep it.
    """
    return "".join(t.text for t in tokenize(sql) if not (t.kind == "word" and t.upper == "DISTINCT"))
