"""Score responses the way each benchmark's official script does, with the repo's shared verifiers.

Every ``score_<benchmark>(example, response, answer=None, **opts)`` returns one record dict with at least
``verdict`` (bool: the benchmark's headline per-example decision), ``reason`` ("" when it passed) and
``answer`` (what was extracted from the response). ``summarize(benchmark, records)`` turns records into the
official aggregate numbers: fractions in [0, 1] (as lm-evaluation-harness and BFCL write them), with a standard
error ``<key>_stderr`` where the number is a mean over independent examples (docs/eval.md, "Result files").

Official rules reproduced here (the comparisons themselves live in ``mrtpo_openrlhf.verifiers``):

- Spider (test-suite ``exec_eval.eval_exec_match``): ``> =``/``< =``/``! =`` are closed up in both queries,
  DISTINCT is removed from both (unless ``keep_distinct``), row order matters iff ``"order by"`` occurs anywhere
  in the gold string (lower-cased; the official test, not the reward's top-level one), denotations are compared as
  bags with column permutations on EVERY ``*.sqlite`` file in the database's folder (test-suite databases).
- BIRD (``evaluation.py``): ``set(pred_rows) == set(gold_rows)``; the pred and gold queries share one time budget
  (30 s by default), past it the example is wrong.
- IFEval / IFBench (``evaluation_lib``): strict = ``response.strip() and check_following(response)``; loose tries the
  8 variants; prompt-level = all instructions followed, instruction-level = mean over instructions.
- MulDimIF: a prompt passes iff all its constraints pass; each constraint is decided as MulDimIF's own scripts decide
  it (``verifiers/instructions/muldimif_rules``), except that a blank response fails (strict rule of the checkers).
- BFCL: AST checker per category; aggregates as BFCL's leaderboard (see ``summarize_bfcl``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from math import comb
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mrtpo_openrlhf.rewards import instruction as instruction_reward
from mrtpo_openrlhf.rewards import tool as tool_reward
from mrtpo_openrlhf.verifiers.instructions import (
    MulDimIFConstraint,
    UnsupportedInstruction,
    build_checker,
    check_loose,
    check_strict,
    muldimif_rules,
)
from mrtpo_openrlhf.verifiers.response import END_OF_TURN_MARKERS as _END_MARKERS
from mrtpo_openrlhf.verifiers.sql import (
    GoldResultCache,
    bird_set_match,
    execute_sql,
    extract_sql,
    remove_distinct,
    spider_result_eq,
    split_statements,
)
from mrtpo_openrlhf.verifiers.tool import ParsedCalls, check_bfcl, parse_tool_calls

from .data import EvalExample

SPIDER_TIMEOUT_S = 60.0  # exec_eval.py TIMEOUT (there it never fires; here the sandbox really stops the query)
BIRD_TIMEOUT_S = 30.0  # BIRD evaluation.py meta_time_out
EVAL_MAX_ROWS = 1_000_000  # the official scripts fetch everything; past this cap the example counts as wrong
GOLD_CACHE = GoldResultCache(maxsize=8192)
NO_PREDICTION = "no prediction"  # the reason of an example a predictions file does not cover


# ----------------------------------------------------------------------------------------------- SQL
def spider_postprocess(sql: str) -> str:
    """exec_eval.postprocess: close up the comparison operators a tokenizer may have split."""
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)


def spider_replace_cur_year(sql: str) -> str:
    """exec_eval.replace_cur_year, applied to both queries right before execution: MySQL's ``YEAR(CURDATE())``
    becomes ``2020`` (the regex also eats the whitespace after it, as the official one does)."""
    return _CUR_YEAR.sub("2020", sql)


def spider_remove_distinct(sql: str) -> str:
    """parse.remove_distinct: DISTINCT tokens dropped from the FIRST statement only (``sqlparse.parse(s)[0]``), so a
    multi-statement prediction is cut to its first statement, exactly as the official scorer does."""
    statements = split_statements(sql)
    return remove_distinct(statements[0] if len(statements) > 1 else sql)


def spider_order_matters(gold_sql: str) -> bool:
    """The official test: "order by" anywhere in the (post-processed) gold string."""
    return "order by" in gold_sql.lower()


def spider_databases(db_dir: str | Path) -> list[Path]:
    """Every database the test suite compares on: each ``*.sqlite`` file in the folder, sorted."""
    return sorted(p for p in Path(db_dir).iterdir() if p.is_file() and p.name.endswith(".sqlite"))


def _sql_answer(response: str, answer: str | None) -> str | None:
    return answer if answer is not None else extract_sql(response or "")


def score_spider(
    example: EvalExample,
    response: str,
    answer: str | None = None,
    *,
    timeout_s: float = SPIDER_TIMEOUT_S,
    max_rows: int = EVAL_MAX_ROWS,
    keep_distinct: bool = False,
) -> dict[str, Any]:
    """Spider test-suite execution match for one example (see the module docstring)."""
    sql = _sql_answer(response, answer)
    record: dict[str, Any] = {"answer": sql, "gold": example.target["gold"], "gold_error": ""}
    if not sql:
        return {**record, "verdict": False, "reason": "no SQL found in the response"}
    pred_sql, gold_sql = spider_postprocess(sql), spider_postprocess(example.target["gold"])
    if not keep_distinct:
        pred_sql, gold_sql = spider_remove_distinct(pred_sql), spider_remove_distinct(gold_sql)
    order_matters = spider_order_matters(gold_sql)
    pred_sql, gold_sql = spider_replace_cur_year(pred_sql), spider_replace_cur_year(gold_sql)
    record["order_matters"] = order_matters
    databases = spider_databases(example.target["db_dir"])
    record["n_databases"] = len(databases)
    for db in databases:
        gold, _ = GOLD_CACHE.execute(db, gold_sql, timeout_s=timeout_s, max_rows=max_rows)
        if not gold.ok:
            return {
                **record,
                "verdict": False,
                "gold_error": gold.error,
                "reason": f"gold query failed on {db.name}: {gold.error}",
            }
        pred = execute_sql(db, pred_sql, timeout_s=timeout_s, max_rows=max_rows)
        if not pred.ok:
            return {**record, "verdict": False, "reason": f"query failed on {db.name}: {pred.error}"}
        if pred.truncated or gold.truncated:
            return {**record, "verdict": False, "reason": f"more than {max_rows} rows on {db.name}"}
        if not spider_result_eq(pred.rows, gold.rows, order_matters=order_matters):
            ordered = ", ordered" if order_matters else ""
            return {**record, "verdict": False, "reason": f"denotation differs on {db.name} (bag{ordered})"}
    return {**record, "verdict": True, "reason": ""}


def score_bird(
    example: EvalExample,
    response: str,
    answer: str | None = None,
    *,
    timeout_s: float = BIRD_TIMEOUT_S,
    max_rows: int = EVAL_MAX_ROWS,
) -> dict[str, Any]:
    """BIRD EX for one example: set equality, pred + gold within one time budget."""
    sql = _sql_answer(response, answer)
    record: dict[str, Any] = {"answer": sql, "gold": example.target["gold"], "gold_error": ""}
    if not sql:
        return {**record, "verdict": False, "reason": "no SQL found in the response"}
    db = example.target["db_path"]
    pred = execute_sql(db, sql, timeout_s=timeout_s, max_rows=max_rows)
    if not pred.ok:
        return {**record, "verdict": False, "reason": f"query failed: {pred.error}"}
    gold, _ = GOLD_CACHE.execute(db, example.target["gold"], timeout_s=timeout_s, max_rows=max_rows)
    if not gold.ok:
        return {**record, "verdict": False, "gold_error": gold.error, "reason": f"gold query failed: {gold.error}"}
    if pred.elapsed_s + gold.elapsed_s > timeout_s:
        return {**record, "verdict": False, "reason": f"pred + gold took more than {timeout_s:g} s"}
    if pred.truncated or gold.truncated:
        return {**record, "verdict": False, "reason": f"more than {max_rows} rows"}
    if not bird_set_match(pred.rows, gold.rows):
        return {**record, "verdict": False, "reason": "result set differs from the gold"}
    return {**record, "verdict": True, "reason": ""}


# ----------------------------------------------------------------------------------------------- instructions
def instruction_text(response: str) -> str:
    """The text the instruction checkers read: the raw response, unless it carries a ``<think>`` block or an
    end-of-turn marker; then the training reward's extraction (block and markers removed) is used."""
    response = response or ""
    if "</think>" in response or response.rstrip().endswith(_END_MARKERS):
        return instruction_reward.extract_response(response, "")
    return response


def _judge(checker, text: str) -> tuple[bool, bool, str]:
    """(strict, loose, reason); an unsupported checker counts as not followed, with the reason."""
    try:
        return check_strict(checker, text), check_loose(checker, text), ""
    except UnsupportedInstruction as exc:
        return False, False, f"unsupported offline: {exc.why}"


def score_instructions(example: EvalExample, response: str, answer: str | None = None) -> dict[str, Any]:
    """IFEval/IFBench: strict and loose per instruction, prompt-level = all followed."""
    text = instruction_text(response)
    strict, loose, reasons = [], [], []
    for iid, kwargs in zip(example.target["instruction_id_list"], example.target["kwargs"]):
        s, lo, why = _judge(build_checker(iid, kwargs), text)
        strict.append(s)
        loose.append(lo)
        reasons.append(why or ("" if s else "not followed (strict)"))
    failed = [f"{iid}: {why}" for iid, why in zip(example.target["instruction_id_list"], reasons) if why]
    return {
        "answer": text,
        "instruction_id_list": example.target["instruction_id_list"],
        "follow_instruction_list_strict": strict,
        "follow_instruction_list_loose": loose,
        "follow_all_strict": all(strict),
        "follow_all_loose": all(loose),
        "unsupported": [why for why in reasons if why.startswith("unsupported")],
        "supported": [not why.startswith("unsupported") for why in reasons],
        "verdict": all(strict),
        "reason": "; ".join(failed),
    }


def score_muldimif(example: EvalExample, response: str, answer: str | None = None) -> dict[str, Any]:
    """MulDimIF: one strict decision per ``[category, subcategory, rule]``; the prompt passes iff all pass."""
    text = instruction_text(response)
    results, reasons = [], []
    for triple in example.target["constraints"]:
        ok, _, why = _judge(MulDimIFConstraint(*triple), text)
        results.append(ok)
        reasons.append(why or ("" if ok else f"not satisfied: {triple[2]}"))
    return {
        "answer": text,
        "constraints": example.target["constraints"],
        "constraint_results": results,
        "unsupported": [why for why in reasons if why.startswith("unsupported")],
        "supported": [not why.startswith("unsupported") for why in reasons],
        "verdict": all(results),
        "reason": "; ".join(r for r in reasons if r),
    }


# ----------------------------------------------------------------------------------------------- BFCL
def score_bfcl(example: EvalExample, response: str, answer: ParsedCalls | None = None) -> dict[str, Any]:
    """BFCL AST decision for one item: ``answer`` = calls a predictions file already gave (BFCL's python-call list,
    OpenAI tool_calls), else the training layout's ``<tool_call>`` block, parsed strictly."""
    parsed = answer if answer is not None else parse_tool_calls(tool_reward.extract_response(response or "", ""))
    target = example.target
    ok, why = check_bfcl(target["category"], target["functions"], parsed.calls, target["ground_truth"])
    if not ok and not parsed.ok and "irrelevance" not in target["category"]:
        why = parsed.reason
    calls = None if parsed.calls is None else [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]
    return {"answer": calls, "category": target["category"], "verdict": ok, "reason": why}


SCORERS = {
    "spider": score_spider,
    "bird": score_bird,
    "ifeval": score_instructions,
    "ifbench": score_instructions,
    "muldimif": score_muldimif,
    "bfcl": score_bfcl,
}


# ----------------------------------------------------------------------------------------------- summaries
# Every score is a fraction in [0, 1]. A mean over independent examples (prompt-level accuracy, a per-category
# accuracy) carries ``<key>_stderr``; a mean over instructions or constraints does not (several per prompt are
# not independent draws). With samples an example's score is its mean over them, and the error is over examples.
def _w(record: dict) -> float:
    """A record's weight: 1, or 1/n_samples when its example has several samples (each example weighs 1)."""
    return record.get("weight", 1.0)


def _n_examples(records: Iterable[dict]) -> int:
    return round(sum(_w(r) for r in records))


def mean_stderr(values: Sequence[float]) -> float | None:
    """Standard error of a mean over independent examples: the sample standard deviation (n - 1 in the
    denominator) over sqrt(n), as lm-evaluation-harness's ``mean_stderr``; for 0/1 scores that is
    sqrt(p (1 - p) / (n - 1)). None for fewer than 2 examples."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def _decisions(records: Iterable[dict], value: Callable[[dict], Any] = lambda r: r["verdict"]) -> list:
    """(example id, weight, 0/1 decision) of each record; a record without an id is an example of its own."""
    return [(r.get("id", f"#{i}"), _w(r), float(bool(value(r)))) for i, r in enumerate(records)]


def _per_example(decisions: Iterable[tuple[Any, float, float]]) -> list[float]:
    """Each example's score: the weighted mean of its samples' decisions."""
    sums: dict[Any, list[float]] = {}
    for key, w, x in decisions:
        acc = sums.setdefault(key, [0.0, 0.0])
        acc[0] += w * x
        acc[1] += w
    return [s / w for s, w in sums.values() if w]


def _count(x: float) -> int | float:
    """A number of correct examples: an int, or a float (the expected count) when samples make it fractional."""
    return int(round(x)) if abs(x - round(x)) < 1e-9 else round(x, 6)


def rate(decisions: Iterable[tuple[Any, float, float]]) -> dict[str, Any]:
    """``{"accuracy", "stderr", "correct", "count"}`` of one 0/1 decision per example (over examples)."""
    scores = _per_example(decisions)
    return {
        "accuracy": sum(scores) / len(scores) if scores else None,
        "stderr": mean_stderr(scores),
        "correct": _count(sum(scores)),
        "count": len(scores),
    }


def _flat(name: str, stats: dict[str, Any]) -> dict[str, Any]:
    return {name: stats["accuracy"], f"{name}_stderr": stats["stderr"]}


def _wmean(pairs: Iterable[tuple[float, float]]) -> float | None:
    """Weighted mean of (weight, value) pairs: decisions that are not one per example (instructions, constraints)."""
    pairs = list(pairs)
    total = sum(w for w, _ in pairs)
    return sum(w * v for w, v in pairs) / total if total else None


def _accuracy_by(records: Iterable[dict], key: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        if r.get(key) is not None:
            groups[str(r[key])].append(r)
    return {k: rate(_decisions(v)) for k, v in sorted(groups.items())}


def pass_at_k(records: list[dict]) -> dict[str, Any]:
    """``{"samples": {...}}`` when some example has several samples, else {}: mean accuracy over samples and the
    unbiased pass@k (Chen et al. 2021: 1 - C(n-c, k) / C(n, k) per example, averaged, with its standard error over
    examples) for k = 1, 2, 4, ... up to the smallest sample count of a predicted example (and that count). An
    example without a prediction counts 0."""
    if not any("sample" in r for r in records):
        return {}
    per_example: dict[str, list[bool]] = defaultdict(list)
    predicted: set[str] = set()
    for r in records:
        per_example[r["id"]].append(bool(r["verdict"]))
        if r.get("reason") != NO_PREDICTION:
            predicted.add(r["id"])
    counts = [len(per_example[k]) for k in predicted]
    n_min = min(counts)
    ks = sorted({k for k in (2**i for i in range(n_min.bit_length())) if k <= n_min} | {n_min})

    def one(verdicts: list[bool], k: int) -> float:
        n, c = len(verdicts), sum(verdicts)
        if c == 0:
            return 0.0
        return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)

    values = list(per_example.values())
    per_k = {f"pass@{k}": [one(v, k) for v in values] for k in ks}
    means = [sum(v) / len(v) for v in values]
    return {
        "samples": {
            "n_min": n_min,
            "n_max": max(counts),
            "mean_accuracy": sum(means) / len(means),
            "mean_accuracy_stderr": mean_stderr(means),
            "pass_at_k": {k: sum(v) / len(v) for k, v in per_k.items()},
            "pass_at_k_stderr": {k: mean_stderr(v) for k, v in per_k.items()},
        }
    }


def summarize_sql(records: list[dict]) -> dict[str, Any]:
    """EX overall (with ``correct``, the number of examples right) and by ``difficulty`` when the data has it
    (BIRD: simple/moderate/challenging)."""
    stats = rate(_decisions(records))
    return {
        "n": _n_examples(records),
        **_flat("ex", stats),
        "correct": stats["correct"],
        "by_difficulty": _accuracy_by(records, "difficulty"),
        "gold_errors": sum(1 for r in records if r.get("gold_error")),
    }  # per sample


def _supported(record: dict) -> list[bool]:
    """Which decisions of a record could be made here (a record without a prediction has none unsupported)."""
    n = len(record.get("follow_instruction_list_strict", record.get("constraint_results", [])))
    return record.get("supported") or [True] * n


def _n_unsupported(records: list[dict]) -> int:
    """Unsupported decisions among the scored records (each example once, whatever its number of samples)."""
    return round(sum(_w(r) * _supported(r).count(False) for r in records))


def _if_numbers(records: list[dict], keep) -> dict[str, Any]:
    """IFEval's four numbers over the instructions ``keep(record, index)`` selects; prompts with none are left out."""
    prompt_strict, prompt_loose, inst_strict, inst_loose = [], [], [], []
    for i, r in enumerate(records):
        idx = [j for j in range(len(r["follow_instruction_list_strict"])) if keep(r, j)]
        if not idx:
            continue
        strict = [r["follow_instruction_list_strict"][j] for j in idx]
        loose = [r["follow_instruction_list_loose"][j] for j in idx]
        key = r.get("id", f"#{i}")
        prompt_strict.append((key, _w(r), float(all(strict))))
        prompt_loose.append((key, _w(r), float(all(loose))))
        inst_strict += [(_w(r), x) for x in strict]
        inst_loose += [(_w(r), x) for x in loose]
    strict_stats = rate(prompt_strict)
    return {
        "n": strict_stats["count"],
        **_flat("prompt_strict", strict_stats),
        "inst_strict": _wmean(inst_strict),
        **_flat("prompt_loose", rate(prompt_loose)),
        "inst_loose": _wmean(inst_loose),
    }


def summarize_instructions(records: list[dict]) -> dict[str, Any]:
    """IFEval's four numbers (prompt-level with a standard error) plus per-instruction (tier1) and per-group
    (tier0) strict and loose accuracy.

    Unsupported-offline instructions count as not followed in the main numbers (``n_unsupported`` of them, among
    scored responses); ``without_unsupported`` gives the same numbers with those instructions left out.
    """
    strict = [(_w(r), x) for r in records for x in r["follow_instruction_list_strict"]]
    loose = [(_w(r), x) for r in records for x in r["follow_instruction_list_loose"]]
    per_id: dict[str, list[tuple[float, bool, bool]]] = defaultdict(list)
    per_group: dict[str, list[tuple[float, bool, bool]]] = defaultdict(list)
    for r in records:
        for iid, s, lo in zip(
            r["instruction_id_list"], r["follow_instruction_list_strict"], r["follow_instruction_list_loose"]
        ):
            per_id[iid].append((_w(r), s, lo))
            per_group[iid.split(":")[0]].append((_w(r), s, lo))

    def table(groups: dict[str, list[tuple[float, bool, bool]]]) -> dict[str, dict[str, Any]]:
        return {
            k: {
                "strict": _wmean((w, s) for w, s, _ in v),
                "loose": _wmean((w, lo) for w, _, lo in v),
                "count": round(sum(w for w, _, _ in v)),
            }
            for k, v in sorted(groups.items())
        }

    return {
        "n": _n_examples(records),
        "n_instructions": round(sum(w for w, _ in strict)),
        **_flat("prompt_strict", rate(_decisions(records, lambda r: r["follow_all_strict"]))),
        "inst_strict": _wmean(strict),
        **_flat("prompt_loose", rate(_decisions(records, lambda r: r["follow_all_loose"]))),
        "inst_loose": _wmean(loose),
        "n_unsupported": _n_unsupported(records),
        "without_unsupported": _if_numbers(records, lambda r, i: _supported(r)[i]),
        "by_instruction": table(per_id),
        "by_group": table(per_group),
    }


def _muldimif_levels(triple) -> tuple[str, str]:
    """(first, second) level a constraint is reported under: MulDimIF's own mapping for the pairs it knows (e.g.
    ``Table_Row limit`` -> Format/Table, ``Content_Length`` -> Length/Words), else the triple's own names."""
    return muldimif_rules.reported_category(triple[0].strip(), triple[1].strip()) or (
        triple[0].strip(),
        triple[1].strip(),
    )


def summarize_muldimif(records: list[dict]) -> dict[str, Any]:
    """MulDimIF's numbers: all-constraints (prompt) accuracy (its "Overall"); constraint-level accuracy;
    ``by_category`` as its ``constraint_category_list``: an item counts once per first-level category it has, and
    passes there iff all of its constraints of that category pass; ``by_subcategory`` as its
    ``constraint_category_second_list``: constraint-level per ``First_Second`` (no standard error: several
    constraints of one item). Unsupported rules as in ``summarize_instructions`` (counted as failed, and
    ``without_unsupported``)."""
    per_category: dict[str, list[tuple[Any, float, float]]] = defaultdict(list)
    per_second: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    flat = []
    for i, r in enumerate(records):
        verdicts: dict[str, list[bool]] = defaultdict(list)
        for triple, ok in zip(r["constraints"], r["constraint_results"]):
            first, second = _muldimif_levels(triple)
            verdicts[first].append(ok)
            per_second[f"{first}_{second}"].append((_w(r), ok))
            flat.append((_w(r), ok))
        for first, oks in verdicts.items():
            per_category[first].append((r.get("id", f"#{i}"), _w(r), float(all(oks))))

    return {
        "n": _n_examples(records),
        "n_constraints": round(sum(w for w, _ in flat)),
        **_flat("all_constraints", rate(_decisions(records))),
        "constraint_level": _wmean(flat),
        "by_category": {k: rate(v) for k, v in sorted(per_category.items())},
        "by_subcategory": {
            k: {"accuracy": _wmean(v), "count": round(sum(w for w, _ in v))} for k, v in sorted(per_second.items())
        },
        "n_unsupported": _n_unsupported(records),
        "without_unsupported": _muldimif_without_unsupported(records),
    }


def _muldimif_without_unsupported(records: list[dict]) -> dict[str, Any]:
    prompts, flat = [], []
    for i, r in enumerate(records):
        kept = [ok for ok, sup in zip(r["constraint_results"], _supported(r)) if sup]
        if kept:
            prompts.append((r.get("id", f"#{i}"), _w(r), float(all(kept))))
            flat += [(_w(r), ok) for ok in kept]
    stats = rate(prompts)
    return {"n": stats["count"], **_flat("all_constraints", stats), "constraint_level": _wmean(flat)}


BFCL_NON_LIVE_SIMPLE = ("simple_python", "simple_java", "simple_javascript")
BFCL_NON_LIVE_GROUPS = ("multiple", "parallel", "parallel_multiple")
BFCL_LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


def combine(parts: Sequence[tuple[float, dict[str, Any]]]) -> tuple[float, float | None]:
    """``sum_c w_c acc_c`` over categories and its standard error ``sqrt(sum_c w_c^2 se_c^2)`` (the categories are
    independent strata); the error is None when one member has none (a category of one example)."""
    value = sum(w * stats["accuracy"] for w, stats in parts)
    errors = [stats["stderr"] for _, stats in parts]
    if any(e is None for e in errors):
        return value, None
    return value, math.sqrt(sum((w * e) ** 2 for (w, _), e in zip(parts, errors)))


def summarize_bfcl(records: list[dict]) -> dict[str, Any]:
    """Per-category AST accuracy (with BFCL's ``correct_count``/``total_count`` as ``correct``/``count``) and
    BFCL's leaderboard aggregates, each with its standard error (``combine``).

    - ``non_live_ast`` = unweighted mean of [mean(simple_python, simple_java, simple_javascript), multiple,
      parallel, parallel_multiple] (BFCL ``calculate_unweighted_accuracy``);
    - ``live_ast`` = count-weighted mean of live_simple, live_multiple, live_parallel, live_parallel_multiple
      (``calculate_weighted_accuracy``);
    - irrelevance / live_irrelevance / live_relevance are reported on their own, as BFCL does.
    An aggregate is None ("N/A") unless every member category was evaluated (BFCL would count a missing one as 0).
    ``ast_mean`` = unweighted mean over the evaluated call-checking categories (for partial runs).
    """
    per_category = _accuracy_by(records, "category")

    def complete(names: Iterable[str]) -> bool:
        return all(name in per_category for name in names)

    out: dict[str, Any] = {"n": _n_examples(records), "by_category": per_category}
    non_live = live = mean = (None, None)
    if complete(BFCL_NON_LIVE_SIMPLE + BFCL_NON_LIVE_GROUPS):
        n_parts = 1 + len(BFCL_NON_LIVE_GROUPS)
        non_live = combine(
            [(1 / (n_parts * len(BFCL_NON_LIVE_SIMPLE)), per_category[c]) for c in BFCL_NON_LIVE_SIMPLE]
            + [(1 / n_parts, per_category[c]) for c in BFCL_NON_LIVE_GROUPS]
        )
    if complete(BFCL_LIVE):
        count = sum(per_category[c]["count"] for c in BFCL_LIVE)
        live = combine([(per_category[c]["count"] / count, per_category[c]) for c in BFCL_LIVE])
    call_categories = [c for c in per_category if "relevance" not in c]
    if call_categories:
        mean = combine([(1 / len(call_categories), per_category[c]) for c in call_categories])
    for key, (value, stderr) in (("non_live_ast", non_live), ("live_ast", live)):
        out[key], out[f"{key}_stderr"] = value, stderr
    for key in ("irrelevance", "live_irrelevance", "live_relevance"):
        stats = per_category.get(key, {"accuracy": None, "stderr": None})
        out.update(_flat(key, stats))
    out["ast_mean"], out["ast_mean_stderr"] = mean
    return out


SUMMARIZERS = {
    "spider": summarize_sql,
    "bird": summarize_sql,
    "ifeval": summarize_instructions,
    "ifbench": summarize_instructions,
    "muldimif": summarize_muldimif,
    "bfcl": summarize_bfcl,
}


def headline_columns(benchmark: str, summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The (column name, summary key) pairs a benchmark contributes to the combined table (and its average)."""
    if benchmark in ("spider", "bird"):
        return [(f"{benchmark.capitalize() if benchmark == 'spider' else 'BIRD'} EX", "ex")]
    if benchmark in ("ifeval", "ifbench"):
        name = "IFEval" if benchmark == "ifeval" else "IFBench"
        return [(f"{name} prompt", "prompt_strict"), (f"{name} inst", "inst_strict")]
    if benchmark == "muldimif":
        return [("MulDimIF", "all_constraints")]
    cols = [
        (name, key)
        for name, key in (("BFCL non-live", "non_live_ast"), ("BFCL live", "live_ast"))
        if summary[key] is not None
    ]
    return cols or [("BFCL AST", "ast_mean")]


def summarize(benchmark: str, records: list[dict]) -> dict[str, Any]:
    """Official aggregate numbers of one benchmark (fractions) plus its ``headline`` columns, their
    ``headline_stderr`` (None where the column is not a mean over examples) and, where some decisions were
    unsupported offline, ``headline_without_unsupported``."""
    summary = SUMMARIZERS[benchmark](records)
    columns = headline_columns(benchmark, summary)
    summary["headline"] = {name: summary[key] for name, key in columns}
    summary["headline_stderr"] = {name: summary.get(f"{key}_stderr") for name, key in columns}
    if summary.get("n_unsupported"):
        without = {**summary, **summary["without_unsupported"]}
        summary["headline_without_unsupported"] = {name: without[key] for name, key in columns}
    return summary


def score_one(example: EvalExample, response: str, answer: Any = None, **options: Any) -> dict[str, Any]:
    """Score one response; the record carries id, prompt, response, meta fields and the scorer's fields."""
    scorer = SCORERS[example.benchmark]
    opts = options if example.benchmark in ("spider", "bird") else {}
    result = scorer(example, response, answer, **opts)
    return {
        "id": example.id,
        "benchmark": example.benchmark,
        **example.meta,
        "prompt": example.prompt,
        "response": response,
        **result,
    }
