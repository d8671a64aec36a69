"""An adversarial corpus for the reward functions, generated (nothing large is committed).

Each case is one ``reward_func`` call, the way OpenRLHF makes it: ``(task, query, prompt, label)``. Families:

- ``sql_format``: whitespace runs, fences and tags that made the SQL layout regexes quadratic;
- ``sql_exec``: short queries whose string functions (LIKE, GLOB, trim, instr, replace, printf) work on huge
  built values, wide rows, long IN-lists and literals;
- ``sql_compare``: Spider comparisons whose gold columns share values (the column-permutation search);
- ``instruction``: every registered checker and the MulDimIF rule shapes on newline/space/bracket floods;
- ``tool``: unclosed and repeated ``<tool_call>`` tags, deep and huge JSON;
- ``oversize``: 1 MB responses for every task (rejected by the response-size bound).

``build_corpus(size, workdir)`` returns the cases; ``size`` is the payload length in characters for the
families that scale (the benchmark uses the response bound and 1 MB, the CI tests something smaller).
``workdir`` receives the small SQLite databases the ``sql_compare`` cases need.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "mrtpo_openrlhf" / "data"
MB = 1 << 20


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    task: str  # sql | instruction | tool
    query: str
    prompt: str
    label: Any


# ----------------------------------------------------------------------------------------------------- payloads
def floods(size: int) -> dict[str, str]:
    """Texts of ``size`` characters built to hit one regex shape each."""

    def rep(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "newlines": rep("\n"),
        "spaces": rep(" "),
        "space_newline": rep(" \n"),
        "open_brackets": rep("["),
        "angle_open": rep("<<"),
        "stars": rep("*"),
        "dashes": rep("-"),
        "hashes_newline": rep("#\n"),
        "pipes": rep("|"),
        "table_rows": rep("| a | b |\n"),
        "ps_like": rep("p. "),
        "words": rep("word "),
        "sentences": rep("Dr. A. B. Ph.D. x.y. "),
        "bullets": rep("\n* item"),
        "quotes": rep('"'),
        "braces": rep("{"),
    }


# ----------------------------------------------------------------------------------------------------- SQL
SQL_PROMPT = ""
SCHOOL = {"db_id": "school", "gold": "SELECT name FROM students WHERE city = 'Porto'"}


def sql_response(sql: str, think: str = "t") -> str:
    return f"<think>{think}</think>\n```sql\n{sql}\n```"


# Short queries whose single string operation worked far past the time limit (issue 15, item 1), or that build
# huge rows (item 5). Sizes are at the default value-length limit or above it.
SQL_STRING_BOMBS = {
    "like_randomblob": "SELECT hex(randomblob(5000000)) LIKE '%a%b%c%d%e%f%g%0%1%2%z'",
    "like_zeroblob": "SELECT hex(zeroblob(5000000)) LIKE '%0%0%0%0%0%0%0%0%0%1'",
    "glob_zeroblob": "SELECT hex(zeroblob(5000000)) GLOB '*0*0*0*0*0*0*0*0*1'",
    "like_printf": "SELECT printf('%.*c', 9000000, 'a') LIKE '%a%a%a%a%a%a%a%b'",
    "trim_long_set": "SELECT length(trim(hex(zeroblob(4000000)), hex(zeroblob(4000000)) || 'x'))",
    "ltrim_long_set": "SELECT length(ltrim(printf('%.*c', 9000000, 'a'), printf('%.*c', 9000000, 'b') || 'a'))",
    "instr_quadratic": "SELECT instr(hex(zeroblob(4000000)), hex(zeroblob(2000000)) || '1')",
    "replace_quadratic": "SELECT length(replace(hex(zeroblob(4000000)), hex(zeroblob(1000000)) || '1', 'x'))",
    "like_recursive": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50) "
    "SELECT count(*) FROM c WHERE hex(zeroblob(1000000)) LIKE '%0%0%0%0%0%1'",
    "wide_row": "SELECT " + ", ".join(f"zeroblob(10000000) AS c{i}" for i in range(200)),
    "wide_row_strings": "SELECT " + ", ".join(f"printf('%.*c', 9000000, 'x') AS c{i}" for i in range(200)),
    "many_big_rows": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000) "
    "SELECT x, zeroblob(1000000) FROM c",
    "sort_big_rows": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) "
    "SELECT hex(zeroblob(1000000)) || x AS v FROM c ORDER BY v",
    "group_concat_big": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) "
    "SELECT length(group_concat(hex(zeroblob(1000)))) FROM c",
    "printf_width": "SELECT printf('%999999999c', 'x')",
    "char_many": "SELECT length(char(" + ",".join(["65"] * 10000) + "))",
}
_ROWS = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) "
_NEAR_LIMIT = "hex(zeroblob(499000 - x % 2))"  # 998,000 characters, recomputed per row (not a constant)
# The same shapes just inside the sandbox's bounds (1 MB values, 100-byte patterns, the instr/replace/trim work
# guard), repeated over rows: each runs until the 1 s deadline interrupts it between two steps.
SQL_AT_THE_BOUNDS = {
    "runaway_recursion": "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r",
    "runaway_cross_join": "SELECT count(*) FROM students a, students b, students c, students d, students e, "
    "students f, students g, students h",
    "like_99_byte_pattern_rows": _ROWS
    + f"SELECT count(*) FROM c WHERE {_NEAR_LIMIT} LIKE '%' || hex(zeroblob(48)) || '1'",
    "glob_99_byte_pattern_rows": _ROWS
    + f"SELECT count(*) FROM c WHERE {_NEAR_LIMIT} GLOB '*' || hex(zeroblob(48)) || '1'",
    "instr_under_guard_rows": _ROWS + f"SELECT count(*) FROM c WHERE instr({_NEAR_LIMIT}, hex(zeroblob(249)) || '1')",
    "replace_under_guard_rows": _ROWS
    + f"SELECT sum(length(replace({_NEAR_LIMIT}, hex(zeroblob(249)) || '1', 'x'))) FROM c",
    "trim_under_guard_rows": _ROWS + f"SELECT sum(length(trim({_NEAR_LIMIT}, hex(zeroblob(249)) || 'x'))) FROM c",
    "sort_at_memory_bound": _ROWS + f"SELECT {_NEAR_LIMIT} || x AS v FROM c ORDER BY v LIMIT 1",
    "group_by_big_keys": _ROWS + f"SELECT count(*) FROM (SELECT {_NEAR_LIMIT} || x AS v FROM c GROUP BY v)",
    "wide_row_at_column_bound": "SELECT " + ", ".join(f"zeroblob(999999) AS c{i}" for i in range(200)),
    "rows_at_result_bound": _ROWS + "SELECT zeroblob(999999) FROM c",
}


def sql_cases(size: int) -> list[Case]:
    cases = [
        Case("sql_exec", name, "sql", sql_response(q), SQL_PROMPT, SCHOOL)
        for name, q in {**SQL_STRING_BOMBS, **SQL_AT_THE_BOUNDS}.items()
    ]
    n_in = max(1, size // 8)
    cases.append(
        Case(
            "sql_exec",
            "in_list",
            "sql",
            sql_response("SELECT name FROM students WHERE id IN (" + ",".join(["1234567"] * n_in) + ")"),
            SQL_PROMPT,
            SCHOOL,
        )
    )
    cases.append(
        Case("sql_exec", "big_literal", "sql", sql_response("SELECT '" + "a" * (size - 40) + "'"), SQL_PROMPT, SCHOOL)
    )
    cases.append(
        Case("sql_exec", "many_statements", "sql", sql_response("SELECT 1;" * (size // 10)), SQL_PROMPT, SCHOOL)
    )
    cases.append(
        Case("sql_exec", "unclosed_comment", "sql", sql_response("SELECT 1 /*" + " " * (size - 40)), SQL_PROMPT, SCHOOL)
    )
    deep = "SELECT " + "(" * (size // 2) + "1" + ")" * (size // 2)
    cases.append(Case("sql_exec", "deep_parens", "sql", sql_response(deep), SQL_PROMPT, SCHOOL))
    f = floods(size)
    layouts = {
        "ws_in_sql_block": sql_response("SELECT name FROM students" + f["spaces"] + "x"),
        "ws_after_fence": sql_response("SELECT 1") + f["spaces"] + "x",
        "ws_space_newline": sql_response("SELECT 1") + f["space_newline"] + "<|im_end|>x",
        "ws_before_think": f["spaces"] + "<think>" + f["newlines"] + "</think>",
        "fences_only": "```" * (size // 3),
        "fence_sql_open": "```sql\n" * (size // 7),
        "think_tags": "<think>" * (size // 7),
        "special_tokens": "<|im_end|> " * (size // 11) + "x",
        "newline_flood": f["newlines"],
    }
    cases += [Case("sql_format", name, "sql", text, SQL_PROMPT, SCHOOL) for name, text in layouts.items()]
    return cases


def shared_values_db(workdir: Path, rows: int = 1000, cols: int = 8) -> Path:
    """Tables ``g`` and ``p`` whose every column holds the same values (0..rows-1 once each), and whose rows hold
    the same bags of values, but no column permutation maps ``p`` onto ``g``: every cheap check passes and the
    comparison must try all ``cols!`` permutations (the 62 s case of issue 15, item 7)."""
    db_dir = workdir / "shared_values"
    db_dir.mkdir(parents=True, exist_ok=True)
    db = db_dir / "shared_values.sqlite"
    if not db.exists():
        conn = sqlite3.connect(db)
        names = ", ".join(f"c{i} INTEGER" for i in range(cols))
        for table in ("g", "p"):
            conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, {names})")
        gold = [[(r + i) % rows for i in range(cols)] for r in range(rows)]
        # the same row bags; rows 0 and 1 reversed, the others unchanged: no single permutation fits every row
        pred = [list(reversed(row)) if r < 2 else row for r, row in enumerate(gold)]
        marks = ", ".join("?" * (cols + 1))
        conn.executemany(f"INSERT INTO g VALUES ({marks})", [(r, *row) for r, row in enumerate(gold)])
        conn.executemany(f"INSERT INTO p VALUES ({marks})", [(r, *row) for r, row in enumerate(pred)])
        conn.commit()
        conn.close()
    return db


def sql_compare_cases(workdir: Path, rows: int = 1000, cols: int = 8) -> list[Case]:
    db = shared_values_db(workdir, rows, cols)
    cols_sql = ", ".join(f"c{i}" for i in range(cols))
    ordered = {"db_path": str(db), "gold": f"SELECT {cols_sql} FROM g ORDER BY id", "mode": "spider"}
    bag = {"db_path": str(db), "gold": f"SELECT {cols_sql} FROM g", "mode": "spider"}
    return [
        Case(
            "sql_compare",
            "shared_values_ordered",
            "sql",
            sql_response(f"SELECT {cols_sql} FROM p ORDER BY id"),
            "",
            ordered,
        ),
        Case("sql_compare", "shared_values_bag", "sql", sql_response(f"SELECT {cols_sql} FROM p"), "", bag),
        Case("sql_compare", "shared_values_match", "sql", sql_response(f"SELECT {cols_sql} FROM g"), "", bag),
    ]


# ----------------------------------------------------------------------------------------------------- instructions
EXTRA_KWARGS = {
    "change_case:capital_word_frequency": {"capital_frequency": 3, "capital_relation": "at least"},
    "combination:repeat_prompt": {"prompt_to_repeat": "Write a poem."},
    "combination:two_responses": {},
    "custom:character_reverse": {},
    "detectable_content:number_placeholders": {"num_placeholders": 3},
    "detectable_format:constrained_response": {},
    "detectable_format:multiple_sections": {"section_spliter": "Section", "num_sections": 3},
    "keywords:frequency": {"keyword": "word", "frequency": 3, "relation": "at least"},
    "language:response_language": {"language": "en"},
    "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "item"},
    "length_constraints:number_paragraphs": {"num_paragraphs": 3},
}
MULDIMIF_RULES = [
    ["Length", "Words", "The response should contain at most 80 words."],
    ["Length", "Sentences", "The response should contain at least 3 sentences."],
    ["Length", "Paragraphs", "The response should have exactly 2 paragraphs."],
    ["Length", "Lines", "The response should have fewer than 10 lines."],
    ["Format", "Bullets", "Use exactly 3 bullet points."],
    ["Format", "Table", "Present the answer as a markdown table."],
    ["Format", "Heading", "Start with a markdown heading (#)."],
    ["Format", "Json", "The entire output must be in JSON format."],
    ["Format", "Xml", "The entire output must be valid XML."],
    ["Language", "Case", "The response must be in all lowercase letters."],
    ["Language", "Language", "Answer in French."],
    ["Content", "Keywords", 'The response must include the keyword "ocean".'],
    ["Content", "End", 'End your response with "Thank you".'],
]


def instruction_kwargs() -> dict[str, dict]:
    """One valid kwargs set per registered instruction id (from the bundled data, else ``EXTRA_KWARGS``)."""
    from mrtpo_openrlhf.tasks.instruction.verifier import base, build_checker

    found: dict[str, dict] = {}
    sources = [
        resources.files("ifbench") / "data" / "IFBench_test.jsonl",
        DATA / "eval_fixtures/ifeval/input_data.jsonl",
        DATA / "instructions/train_mini.jsonl",
        DATA / "instructions/eval_mini.jsonl",
    ]
    for path in sources:
        try:
            lines = Path(str(path)).read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            row = json.loads(line)
            row = row.get("label", row)
            for iid, kw in zip(row.get("instruction_id_list", []), row.get("kwargs", [])):
                kw = {k: v for k, v in (kw or {}).items() if v is not None}
                if iid in found:
                    continue
                try:
                    build_checker(iid, kw)
                except Exception:  # noqa: BLE001 - a row this checker rejects: try the next one
                    continue
                found[iid] = kw
    for iid, kw in EXTRA_KWARGS.items():
        found.setdefault(iid, kw)
    return {iid: found[iid] for iid in sorted(base.REGISTRY) if iid in found}


def instruction_cases(size: int, per_checker: bool = True) -> list[Case]:
    """One call per (checker, flood) with a one-constraint label, plus one call per flood with every MulDimIF rule."""
    kwargs = instruction_kwargs()
    cases = []
    f = floods(size)
    for flood_name, text in f.items():
        if per_checker:
            for iid, kw in kwargs.items():
                label = {"instruction_id_list": [iid], "kwargs": [kw]}
                cases.append(Case("instruction", f"{iid}/{flood_name}", "instruction", text, "", label))
        cases.append(
            Case("instruction", f"muldimif/{flood_name}", "instruction", text, "", {"constraints": MULDIMIF_RULES})
        )
    # a correct bullet answer padded with newlines (the 34.6 s case of the issue)
    padded = "* one\n* two\n* three" + "\n" * (size - 20)
    cases.append(
        Case(
            "instruction",
            "bullets_padded",
            "instruction",
            padded,
            "",
            {"instruction_id_list": ["detectable_format:number_bullet_lists"], "kwargs": [{"num_bullets": 3}]},
        )
    )
    return cases


# ----------------------------------------------------------------------------------------------------- tool
TOOL_FUNCS = [
    {"name": "add", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
]
TOOL_LABEL = {"functions": TOOL_FUNCS, "ground_truth": [{"add": {"a": [1]}}], "category": "simple_python"}


def tool_cases(size: int) -> list[Case]:
    def call(body: str) -> str:
        return f"<think>t</think><tool_call>{body}</tool_call>"

    texts = {
        "unclosed_calls": "<tool_call>" * (size // 11),
        "unclosed_after_think": "<think>t</think>" + "<tool_call>x" * (size // 12),
        "many_blocks": "<think>t</think>" + "<tool_call>{}</tool_call>" * (size // 25),
        "think_flood": "<think>" * (size // 7),
        "deep_json": call("[" * (size // 2) + "]" * (size // 2)),
        "deep_args": call(
            '{"name": "add", "arguments": {"a": ' + "[" * (size // 2 - 40) + "]" * (size // 2 - 40) + "}}"
        ),
        "huge_int": call('{"name": "add", "arguments": {"a": ' + "9" * (size - 60) + "}}"),
        "huge_string": call('{"name": "add", "arguments": {"a": "' + "x" * (size - 60) + '"}}'),
        "many_calls": call("[" + ",".join(['{"name": "add", "arguments": {"a": 1}}'] * (size // 40)) + "]"),
        "ws_flood": "<think>t</think>" + " " * size + "<tool_call>{}</tool_call>",
    }
    return [Case("tool", name, "tool", text, "", TOOL_LABEL) for name, text in texts.items()]


# ----------------------------------------------------------------------------------------------------- all
def oversize_cases(size: int = MB) -> list[Case]:
    f = floods(size)
    f["stacked_end_markers"] = "x" + "<|im_end|>" * (size // 10)  # stripped before the bound applies
    one = {"instruction_id_list": ["detectable_format:number_bullet_lists"], "kwargs": [{"num_bullets": 3}]}
    return (
        [Case("oversize", f"sql/{k}", "sql", sql_response("SELECT 1") + v, "", SCHOOL) for k, v in f.items()]
        + [Case("oversize", f"instruction/{k}", "instruction", v, "", one) for k, v in f.items()]
        + [Case("oversize", f"tool/{k}", "tool", "<think>t</think>" + v, "", TOOL_LABEL) for k, v in f.items()]
    )


def build_corpus(size: int, workdir: Path, per_checker: bool = True) -> list[Case]:
    return (
        sql_cases(size)
        + sql_compare_cases(workdir)
        + instruction_cases(size, per_checker)
        + tool_cases(size)
        + oversize_cases()
    )
