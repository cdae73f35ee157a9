"""Weighted aggregation and O(model) leave-one-out, against hand computations and brute force."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.aggregation import (
    CANCELLATION_GUARD,
    WeightedSum,
    check_update,
    weighted_average,
)
from flower_edge.errors import InputError
from flower_edge.staleness import Decay


def _model(rng: np.random.Generator, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


def test_weights_and_mean_match_hand_computation() -> None:
    # Two nodes with sample shares c = (3, 1), delays (0, 3), polynomial decay a = 0.5:
    # w = (3 * 1, 1 * 4 ** -0.5) = (3, 0.5); global = (3 * x1 + 0.5 * x2) / 3.5.
    g = Decay("polynomial", a=0.5)
    w1, w2 = 3 * g(0.0), 1 * g(3.0)
    assert (w1, w2) == (3.0, 0.5)
    x1 = [np.array([1.0, 2.0], dtype=np.float32), np.array([[7.0]], dtype=np.float32)]
    x2 = [np.array([8.0, -5.0], dtype=np.float32), np.array([[0.0]], dtype=np.float32)]
    total = WeightedSum(x1)
    total.add("n1", x1, w1)
    total.add("n2", x2, w2)
    mean = total.mean()
    np.testing.assert_allclose(mean[0], [(3 + 4) / 3.5, (6 - 2.5) / 3.5], rtol=1e-7)
    np.testing.assert_allclose(mean[1], [[21 / 3.5]], rtol=1e-7)
    assert mean[0].dtype == np.float32
    assert total.keys == ("n1", "n2")
    assert total.weights == {"n1": 3.0, "n2": 0.5}
    assert total.total_weight == 3.5
    assert len(total) == 2
    assert "n1" in total
    # Leave-one-out by hand: without n1 the global is x2, without n2 it is x1.
    np.testing.assert_allclose(total.mean_without("n1")[0], x2[0], rtol=1e-7)
    np.testing.assert_allclose(total.mean_without("n2")[1], x1[1], rtol=1e-7)


def test_three_updates_leave_one_out_by_hand() -> None:
    ref = [np.zeros(1, dtype=np.float64)]
    total = WeightedSum(ref)
    for key, value, weight in [("a", 1.0, 1.0), ("b", 2.0, 2.0), ("c", 4.0, 1.0)]:
        total.add(key, [np.array([value])], weight)
    assert total.mean()[0][0] == pytest.approx((1 + 4 + 4) / 4)
    assert total.mean_without("b")[0][0] == pytest.approx((1 + 4) / 2)
    assert total.mean_without("a")[0][0] == pytest.approx((4 + 4) / 3)
    assert dict(total.means_without())["c"][0][0] == pytest.approx((1 + 4) / 3)


@st.composite
def aggregations(draw: st.DrawFn) -> tuple[list[list[np.ndarray]], list[float]]:
    k = draw(st.integers(min_value=2, max_value=8))
    n_arrays = draw(st.integers(min_value=1, max_value=3))
    shapes = [
        tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3))) for _ in range(n_arrays)
    ]
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    updates = [_model(rng, shapes) for _ in range(k)]
    weights = draw(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=k, max_size=k))
    return updates, weights


@settings(max_examples=60, deadline=None)
@given(case=aggregations())
def test_mean_and_mean_without_equal_brute_force_reaggregation(
    case: tuple[list[list[np.ndarray]], list[float]],
) -> None:
    updates, weights = case
    total = WeightedSum(updates[0])
    for i, (update, weight) in enumerate(zip(updates, weights, strict=True)):
        total.add(i, update, weight)
    for got, want in zip(total.mean(), weighted_average(updates, weights), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for i in range(len(updates)):
        others = [u for j, u in enumerate(updates) if j != i]
        other_weights = [w for j, w in enumerate(weights) if j != i]
        want_loo = weighted_average(others, other_weights)
        for got, want in zip(total.mean_without(i), want_loo, strict=True):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_weighted_average_brute_force_by_hand() -> None:
    updates = [[np.array([0.0, 10.0])], [np.array([4.0, 2.0])]]
    got = weighted_average(updates, [1.0, 3.0])
    np.testing.assert_allclose(got[0], [3.0, 4.0])


def test_dominant_update_is_left_out_without_cancellation() -> None:
    # W - w_big is 1e-12 of W: the plain subtraction would lose ~1e-4 of the result.
    rng = np.random.default_rng(1)
    big = [rng.normal(size=1000) * 1e3]
    small = [[rng.normal(size=1000)] for _ in range(2)]
    total = WeightedSum(big)
    total.add("big", big, 1e12)
    total.add("s0", small[0], 1.0)
    total.add("s1", small[1], 3.0)
    want = weighted_average(small, [1.0, 3.0])[0]
    np.testing.assert_allclose(total.mean_without("big")[0], want, rtol=1e-12, atol=1e-12)
    naive = (total.mean()[0] * total.total_weight - 1e12 * big[0]) / 4.0
    assert np.max(np.abs(naive - want)) > 1e-9  # the guard is needed


def test_guard_threshold_decides_the_path() -> None:
    # others = 0.5 <= guard * W: the others are re-summed, exactly.
    total = WeightedSum([np.array([0.0])])
    total.add("big", [np.array([1.0])], 1.0 / CANCELLATION_GUARD)
    total.add("small", [np.array([3.0])], 0.5)
    assert total.mean_without("big")[0][0] == 3.0
    # others = 2 > guard * W: a subtraction, within its error bound eps * W / (W - w_big).
    total = WeightedSum([np.array([0.0])])
    total.add("big", [np.array([1.0])], 1.0 / CANCELLATION_GUARD)
    total.add("small", [np.array([3.0])], 2.0)
    bound = 4 * np.finfo(np.float64).eps * total.total_weight / 2.0 * 3.0
    assert abs(total.mean_without("big")[0][0] - 3.0) <= bound
    assert total.mean_without("small")[0][0] == 1.0


def test_tiny_and_huge_weights_neither_underflow_nor_overflow() -> None:
    ref = [np.zeros(3, dtype=np.float32)]
    total = WeightedSum(ref)
    x1, x2, x3 = ([np.full(3, v, dtype=np.float32)] for v in (1.0, 2.0, 4.0))
    total.add(1, x1, 1e-307)
    total.add(2, x2, 3e-307)
    np.testing.assert_allclose(total.mean()[0], (1 + 6) / 4, rtol=1e-6)
    total.add(3, x3, 1e300)  # rescales the running sum
    np.testing.assert_allclose(total.mean()[0], 4.0, rtol=1e-6)
    np.testing.assert_allclose(total.mean_without(3)[0], (1 + 6) / 4, rtol=1e-6)
    np.testing.assert_allclose(
        weighted_average([x1, x2], [1e-307, 3e-307])[0], (1 + 6) / 4, rtol=1e-6
    )


def test_integer_arrays_are_rounded_back_to_their_dtype() -> None:
    ref: list[np.ndarray] = [np.zeros(2, dtype=np.float32), np.array(0, dtype=np.int64)]
    total = WeightedSum(ref)
    total.add("a", [np.ones(2, dtype=np.float32), np.array(10, dtype=np.int64)], 1.0)
    total.add("b", [np.zeros(2, dtype=np.float32), np.array(13, dtype=np.int64)], 2.0)
    mean = total.mean()
    assert mean[1].dtype == np.int64
    assert int(mean[1]) == 12  # (10 + 26) / 3
    assert int(total.mean_without("b")[1]) == 10
    assert weighted_average([[np.array(1)], [np.array(2)]], [1.0, 1.0])[0] == 2  # 1.5 -> 2


def test_integer_means_round_half_to_even() -> None:
    # equal weights: (1 + 2) / 2 = 1.5 -> 2, (2 + 3) / 2 = 2.5 -> 2, (-4 + -3) / 2 = -3.5 -> -4
    ref: list[np.ndarray] = [np.zeros(3, dtype=np.int64)]
    a, b = np.array([1, 2, -4], np.int64), np.array([2, 3, -3], np.int64)
    total = WeightedSum(ref)
    total.add("a", [a], 1.0)
    total.add("b", [b], 1.0)
    total.add("c", [np.array([9, 9, 9], np.int64)], 2.0)
    assert total.mean_without("c")[0].tolist() == [2, 2, -4]  # the O(1) subtraction path
    assert weighted_average([[a], [b]], [1.0, 1.0])[0].tolist() == [2, 2, -4]
    two = WeightedSum(ref)
    two.add("a", [a], 1.0)
    two.add("b", [b], 1.0)
    assert two.mean()[0].tolist() == [2, 2, -4]


def test_updates_are_buffered_as_received_not_copied() -> None:
    x = [np.arange(4, dtype=np.float32)]
    total = WeightedSum(x)
    total.add("n", x, 1.0)
    assert total.update("n")[0] is x[0]
    assert [a.dtype for a in total._sum] == [np.float64]  # one float64 running sum


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        ([np.zeros(3, np.float32)], r"^expected 2 arrays, got 1$"),
        ([np.zeros(3, np.float32), [0.0, 1.0]], r"^array 1 is a list, not a numpy array$"),
        (
            [np.zeros(4, np.float32), np.zeros(2, np.int64)],
            r"^array 0 has shape \(4,\), expected \(3,\)$",
        ),
        (
            [np.zeros(3, np.int32), np.zeros(2, np.int64)],
            r"^array 0 has non-float dtype int32, expected float like float32$",
        ),
        (
            [np.zeros(3, np.float32), np.zeros(2, np.float64)],
            r"^array 1 has float dtype float64, expected non-float like int64$",
        ),
        ([np.zeros(3, np.float32), np.array(["a", "b"])], r"^array 1 has non-numeric dtype <U1$"),
        (
            [np.array([0, np.nan, 0], np.float32), np.zeros(2, np.int64)],
            r"^array 0 contains NaN or Inf$",
        ),
        (
            [np.array([0, -np.inf, 0], np.float32), np.zeros(2, np.int64)],
            r"^array 0 contains NaN or Inf$",
        ),
    ],
)
def test_check_update_names_the_first_bad_array(arrays: list[np.ndarray], match: str) -> None:
    reference: list[np.ndarray] = [np.zeros(3, np.float32), np.zeros(2, np.int64)]
    reason = check_update(arrays, reference)
    assert reason is not None
    assert re.search(match, reason), reason


def test_check_update_accepts_good_updates_and_huge_finite_values() -> None:
    reference = [np.zeros(3, np.float64), np.zeros(2, np.int64)]
    assert check_update([np.full(3, 1e308), np.zeros(2, np.int32)], reference) is None
    assert check_update([np.zeros(3, np.float16), np.zeros(2, np.uint8)], reference) is None


def test_check_update_rejects_values_beyond_the_reference_dtype() -> None:
    reference: list[np.ndarray] = [np.zeros(2, np.float32), np.zeros(1, np.int32)]
    ok = [np.array([3e38, -3e38]), np.array([2**31 - 1], np.int64)]
    assert check_update(ok, reference) is None
    assert check_update([np.array([0.0, 4e38]), ok[1]], reference) == (
        "array 0 has values beyond the range of the reference dtype float32"
    )
    assert check_update([ok[0], np.array([2**31], np.int64)], reference) == (
        "array 1 has values beyond the range of the reference dtype int32"
    )


def test_add_rejects_bad_updates_and_weights_and_keeps_the_sum() -> None:
    ref = [np.zeros(2, np.float32)]
    total = WeightedSum(ref)
    total.add("a", [np.ones(2, np.float32)], 2.0)
    with pytest.raises(InputError, match=r"duplicate update key 'a'"):
        total.add("a", [np.ones(2, np.float32)], 1.0)
    for weight in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match=r"weight must be (a finite number )?> 0, got"):
            total.add("b", [np.ones(2, np.float32)], weight)
    with pytest.raises(InputError, match=r"weight must be a finite number > 0, got True"):
        total.add("b", [np.ones(2, np.float32)], True)
    with pytest.raises(InputError, match=r"update 'b' rejected: array 0 contains NaN or Inf"):
        total.add("b", [np.array([np.nan, 0], np.float32)], 1.0)
    assert total.keys == ("a",)
    np.testing.assert_array_equal(total.mean()[0], [1.0, 1.0])


def test_leave_one_out_needs_two_updates_and_a_known_key() -> None:
    total = WeightedSum([np.zeros(1)])
    with pytest.raises(InputError, match=r"cannot average: no update was added"):
        total.mean()
    total.add(7, [np.ones(1)], 1.0)
    with pytest.raises(InputError, match=r"cannot leave out 7: it is the only update"):
        total.mean_without(7)
    with pytest.raises(InputError, match=r"no update with key 8 in the sum"):
        total.mean_without(8)


def test_bad_reference_and_brute_force_inputs() -> None:
    with pytest.raises(InputError, match=r"reference model must have at least one array"):
        WeightedSum([])
    with pytest.raises(InputError, match=r"reference array 0 must be a numeric numpy array"):
        WeightedSum([np.array(["x"])])
    with pytest.raises(InputError, match=r"no update given"):
        weighted_average([], [])
    with pytest.raises(InputError, match=r"got 1 updates but 2 weights"):
        weighted_average([[np.zeros(1)]], [1.0, 1.0])
    with pytest.raises(InputError, match=r"weights\[1\] must be > 0, got -1\.0"):
        weighted_average([[np.zeros(1)], [np.zeros(1)]], [1.0, -1.0])
    with pytest.raises(InputError, match=r"updates\[1\] rejected: array 0 has shape \(2,\)"):
        weighted_average([[np.zeros(1)], [np.zeros(2)]], [1.0, 1.0])


def test_large_non_contiguous_and_mixed_float_updates_match_brute_force() -> None:
    # Arrays longer than one block of the blocked accumulation (2**17 elements), a transposed
    # (non-contiguous) view, float64 and float16 arrays.
    rng = np.random.default_rng(11)
    shapes = [(3, 100_003), (7, 5), (9,)]
    dtypes = [np.float32, np.float64, np.float16]
    updates: list[list[np.ndarray]] = []
    for _ in range(3):
        big = rng.normal(size=shapes[0]).astype(np.float32)
        small = rng.normal(size=(5, 7)).T  # non-contiguous float64 view
        half = rng.normal(size=9).astype(np.float16)
        updates.append([big, small, half])
    reference = [np.zeros(s, dtype=d) for s, d in zip(shapes, dtypes, strict=True)]
    weights = [0.5, 2.0, 1e-3]
    total = WeightedSum(reference)
    for i, (u, w) in enumerate(zip(updates, weights, strict=True)):
        total.add(i, u, w)
    for got, want, dtype in zip(
        total.mean(), weighted_average(updates, weights), dtypes, strict=True
    ):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6)
    for got, want in zip(
        total.mean_without(1), weighted_average([updates[0], updates[2]], [0.5, 1e-3]), strict=True
    ):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-6)


def test_increasing_weights_keep_the_sum_exact() -> None:
    # Each new maximum may rescale S (by a power of two: exact); the mean must not drift.
    ref = [np.zeros(4)]
    total = WeightedSum(ref)
    updates, weights = [], []
    for i in range(40):
        updates.append([np.full(4, float(i))])
        weights.append(1.5**i)
        total.add(i, updates[-1], weights[-1])
    np.testing.assert_allclose(total.mean()[0], weighted_average(updates, weights)[0], rtol=1e-14)
    np.testing.assert_allclose(
        total.mean_without(39)[0], weighted_average(updates[:-1], weights[:-1])[0], rtol=1e-12
    )


def test_checked_add_skips_only_the_finite_pass() -> None:
    ref = [np.zeros(2, np.float32)]
    nan_update = [np.array([np.nan, 0.0], np.float32)]
    assert check_update(nan_update, ref, check_finite=False) is None
    assert check_update(nan_update, ref) == "array 0 contains NaN or Inf"
    total = WeightedSum(ref)
    with pytest.raises(InputError, match=r"update 'x' rejected: array 0 has shape \(3,\)"):
        total.add("x", [np.zeros(3, np.float32)], 1.0, checked=True)
    with pytest.raises(InputError, match=r"update 'x' rejected: expected 1 arrays, got 2"):
        total.add("x", [np.zeros(2, np.float32)] * 2, 1.0, checked=True)
    total.add("y", [np.array([1.0, 2.0], np.float32)], 1.0, checked=True)
    np.testing.assert_array_equal(total.mean()[0], [1.0, 2.0])


def test_any_hashable_key_works_none_and_tuples_included() -> None:
    total = WeightedSum([np.zeros(1)])
    total.add(None, [np.array([1.0])], 1.0)
    total.add((7, "job-1"), [np.array([3.0])], 1.0)
    assert total.mean_without(None)[0][0] == 3.0
    assert total.mean_without((7, "job-1"))[0][0] == 1.0
    assert total.keys == (None, (7, "job-1"))
