"""Result comparisons where naive string or set comparison would give the wrong answer."""

import pytest

from mrtpo_openrlhf.tasks.sql.verifier import bird_set_match, compare_results, spider_result_eq


def test_order_matters_only_when_asked():
    gold, pred = [(1,), (2,), (3,)], [(3,), (2,), (1,)]
    assert spider_result_eq(pred, gold, order_matters=False)
    assert not spider_result_eq(pred, gold, order_matters=True)
    assert bird_set_match(pred, gold)


def test_duplicates_count_in_bag_but_not_in_set():
    gold, pred = [("a",), ("a",), ("b",)], [("a",), ("b",), ("b",)]
    assert bird_set_match(pred, gold)  # BIRD: set semantics
    assert not spider_result_eq(pred, gold, order_matters=False)
    assert not spider_result_eq([("a",), ("b",)], gold, order_matters=False)  # different length


def test_column_permutation_allowed_by_spider_only():
    gold = [("Ana", 90), ("Ben", 85), ("Ana", 85)]
    pred = [(85, "Ben"), (90, "Ana"), (85, "Ana")]
    assert spider_result_eq(pred, gold, order_matters=False)
    assert not bird_set_match(pred, gold)


def test_permutation_must_be_consistent_across_rows():
    # Each row is a permutation of a gold row, but no single column permutation maps pred to gold.
    gold = [(1, 2), (3, 4)]
    pred = [(2, 1), (3, 4)]
    assert not spider_result_eq(pred, gold, order_matters=False)


def test_wide_rows_with_identical_columns_are_fast_and_correct():
    gold = [tuple([None] * 9 + [i]) for i in range(30)]
    pred = [tuple([i] + [None] * 9) for i in range(30)]
    assert spider_result_eq(pred, gold, order_matters=True)
    assert not spider_result_eq(pred[::-1], gold, order_matters=True)


def test_nulls_mixed_types_and_int_float():
    assert spider_result_eq([(None, 1)], [(None, 1.0)], order_matters=False)  # 1 == 1.0 as in Python / official
    assert not spider_result_eq([("1",)], [(1,)], order_matters=False)  # text is not a number
    assert not bird_set_match([(0.1 + 0.2,)], [(0.3,)])  # no float tolerance, like the official scorers
    assert spider_result_eq([(None,), ("x",)], [("x",), (None,)], order_matters=False)
    assert spider_result_eq([(b"\x00", "é")], [("é", b"\x00")], order_matters=False)


def test_empty_and_shape_mismatches():
    assert spider_result_eq([], [], order_matters=True)
    assert not spider_result_eq([], [(1,)], order_matters=False)
    assert not spider_result_eq([(1, 2)], [(1,)], order_matters=False)
    assert bird_set_match([], [])


def test_compare_results_by_name():
    assert compare_results("bird", [(1,), (1,)], [(1,)])
    assert not compare_results("spider", [(1,), (1,)], [(1,)])
    with pytest.raises(ValueError, match="unknown comparison"):
        compare_results("exact", [], [])


def _naive_spider_eq(pred, gold, order_matters):
    """The documented rule by brute force: some column permutation makes the rows equal (as bags, or in order)."""
    from collections import Counter
    from itertools import permutations

    if not pred and not gold:
        return True
    if len(pred) != len(gold) or len(pred[0]) != len(gold[0]):
        return False
    for perm in permutations(range(len(gold[0]))):
        permuted = [tuple(row[j] for j in perm) for row in pred]
        if (permuted == gold) if order_matters else (Counter(permuted) == Counter(gold)):
            return True
    return False


def test_spider_comparison_matches_brute_force_on_random_results():
    import random

    rng = random.Random(0)
    for _ in range(3000):
        cols, rows = rng.randint(1, 4), rng.randint(0, 4)
        gold = [tuple(rng.choice([0, 1, 1.0, "a", None]) for _ in range(cols)) for _ in range(rows)]
        perm = rng.sample(range(cols), cols)
        pred = [tuple(r[j] for j in perm) for r in gold]
        if rng.random() < 0.5:
            rng.shuffle(pred)
        if pred and rng.random() < 0.4:  # break one cell sometimes
            i, j = rng.randrange(len(pred)), rng.randrange(cols)
            pred[i] = pred[i][:j] + (rng.choice([0, 2, "b", None]),) + pred[i][j + 1 :]
        for order_matters in (False, True):
            assert spider_result_eq(pred, gold, order_matters) == _naive_spider_eq(pred, gold, order_matters)


def _shared_value_rows(rows=1000, cols=8):
    # every column holds 0..rows-1 once, rows hold the same bags, no permutation fits: the 62 s case of issue 15
    gold = [tuple((r + i) % rows for i in range(cols)) for r in range(rows)]
    pred = [tuple(reversed(row)) if r < 2 else row for r, row in enumerate(gold)]
    return pred, gold


def test_spider_comparison_is_bounded_in_time():
    import time

    from mrtpo_openrlhf.tasks.sql.verifier import ComparisonTimeout

    pred, gold = _shared_value_rows()
    start = time.process_time()  # CPU time: a busy machine (CI, a run beside it) must not fail this
    assert not compare_results("spider", pred, gold, order_matters=True, timeout_s=5.0)  # column-wise: fast, exact
    assert time.process_time() - start < 0.5
    start, wall = time.thread_time(), time.perf_counter()
    with pytest.raises(ComparisonTimeout):
        compare_results("spider", pred, gold, order_matters=False, timeout_s=0.3)
    # bounded in this thread's CPU time (the unbounded search would run for hours): one permutation's pass past it at
    # most; the wall time stretches with the machine's load (10 s at nice 19 beside a training run), so only no hang
    assert time.thread_time() - start < 0.3 + 0.5
    assert time.perf_counter() - wall < 300
    start = time.process_time()
    assert compare_results("spider", gold[::-1], gold, order_matters=False, timeout_s=5.0)  # ~0.02 s when idle
    assert time.process_time() - start < 0.3
