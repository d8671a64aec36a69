"""Result-set comparisons as the official text-to-SQL scorers define them.

- ``bird_set_match``: BIRD EX, ``set(pred) == set(gold)``: ignores row order and duplicates, no column permutation.
- ``spider_result_eq``: Spider test-suite execution match: rows compared as bags (duplicates count), in order only
  when ``order_matters``, allowing any permutation of the columns.

Values compare with Python equality and hashing, like the official code: no float tolerance, ``1 == 1.0``,
``None`` equals ``None`` (a SQL NULL matches a NULL), and ``'1' != 1``.

The search over column permutations differs from the official code in one way only: where the official code
prunes candidates with 20 randomly sampled rows (for more than 3 columns), this one prunes with every row, which
keeps exactly the permutations that can succeed and makes the result deterministic.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Callable, Iterator, Sequence

Row = tuple
MAX_PERMUTATIONS_TRIED = 100_000  # a guard for pathological wide results; past it the match fails


class ComparisonTimeout(RuntimeError):
    """The comparison did not finish before its deadline: the answer is unknown, not "different"."""


def _clock() -> float:
    """This thread's CPU time: the bound is on the comparison's work, so a loaded machine (rewards computed beside
    the trainer and vLLM) does not turn a match into a loss by descheduling the thread."""
    return time.thread_time()


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and _clock() > deadline:
        raise ComparisonTimeout("result comparison exceeded its time limit")


def bird_set_match(pred_rows: Sequence[Row], gold_rows: Sequence[Row]) -> bool:
    """BIRD execution accuracy for one example."""
    return set(map(tuple, pred_rows)) == set(map(tuple, gold_rows))


def _unordered_row(row: Row) -> frozenset:
    """A row as the bag of its values, so rows equal under some column permutation map to the same key."""
    return frozenset(Counter(row).items())


def _column_permutations(
    gold: Sequence[Row], pred: Sequence[Row], order_matters: bool = False
) -> Iterator[tuple[int, ...]]:
    """Yield ``perm`` with ``perm[i]`` = the pred column placed at gold position i.

    A pred column j is a candidate for gold column i only if every value of j occurs in gold column i (necessary
    for equality); when row order matters, only if column j equals gold column i value by value (then every
    permutation yielded is a match). Identical pred columns are interchangeable, so only one order of each group
    is tried.
    """
    n = len(gold[0])
    pred_columns = [tuple(row[j] for row in pred) for j in range(n)]
    if order_matters:
        gold_columns = [tuple(row[i] for row in gold) for i in range(n)]
        candidates = [[j for j in range(n) if pred_columns[j] == gold_columns[i]] for i in range(n)]
    else:
        gold_values = [{row[i] for row in gold} for i in range(n)]
        candidates = [[j for j in range(n) if set(pred_columns[j]) <= gold_values[i]] for i in range(n)]
    first_twin = {}  # pred column -> previous identical pred column (must be used earlier)
    seen: dict[tuple, int] = {}
    for j, col in enumerate(pred_columns):
        if col in seen:
            first_twin[j] = seen[col]
        seen[col] = j

    perm: list[int] = []
    used: set[int] = set()

    def extend(i: int) -> Iterator[tuple[int, ...]]:
        if i == n:
            yield tuple(perm)
            return
        for j in candidates[i]:
            if j in used or (j in first_twin and first_twin[j] not in used):
                continue
            used.add(j)
            perm.append(j)
            yield from extend(i + 1)
            perm.pop()
            used.discard(j)

    return extend(0)


def spider_result_eq(
    pred_rows: Sequence[Row], gold_rows: Sequence[Row], order_matters: bool, deadline: float | None = None
) -> bool:
    """Spider test-suite denotation equality for one database.

    Args:
        pred_rows, gold_rows: lists of row tuples.
        order_matters: compare row order too (the official rule: the gold query has ORDER BY).
        deadline: ``_clock()`` value (this thread's CPU time) past which ComparisonTimeout is raised (checked between
            permutations).
    """
    pred = [tuple(r) for r in pred_rows]
    gold = [tuple(r) for r in gold_rows]
    if not pred and not gold:
        return True
    if len(pred) != len(gold) or len(pred[0]) != len(gold[0]):
        return False
    # Cheap necessary condition: the rows, each taken as a bag of values, agree (as a sequence or as a bag).
    pred_unordered = [_unordered_row(r) for r in pred]
    gold_unordered = [_unordered_row(r) for r in gold]
    if order_matters:
        if pred_unordered != gold_unordered:
            return False
    elif Counter(pred_unordered) != Counter(gold_unordered):
        return False
    gold_bag = None if order_matters else Counter(gold)
    _check_deadline(deadline)
    for tried, perm in enumerate(_column_permutations(gold, pred, order_matters)):
        if tried >= MAX_PERMUTATIONS_TRIED:
            return False
        _check_deadline(deadline)
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if order_matters:
            if permuted == gold:
                return True
        elif Counter(permuted) == gold_bag:
            return True
    return False


COMPARISONS: dict[str, Callable[..., bool]] = {
    "bird": lambda pred, gold, order_matters=False, deadline=None: bird_set_match(pred, gold),
    "spider": spider_result_eq,
}


def compare_results(
    name: str,
    pred_rows: Sequence[Row],
    gold_rows: Sequence[Row],
    order_matters: bool = False,
    timeout_s: float | None = None,
) -> bool:
    """Compare by comparison name (``bird`` or ``spider``); ``order_matters`` is used by ``spider`` only.

    With ``timeout_s`` the Spider search over column permutations raises ComparisonTimeout past that much CPU time of
    the calling thread (the BIRD set comparison is linear and needs no bound).
    """
    try:
        fn = COMPARISONS[name]
    except KeyError:
        raise ValueError(f"unknown comparison {name!r}; expected one of {sorted(COMPARISONS)}") from None
    deadline = None if timeout_s is None else _clock() + timeout_s
    return fn(pred_rows, gold_rows, order_matters=order_matters, deadline=deadline)
