"""Result comparisons where naive string or set comparison would give the wrong answer."""
import pytest

from mrtpo_openrlhf.verifiers.sql import bird_set_match, compare_results, spider_result_eq


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
