"""Seed 000/001 maths at extreme magnitudes and with wrong-typed input (new-user probe).

Each case failed before its fix: a silent wrong split, a raw OverflowError / ValueError /
TypeError instead of an InputError naming the field, or a bad setting accepted.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from flower_edge.allocation import TimeModel, fit_time_model, initial_shares, rebalance
from flower_edge.decision import decide, derive_theta, linear_resources
from flower_edge.errors import InputError
from flower_edge.operators import _profile
from flower_edge.profiling.report import (
    ResourceReport,
    WorkloadResult,
    execution_intensity,
    resource_evaluation,
)
from flower_edge.radar import match_ratios
from flower_edge.valuation import values_from_contributions

TINY = 5e-324  # the smallest subnormal float


def formula7(total: int, ratios: list[float]) -> list[float]:
    """``F m_d / sum m`` computed on the ratios' proportions (exact in fractions)."""
    top = max(ratios)
    rel = [r / top for r in ratios]
    return [total * r / math.fsum(rel) for r in rel]


@pytest.mark.parametrize(
    "ratios",
    [[1e308, 1e308, 1e308], [1.7e308, 1e308, 1.0], [TINY, TINY, 1e-320], [1e-310, 3e-310]],
)
def test_initial_shares_depend_on_proportions_only(ratios: list[float]) -> None:
    shares = initial_shares(10, ratios)
    assert sum(shares) == 10  # was (1, 1, 1) for three ratios of 1e308 (overflowing sum)
    for got, exact in zip(shares, formula7(10, ratios), strict=True):
        assert abs(got - exact) < 1
    scaled = [r * 2.0**-60 if r > 1e-200 else r * 2.0**60 for r in ratios]
    assert initial_shares(10, scaled) == shares


def test_initial_shares_total_exact_at_the_largest_total() -> None:
    total = 2**53
    shares = initial_shares(total, [1.0, 2.0, 3.0])
    assert sum(shares) == total
    for got, exact in zip(shares, [total / 6, total / 3, total / 2], strict=True):
        assert abs(got - exact) <= 1


@pytest.mark.parametrize(
    ("ratios", "capacities", "expected"),
    [
        ([1e-20, 1e300], [None, 5], (5, 5)),  # was (-9223372036854775807, 6)
        ([1e-320, 1.0], [None, 5], (5, 5)),  # was the same garbage (before: OverflowError)
        ([1e-20, 1e308], [None, 5], (5, 5)),  # ratio 1e-328 after scaling: 'can hold 5'
        ([1e-320, 1.0, 1e-321], [None, 5, None], (5, 5, 0)),  # the rest split 10 : 1
    ],
)
def test_initial_shares_fill_a_node_of_a_tiny_ratio_when_the_others_are_full(
    ratios: list[float], capacities: list[int | None], expected: tuple[int, ...]
) -> None:
    """Found by a code review: scaling the largest ratio to 1 made a tiny one subnormal (its
    water level overflowed) or 0 (no longer a node with ratio > 0)."""
    assert initial_shares(10, ratios, capacities) == expected


def test_initial_shares_of_ordinary_ratios_are_those_computed_unscaled() -> None:
    """Found by a code review: dividing the ratios by their largest rounded the water levels
    differently, and about 1 split in 400 of ordinary ratios gave a sample to another node
    at a tie of fractional parts (here 1/3 each for nodes 1, 6 and 9), unlike the computation
    the recorded figures were made with. Scaling by a power of two is exact."""
    ratios = [0.7, 0.1, 0.0, 0.6, 0.3, 0.6, 0.7, 0.9, 0.9, 0.4]
    capacities = [10] + [None] * 9
    expected = (10, 5, 0, 32, 16, 32, 38, 48, 48, 21)  # was (..., 37, 48, 48, 22)
    assert initial_shares(250, ratios, capacities) == expected
    assert initial_shares(250, [r * 2.0**-30 for r in ratios], capacities) == expected


@pytest.mark.parametrize("ratios", [None, 3, "abc"])
def test_initial_shares_names_ratios_of_the_wrong_type(ratios: object) -> None:
    with pytest.raises(InputError, match="ratios must be a sequence"):
        initial_shares(10, ratios)  # type: ignore[arg-type]


@pytest.mark.parametrize("max_moves", [-1, "3", 2.5, True])
def test_rebalance_checks_max_moves(max_moves: object) -> None:
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 0.0)]
    with pytest.raises(InputError, match="max_moves must be an integer >= 0"):
        rebalance([10, 0], models, max_moves=max_moves)  # type: ignore[arg-type]


def test_rebalance_max_moves_zero_moves_nothing() -> None:
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 0.0)]
    assert rebalance([10, 0], models, max_moves=0).samples == (10, 0)


@pytest.mark.parametrize("method", ["seed", "optimal"])
def test_rebalance_names_a_time_model_that_overflows(method: str) -> None:
    models = [TimeModel(1e308, 0.0), TimeModel(1e308, 1e308)]
    with pytest.raises(InputError, match=r"models\[0\].*overflows"):
        rebalance([10, 0], models, method=method)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["seed", "optimal"])
def test_rebalance_ignores_room_beyond_the_total(method: str) -> None:
    # room far beyond the total (k * cap overflows) does not trip the overflow check
    models = [TimeModel(1e300, 0.0), TimeModel(2e300, 0.0)]
    out = rebalance([3, 0], models, method=method, capacities=[2**53, 2**53])  # type: ignore[arg-type]
    assert out.samples == (2, 1)
    assert math.isfinite(out.makespan)


def test_fit_time_model_checks_the_prior() -> None:
    with pytest.raises(InputError, match="prior must be a TimeModel"):
        fit_time_model([], prior=3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("contributions", "expected"),
    [
        ([1.7e308, 1.7e308], [0.5, 0.5]),
        ([1.7e308, 0.85e308, -1.0], [2 / 3, 1 / 3, 0.0]),
        ([TINY, 2 * TINY], [1 / 3, 2 / 3]),
    ],
)
def test_values_at_extreme_magnitudes(contributions: list[float], expected: list[float]) -> None:
    values = values_from_contributions(contributions)
    np.testing.assert_allclose(values, expected, rtol=1e-12)
    assert math.isclose(math.fsum(values.tolist()), 1.0, rel_tol=1e-12)


def test_match_ratios_names_a_non_number() -> None:
    with pytest.raises(InputError, match=r"evaluations\[0\]\['cpu'\].*got 'a'"):
        match_ratios([["a", 1, 1, 1]], 0.5)  # type: ignore[arg-type]


def test_match_ratios_names_ragged_rows() -> None:
    with pytest.raises(InputError, match="rows differ in length"):
        match_ratios([[1, 2, 3, 4], [1, 2]], 0.5)


def test_match_ratios_at_extreme_magnitudes() -> None:
    big = sys.float_info.max
    ratios = match_ratios([[big, big, big, big], [big / 2, big / 2, big / 2, big / 2]], 0.5)
    np.testing.assert_allclose(ratios, [1.0, 0.25])


@pytest.mark.parametrize(
    ("fn", "args", "match"),
    [
        (linear_resources, (["a"],), r"match_ratios\[0\].*got 'a'"),
        (linear_resources, (0.3,), "match_ratios must be a sequence"),
        (derive_theta, (["a"], [0.1]), r"resources\[0\].*got 'a'"),
        (derive_theta, ([0.1], None), "values must be a sequence of numbers, got NoneType"),
        (derive_theta, ([[0.1, 0.2]], [0.1, 0.2]), "resources must be a flat sequence"),
        (derive_theta, ([0.1, [0.2, 0.3]], [0.1, 0.2]), "resources must be a flat"),
        (decide, (0.5, 0.1, 1.0, 1.0, "yes"), "participated must be a boolean"),
    ],
)
def test_decision_inputs_of_the_wrong_type(
    fn: Callable[..., Any], args: tuple[Any, ...], match: str
) -> None:
    with pytest.raises(InputError, match=match):
        fn(*args)


def test_derive_theta_still_takes_arrays_and_tuples() -> None:
    assert derive_theta(np.array([0.2, 0.4]), (0.1, 0.3)) == pytest.approx(0.25)


def test_operators_at_the_mean_intensity_are_memory_intensive_exactly() -> None:
    # six operators of one intensity: the rounded mean fell below it and all were "compute"
    calls = [("fwd/op", "aten.op", 356.36030788115914, 721.9298806173309)] * 6
    profile = _profile(calls, "count", ())
    assert {o.kind for o in profile.operators} == {"memory"}
    assert profile.compute_share == 0.0


def test_operator_classification_against_exact_arithmetic() -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 12))
        values = rng.choice(rng.uniform(0.01, 100.0, 3), size=n)  # repeated intensities
        calls = [(f"fwd/{i}", "aten.op", float(v), 1.0) for i, v in enumerate(values)]
        profile = _profile(calls, "count", ())
        total = sum(Fraction(float(v)) for v in values)
        expected = ["compute" if Fraction(float(v)) * n > total else "memory" for v in values]
        assert [o.kind for o in profile.operators] == expected
        assert profile.compute_share == expected.count("compute") / n


def test_execution_intensity_names_a_time_too_short_for_a_float() -> None:
    # seed formula 3 at a subnormal time: was "intensity must be a finite number in [0, inf]"
    with pytest.raises(InputError, match=r"seconds=1e-320 is too short for 10 samples"):
        WorkloadResult.measured("cpu-matmul", 10, 1e-320, 0.5)
    with pytest.raises(InputError, match="overflows a float"):
        execution_intensity(10**12, 5e-324)
    assert execution_intensity(10, 1e-300) == pytest.approx(1e301)


def test_resource_evaluation_near_the_largest_float() -> None:
    # seed formula 4 summed before dividing: OverflowError, which a server parsing a
    # client's profile report did not catch as a bad reply
    big = [
        WorkloadResult.measured("cpu-a", 10**12, 1e-296, 1.0),
        WorkloadResult.measured("cpu-b", 10**12, 1e-296, 1.0),
    ]
    assert resource_evaluation(big) == pytest.approx(1e308)
    assert ResourceReport.from_workloads(big).evaluation == pytest.approx(1e308)
    small = [
        WorkloadResult.measured("a", 30, 0.7, 0.3),
        WorkloadResult.measured("b", 7, 0.1, 0.9),
        WorkloadResult.measured("c", 3, 0.3, 0.1),
    ]
    brute = (0.3 * 30 / 0.7 + 0.9 * 7 / 0.1 + 0.1 * 3 / 0.3) / 3
    assert resource_evaluation(small) == pytest.approx(brute, rel=1e-15)
