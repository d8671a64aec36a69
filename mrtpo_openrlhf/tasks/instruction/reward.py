"""Instruction following: one binary reward per constraint, in the label's order.

Label (a dict or its JSON string), either or both forms; IFEval/IFBench constraints come first::

    {"instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
     "kwargs": [{}, {"num_words": 50, "relation": "less than"}],          # same length, nulls allowed
     "constraints": [["Length", "Words", "The response should contain at most 80 words."]]}

Reward k: name = the instruction id (``muldimif:<category>/<subcategory>`` for a triple), with ``#2``,
``#3``... appended when an id repeats; value = the strict official decision (1.0/0.0); block = the
constraint's text as it appears in the prompt (the prompt sentence that best matches the checker's
description, or the description itself when none matches); reason = "" when satisfied, otherwise
"not satisfied", "unsupported offline: ..." or "checker error: ...". A checker never raises out of
here. Numeric log: ``constraints_satisfied_frac``.

Training rows (JSONL, one per prompt; written by the ``convert`` command below)::

    {"prompt": "<user prompt with the constraints>", "label": {<label as above>}, "source": "ifeval", "key": "..."}

Converter: ``python -m mrtpo_openrlhf.cli.task instruction convert --format {hir16k,ifeval,muldimif}
--input FILE --out rows.jsonl``. Input rows:

- ifeval / ifbench: ``{"key", "prompt", "instruction_id_list", "kwargs"}`` (the official files).
- muldimif: ``{"prompt" | "instruction" | "messages", "constraints": [[category, subcategory, rule], ...]}``
  (``messages``: the last user turn's content is the prompt).
- hir16k (its exact release format is not available offline; assumed): a prompt under ``prompt`` /
  ``instruction`` / ``messages`` plus constraints as ``instruction_id_list``+``kwargs`` and/or
  ``constraints`` triples, optionally nested under ``label``. Rows with neither form are errors.
Malformed rows raise DatasetError naming ``file:line``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from typing import Any, Sequence

from mrtpo_openrlhf.data.jsonl import DatasetError, iter_jsonl, refuse_existing, refuse_same_file, write_jsonl
from mrtpo_openrlhf.rewards.contract import RewardItem, RewardVector, label_object, make_reward_func
from mrtpo_openrlhf.tasks.instruction.verifier import (
    Checker,
    MulDimIFConstraint,
    UnsupportedInstruction,
    build_checker,
    check_strict,
)
from mrtpo_openrlhf.verifiers.response import oversize_reason, response_from_query

logger = logging.getLogger(__name__)

FRAC_LOG = "constraints_satisfied_frac"
_warned_unsupported: set[str] = set()


# --- label ----------------------------------------------------------------------------------------------
def parse_label(label: Any) -> tuple[list[str], list[dict], list[list[str]]]:
    """Validate a label -> (instruction ids, kwargs dicts, MulDimIF triples); ValueError naming the problem."""
    label = label_object(label)
    ids = label.get("instruction_id_list") or []
    kwargs = label.get("kwargs")
    triples = label.get("constraints") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("instruction_id_list must be a list of strings")
    if kwargs is None:
        kwargs = [{} for _ in ids]
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise ValueError(f"kwargs must be a list with one entry per instruction id ({len(ids)})")
    kwargs = [k if k is not None else {} for k in kwargs]
    if not all(isinstance(k, dict) for k in kwargs):
        raise ValueError("every kwargs entry must be an object")
    if not isinstance(triples, list) or not all(
        isinstance(t, (list, tuple)) and len(t) == 3 and all(isinstance(x, str) for x in t) for t in triples
    ):
        raise ValueError("constraints must be a list of [category, subcategory, rule] string triples")
    if not ids and not triples:
        raise ValueError("label has no constraints (neither instruction_id_list nor constraints)")
    return ids, kwargs, [list(t) for t in triples]


def _unique_names(names: Sequence[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def reward_names(label: Any) -> list[str]:
    """The K reward names of a label, in order (used also when scoring fails)."""
    ids, _, triples = parse_label(label)
    return _unique_names(ids + [MulDimIFConstraint(*t).instruction_id for t in triples])


# --- blocks ---------------------------------------------------------------------------------------------
def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def locate_block(prompt: str, description: str, min_overlap: float = 0.6) -> str:
    """The constraint's text as it appears in ``prompt``.

    The description itself when the prompt contains it verbatim; otherwise the span of one or two
    consecutive prompt sentences whose word set best matches it (Dice overlap >= ``min_overlap``),
    since released prompts often reword the template; otherwise the description.
    """
    if not prompt or description in prompt:
        return description
    spans = [m.span() for m in re.finditer(r"[^.!?\n]+[.!?]*", prompt)]
    target = _words(description)
    if not target:
        return description
    best, best_score = description, 0.0
    for i in range(len(spans)):
        for j in (i, i + 1):
            if j >= len(spans):
                break
            piece = prompt[spans[i][0] : spans[j][1]].strip()
            got = _words(piece)
            score = 2 * len(got & target) / (len(got) + len(target)) if got else 0.0
            if score > best_score:
                best, best_score = piece, score
    return best if best_score >= min_overlap else description


# --- scoring --------------------------------------------------------------------------------------------
def extract_response(query: str, prompt: str) -> str:
    """The model's answer inside OpenRLHF's ``query`` (prompt + response): prompt, end-of-turn markers
    and a leading ``<think>...</think>`` block removed."""
    response = response_from_query(query, prompt)
    if "</think>" in response:
        response = response.split("</think>", 1)[1]
    return response.strip()


def _judge(checker: Checker, response: str) -> tuple[float, str]:
    try:
        ok = check_strict(checker, response)
    except UnsupportedInstruction as exc:
        if checker.instruction_id not in _warned_unsupported:  # log once per id
            _warned_unsupported.add(checker.instruction_id)
            logger.warning("%s (scored 0)", exc)
        return 0.0, f"unsupported offline: {exc.why}"
    except Exception as exc:  # noqa: BLE001 - one broken checker must not sink the other rewards
        return 0.0, f"checker error: {type(exc).__name__}: {exc}"
    return (1.0, "") if ok else (0.0, "not satisfied")


def _checkers(label: Any) -> list[tuple[str, Checker | str]]:
    """(reward name, its checker, or the "checker error: ..." reason it could not be built) per constraint."""
    ids, kwargs, triples = parse_label(label)
    names = _unique_names(ids + [MulDimIFConstraint(*t).instruction_id for t in triples])
    specs: list[tuple[str, Any]] = [(i, k) for i, k in zip(ids, kwargs)] + [("muldimif", t) for t in triples]
    out: list[tuple[str, Checker | str]] = []
    for name, (kind, arg) in zip(names, specs):
        try:
            out.append((name, MulDimIFConstraint(*arg) if kind == "muldimif" else build_checker(kind, arg)))
        except (KeyError, ValueError, TypeError) as exc:
            out.append((name, f"checker error: {exc}"))
    return out


def unearnable_rewards(label: Any) -> list[tuple[str, str]]:
    """(reward name, reason) for each constraint no response can satisfy here: its checker cannot be built (unknown
    id, bad kwargs) or cannot run offline (the task registry's ``unearnable``, read by the training pre-flight).
    ValueError when the label does not parse."""
    out = []
    for name, checker in _checkers(label):
        if isinstance(checker, str):
            out.append((name, checker))
            continue
        try:
            checker.check_supported()
        except UnsupportedInstruction as exc:
            out.append((name, f"unsupported offline: {exc.why}"))
    return out


def score_instruction(query: str, prompt: str, label: Any) -> RewardVector:
    """One binary reward per constraint (see the module docstring). Raises only on a malformed label
    (``safe_reward_call`` turns that into K zeros)."""
    checkers = _checkers(label)
    response = extract_response(query, prompt)
    items: list[RewardItem] = []
    too_long = oversize_reason(response, "instruction")
    if too_long:
        items = [RewardItem(name, 0.0, "", too_long) for name, _ in checkers]
        return RewardVector(items, primary=None, logs={FRAC_LOG: 0.0})
    for name, checker in checkers:
        if isinstance(checker, str):
            items.append(RewardItem(name, 0.0, "", checker))
            continue
        value, reason = _judge(checker, response)
        items.append(RewardItem(name, value, locate_block(prompt or "", checker.description()), reason, inline=True))
    frac = sum(it.value for it in items) / len(items)
    return RewardVector(items, primary=None, logs={FRAC_LOG: frac})


reward_func = make_reward_func(score_instruction, reward_names)


def constraint_specs(label: Any, n_rewards: int) -> list[tuple[str, dict] | None]:
    """(instruction id, kwargs) per reward index of a label (None: a MulDimIF triple, or an unreadable label)."""
    try:
        ids, kwargs, _ = parse_label(label)
    except ValueError:
        return [None] * n_rewards
    specs: list[tuple[str, dict] | None] = list(zip(ids, kwargs))
    return (specs + [None] * n_rewards)[:n_rewards]


def example_responses(row: dict) -> list[str]:
    """Two responses to a training row: a multi-sentence answer with a list, and a one-word one."""
    text = (
        "Here is a careful answer. It has several sentences, a short list and a closing line.\n\n"
        "* first point\n* second point\n\nIn summary, that is all. Is there anything else I can help with?"
    )
    return [text, "ok"]


#: One call that loads what the checkers load lazily (the NLTK punkt model, langdetect's profiles: about a second
#: once); the reward server makes it before serving, so no rollout's call pays for it.
WARM_UP_CALL = (
    ["It rains today, so WE STAY IN."],
    [""],
    [
        {
            "instruction_id_list": [
                "length_constraints:number_sentences",
                "language:response_language",
                "change_case:capital_word_frequency",
            ],
            "kwargs": [
                {"num_sentences": 1, "relation": "at least"},
                {"language": "en"},
                {"capital_frequency": 1, "capital_relation": "at least"},
            ],
        }
    ],
)


# --- converter ------------------------------------------------------------------------------------------
def _prompt_of(row: dict) -> str:
    if isinstance(row.get("prompt"), str):
        return row["prompt"]
    if isinstance(row.get("instruction"), str):
        return row["instruction"]
    msgs = row.get("messages")
    if isinstance(msgs, list):
        users = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
    raise ValueError("no prompt (expected a string 'prompt' or 'instruction', or 'messages' with a user turn)")


def convert_row(row: dict, fmt: str) -> dict:
    """One input row -> ``{"prompt", "label", "source", "key"}``; ValueError on a malformed row."""
    prompt = _prompt_of(row)
    if not prompt.strip():
        raise ValueError("empty prompt")
    src = row.get("label") if fmt == "hir16k" and isinstance(row.get("label"), dict) else row
    label: dict[str, Any] = {}
    if fmt in ("ifeval", "hir16k") and "instruction_id_list" in src:
        label["instruction_id_list"] = src["instruction_id_list"]
        label["kwargs"] = (
            [{k: v for k, v in (kw or {}).items() if v is not None} for kw in src.get("kwargs") or []]
            if isinstance(src.get("kwargs"), list)
            else src.get("kwargs")
        )
    if fmt in ("muldimif", "hir16k") and "constraints" in src:
        label["constraints"] = src["constraints"]
    ids, kwargs, triples = parse_label(label)  # validates
    for i, kw in zip(ids, kwargs):
        build_checker(i, kw)  # unknown ids / bad kwargs fail here, at conversion time
    for t in triples:
        MulDimIFConstraint(*t)
    key = row.get("key", row.get("id", ""))
    return {"prompt": prompt, "label": label, "source": fmt, "key": str(key)}


def convert_file(path: str, fmt: str, out: str) -> int:
    """Convert a whole JSONL file; DatasetError names ``path:line`` of the first bad row.

    ``out`` is replaced only when every row converted (an earlier output survives a failed run); ``out`` equal
    to ``path`` is refused.
    """
    if fmt not in ("hir16k", "ifeval", "muldimif"):
        raise ValueError(f"unknown format {fmt!r}")
    refuse_same_file(path, out)
    # validating inside iter_jsonl makes the error name the file and its real line number
    rows = [convert_row(row, fmt) for row in iter_jsonl(path, validate=lambda row: convert_row(row, fmt))]
    return write_jsonl(out, rows)


def main(argv: Sequence[str] | None = None, prog: str = "python -m mrtpo_openrlhf.cli.task instruction") -> int:
    """The task's command line (``Task.command``): ``convert``."""
    ap = argparse.ArgumentParser(prog=prog)
    sub = ap.add_subparsers(dest="cmd", required=True)
    conv = sub.add_parser("convert", help="convert IFEval/IFBench, MulDimIF or HIR-16K rows to training rows")
    conv.add_argument("--format", required=True, choices=("hir16k", "ifeval", "muldimif"))
    conv.add_argument("--input", required=True)
    conv.add_argument("--out", required=True)
    conv.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it exists (without it, an existing file stops the converter)",
    )
    args = ap.parse_args(argv)
    try:
        refuse_same_file(args.input, args.out)
        refuse_existing(args.out, args.overwrite)
        n = convert_file(args.input, args.format, args.out)
    except (DatasetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} rows to {args.out}")
    return 0
