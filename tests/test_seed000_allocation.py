"""Sample allocation (seed formulas 7-9) against hand computations and exhaustive search."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.allocation import (
    MAX_POINTS,
    Allocation,
    TimeModel,
    _equal_finish_time,
    fit_time_model,
    initial_shares,
    predicted_makespan,
    rebalance,
)
from flower_edge.errors import InputError


# ---------------------------------------------------------------- references
def compositions(total: int, n: int, caps: Sequence[float]) -> Iterator[tuple[int, ...]]:
    """Every split of ``total`` into ``n`` non-negative integers within ``caps``."""
    for cut in itertools.combinations(range(total + n - 1), n - 1):
        parts = np.diff((-1, *cut, total + n - 1)) - 1
        if all(p <= c for p, c in zip(parts, caps, strict=True)):
            yield tuple(int(p) for p in parts)


def brute_makespan(total: int, models: Sequence[TimeModel], caps: Sequence[float]) -> float:
    return min(predicted_makespan(f, models) for f in compositions(total, len(models), caps))


def exact_shares(total: int, ratios: Any, caps: Any) -> np.ndarray:
    """Water-filling by bisection on lambda: x_d = min(cap_d, lam * m_d), sum = total."""
    m, c = np.asarray(ratios, float), np.asarray(caps, float)
    lo, hi = 0.0, 1.0
    while np.minimum(c, hi * m).sum() < total:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(c, mid * m).sum() < total else (lo, mid)
    out: np.ndarray = np.minimum(c, hi * m)
    return out


# ---------------------------------------------------------------- formula 7
def test_initial_shares_by_hand() -> None:
    # exact 1.667, 3.333, 5 -> floors 1, 3, 5, the leftover to the largest remainder
    assert initial_shares(10, [1, 2, 3]) == (2, 3, 5)
    assert initial_shares(0, [1, 2, 3]) == (0, 0, 0)
    # node 1 can hold 1: the remaining 9 split 1 : 3 -> 2.25, 6.75 -> 2, 7
    assert initial_shares(10, [1, 2, 3], [None, 1, None]) == (2, 1, 7)
    # a zero-capacity node and a zero-ratio node get nothing
    assert initial_shares(7, [1, 5, 0], [None, 0, 4]) == (7, 0, 0)


@pytest.mark.parametrize("seed", range(6))
def test_initial_shares_match_rounding_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    total = int(rng.integers(0, 13))
    ratios = rng.uniform(0.0, 1.0, n)
    caps = [math.inf] * n
    if seed % 2:
        caps = [float(c) for c in rng.integers(1, total + 2, n)]
        caps[0] = math.inf
    exact = exact_shares(total, ratios, caps) if total else np.zeros(n)
    got = initial_shares(total, ratios, [None if math.isinf(c) else int(c) for c in caps])
    assert sum(got) == total
    assert np.all(np.abs(np.asarray(got) - exact) < 1)
    best = min(float(np.sum((np.asarray(f) - exact) ** 2)) for f in compositions(total, n, caps))
    assert float(np.sum((np.asarray(got) - exact) ** 2)) == pytest.approx(best, abs=1e-9)


def test_initial_shares_large() -> None:
    rng = np.random.default_rng(0)
    ratios = rng.uniform(0, 1, 10_000)
    caps = rng.integers(0, 200, 10_000)
    got = np.asarray(initial_shares(500_000, ratios, [int(c) for c in caps]))
    assert got.sum() == 500_000
    assert np.all(got <= caps)
    exact = exact_shares(500_000, ratios, caps)
    assert np.max(np.abs(got - exact)) < 1


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, [1.0]), r"total must be an integer in \[0, 9007199254740992\], got -1"),
        ((5, []), "node list is empty"),
        ((5, [1.0, float("nan")]), r"ratios\[1\] must be a finite number >= 0"),
        ((5, [1.0, -0.5]), r"ratios\[1\] must be >= 0, got -0\.5"),
        ((5, [0.0, 0.0]), r"ratios: no node has a match ratio > 0, so total=5 samples"),
        ((5, [1.0, 1.0], [2, 2]), r"can hold 4 samples, fewer than total=5"),
        ((5, [1.0, 1.0], [2, -1]), r"capacities\[1\] must be an integer >= 0, got -1"),
        ((5, [1.0, 1.0], [2]), r"capacities must have one entry per node \(2\), got 1"),
    ],
)
def test_initial_shares_bad_input(args: tuple[object, ...], match: str) -> None:
    with pytest.raises(InputError, match=match):
        initial_shares(*args)  # type: ignore[arg-type]


# ---------------------------------------------------------------- formula 8
def test_time_model_predicts_and_validates() -> None:
    assert TimeModel(0.5, 2.0).predict(10) == 7.0
    with pytest.raises(InputError, match=r"TimeModel.k must be > 0, got 0"):
        TimeModel(0.0, 1.0)
    with pytest.raises(InputError, match=r"TimeModel.b must be >= 0, got -1"):
        TimeModel(1.0, -1.0)


def test_fit_exact_line() -> None:
    obs = [(10.0, 3.0), (20.0, 5.0), (40.0, 9.0)]
    fit = fit_time_model(obs)
    assert fit.k == pytest.approx(0.2)
    assert fit.b == pytest.approx(1.0)


def test_fit_ignores_an_outlier() -> None:
    obs = [(float(x), 0.1 * x + 2.0) for x in range(10, 110, 10)]
    obs[4] = (50.0, 60.0)  # a stall
    fit = fit_time_model(obs)
    assert fit.k == pytest.approx(0.1)
    assert fit.b == pytest.approx(2.0)
    # least squares is dragged far off by the same point
    x, y = np.asarray(obs).T
    assert abs(np.polyfit(x, y, 1)[0] - 0.1) > 0.02


@pytest.mark.parametrize(("seed", "size"), [(0, 5), (1, 15), (2, 32), (3, 33), (4, 120)])
def test_fit_matches_scipy_theil_sen(seed: int, size: int) -> None:
    from scipy.stats import theilslopes

    rng = np.random.default_rng(seed)
    x = rng.integers(1, 50, size).astype(float)
    y = 0.2 * x + 1.0 + np.abs(rng.standard_t(1, size))  # heavy-tailed noise, times >= 0
    ref = theilslopes(y, x)
    fit = fit_time_model(list(zip(x, y, strict=True)), TimeModel(1.0, 0.0))
    if ref.slope > 0:
        assert fit.k == pytest.approx(ref.slope)
        assert fit.b == pytest.approx(max(0.0, float(np.median(y - ref.slope * x))))


def test_fit_falls_back_to_prior() -> None:
    prior = TimeModel(0.3, 1.0)
    assert fit_time_model([], prior) is prior
    assert fit_time_model([(10.0, 4.0), (10.0, 5.0)], prior) is prior  # one distinct load
    assert fit_time_model([(10.0, 4.0), (20.0, 3.0)], prior) is prior  # slope < 0
    assert fit_time_model([(10.0, 4.0), (20.0, 5.0)], prior, min_points=3) is prior
    assert fit_time_model([(10.0, 4.0), (20.0, 5.0)], prior).k == pytest.approx(0.1)


def test_fit_clamps_negative_intercept() -> None:
    fit = fit_time_model([(10.0, 0.5), (20.0, 1.5)])
    assert fit.k == pytest.approx(0.1)
    assert fit.b == 0.0


@pytest.mark.parametrize(
    ("obs", "match"),
    [
        ([(1.0, 2.0)], r"cannot fit a time model \(1 distinct loads < min_points=2\)"),
        ([(1.0, 2.0), (2.0, 1.0)], r"fitted slope -1 is not > 0"),
        ([(1.0, float("nan"))], r"observations\[0\] must have a finite load >= 0"),
        ([(1.0, 2.0), (-1.0, 2.0)], r"observations\[1\] must have a finite load >= 0"),
        ([(1.0,)], r"observations\[0\] must be a \(load, seconds\) pair"),
    ],
)
def test_fit_bad_input(obs: list[tuple[float, ...]], match: str) -> None:
    with pytest.raises(InputError, match=match):
        fit_time_model(obs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- formula 9
def test_predicted_makespan_ignores_idle_nodes() -> None:
    models = [TimeModel(1.0, 5.0), TimeModel(2.0, 0.5)]
    assert predicted_makespan([0, 3], models) == 6.5
    assert predicted_makespan([1, 3], models) == 6.5
    assert predicted_makespan([2, 3], models) == 7.0
    assert predicted_makespan([0, 0], models) == 0.0


def test_seed_transfer_by_hand() -> None:
    # T_s = 2*10 + 0 = 20, T_f = 1*2 + 0 = 2: delta = 18 / 3 = 6 -> (4 samples, 8 s) both
    models = [TimeModel(2.0, 0.0), TimeModel(1.0, 0.0)]
    alloc = rebalance([10, 2], models, method="seed")
    assert alloc == Allocation((4, 8), (8.0, 8.0), 8.0, "seed")


def test_seed_gap_of_a_transfer_that_empties_the_slowest_uses_its_line() -> None:
    # T_s = 1*2 + 1.8 = 3.8, T_f = 0: delta = 3.8 / 2 = 1.9 -> 1 or 2 samples. Formula 9's
    # gap |T_f' - T_s'| with T = k f + b: 1 -> |1 - 2.8| = 1.8, 2 -> |2 - 1.8| = 0.2: one
    # move of 2 (the emptied node then idles: time 0)
    models = [TimeModel(1.0, 1.8), TimeModel(1.0, 0.0)]
    alloc = rebalance([2, 0], models, method="seed", max_moves=1)
    assert alloc == Allocation((0, 2), (0.0, 2.0), 2.0, "seed")


def test_seed_rounds_delta_to_smaller_gap() -> None:
    # T_s = 10, T_f = 1 (b=1, f=0 would be idle: give it 1 sample -> 2): delta = (10-2)/2 = 4
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 1.0)]
    alloc = rebalance([10, 1], models, method="seed")
    # moves of 4 -> (6, 5): times 6, 6
    assert alloc.samples == (6, 5)
    assert alloc.makespan == 6.0


def test_seed_move_limit(caplog: pytest.LogCaptureFixture) -> None:
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 0.0), TimeModel(1.0, 0.0)]
    # 9,0,0 -> 5,4,0 (delta 4.5, both roundings leave gap 1: the smaller step)
    #       -> 3,4,2 (delta 2.5) -> 3,3,3 (delta 1): three moves
    with caplog.at_level("WARNING", logger="flower_edge.allocation"):
        done = rebalance([9, 0, 0], models, max_moves=3)
    assert done.samples == (3, 3, 3)
    assert "max_moves" not in caplog.text
    with caplog.at_level("WARNING", logger="flower_edge.allocation"):
        cut = rebalance([9, 0, 0], models, max_moves=1)
    assert cut.samples == (5, 4, 0)
    assert "seed rebalancing stopped after 1 moves (max_moves)" in caplog.text


def test_seed_stops_when_transfer_does_not_help() -> None:
    # the fastest node's fixed cost is above the slowest's time: nothing moves
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 50.0)]
    alloc = rebalance([10, 0], models, method="seed")
    assert alloc.samples == (10, 0)
    assert alloc.predicted_seconds == (10.0, 0.0)


def test_seed_passes_over_a_fastest_node_that_cannot_take_work() -> None:
    # node 2 is idle, so it finishes first, but one sample would take it 25 s, past the
    # slowest's 20 s: it cannot help. Node 1 (5 s) can: the seed rule moves the slowest
    # node's samples to the fastest node that can take them instead of stopping there
    # (it stopped at (20, 5, 0), makespan 20).
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 0.0), TimeModel(25.0, 0.0)]
    alloc = rebalance([20, 5, 0], models, method="seed")
    assert sorted(alloc.samples[:2]) == [12, 13]
    assert alloc.samples[2] == 0
    assert alloc.makespan == 13.0


def _no_single_move_helps(
    f: Sequence[int], models: Sequence[TimeModel], caps: Sequence[float]
) -> bool:
    """Whether no move of one sample from the slowest node makes both finish before it."""
    times = [m.predict(x) for m, x in zip(models, f, strict=True)]
    t_max = max(times, default=0.0)
    for s, (x, t) in enumerate(zip(f, times, strict=True)):
        if x == 0 or t < t_max:
            continue
        for g, (y, c) in enumerate(zip(f, caps, strict=True)):
            if g != s and y + 1 <= c and models[g].predict(y + 1) < t_max:
                return False
    return True


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(2, 6), total=st.integers(1, 40))
def test_seed_ends_where_no_single_transfer_from_the_slowest_helps(
    data: st.DataObject, n: int, total: int
) -> None:
    ks = data.draw(st.lists(st.floats(0.05, 50.0), min_size=n, max_size=n))
    bs = data.draw(st.lists(st.floats(0.0, 10.0), min_size=n, max_size=n))
    models = [TimeModel(k, b) for k, b in zip(ks, bs, strict=True)]
    start = data.draw(st.lists(st.integers(0, total), min_size=n, max_size=n))
    alloc = rebalance(start, models, method="seed")
    assert sum(alloc.samples) == sum(start)
    assert alloc.makespan <= predicted_makespan(start, models) + 1e-9
    # a unique slowest node: then one sample moved to any node that finishes before it
    # would lower the makespan, so the seed's transfers must not have stopped short of it
    times = [m.predict(x) for m, x in zip(models, alloc.samples, strict=True)]
    if sum(t == max(times) for t in times) == 1:
        assert _no_single_move_helps(alloc.samples, models, [math.inf] * n)


def test_optimal_continuous_time_matches_design_formula() -> None:
    rng = np.random.default_rng(2)
    ks, bs = rng.uniform(0.01, 0.1, 6), rng.uniform(0.0, 1.0, 6)
    models = [TimeModel(float(k), float(b)) for k, b in zip(ks, bs, strict=True)]
    total = 10_000  # large enough that no node drops out
    t_star = (total + np.sum(bs / ks)) / np.sum(1 / ks)
    assert _equal_finish_time(total, models, [math.inf] * 6) == pytest.approx(t_star)
    alloc = rebalance([total] + [0] * 5, models, method="optimal")
    assert sum(alloc.samples) == total
    # the integer optimum lies between the continuous one and one more sample on the slowest
    assert t_star - 1e-9 <= alloc.makespan <= t_star + float(ks.max())


def test_optimal_drops_node_with_large_offset() -> None:
    models = [TimeModel(1.0, 0.0), TimeModel(1.0, 0.0), TimeModel(0.01, 100.0)]
    alloc = rebalance([4, 4, 4], models, method="optimal")
    assert alloc.samples == (6, 6, 0)
    assert alloc.makespan == 6.0


def test_capacities_respected() -> None:
    models = [TimeModel(0.1, 0.0), TimeModel(1.0, 0.0)]
    for method in ("seed", "optimal"):
        alloc = rebalance([3, 7], models, method=method, capacities=[5, None])  # type: ignore[arg-type]
        assert alloc.samples == (5, 5)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 4),
    total=st.integers(0, 9),
)
def test_optimal_equals_exhaustive_and_beats_seed(data: st.DataObject, n: int, total: int) -> None:
    ks = data.draw(st.lists(st.floats(0.05, 5.0), min_size=n, max_size=n))
    bs = data.draw(st.lists(st.floats(0.0, 10.0), min_size=n, max_size=n))
    models = [TimeModel(k, b) for k, b in zip(ks, bs, strict=True)]
    caps_raw = data.draw(st.lists(st.none() | st.integers(0, 9), min_size=n, max_size=n))
    caps = [math.inf if c is None else float(c) for c in caps_raw]
    assume_total = min(total, int(sum(min(c, total) for c in caps)))
    start = next(compositions(assume_total, n, caps))
    opt = rebalance(start, models, method="optimal", capacities=caps_raw)
    seed = rebalance(start, models, method="seed", capacities=caps_raw)
    best = brute_makespan(assume_total, models, caps)
    assert sum(opt.samples) == sum(seed.samples) == assume_total
    assert all(f <= c for f, c in zip(opt.samples, caps, strict=True))
    assert all(f <= c for f, c in zip(seed.samples, caps, strict=True))
    assert opt.makespan == pytest.approx(best, rel=1e-9, abs=1e-12)
    assert opt.makespan <= seed.makespan + 1e-9
    assert seed.makespan <= predicted_makespan(start, models) + 1e-9


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shares": [], "models": []}, "node list is empty"),
        ({"shares": [1], "models": []}, r"models must have one TimeModel per node \(1\), got 0"),
        ({"shares": [-1], "models": [TimeModel(1, 0)]}, r"shares\[0\] must be an integer in \[0, "),
        (
            {"shares": [3, 1], "models": [TimeModel(1, 0)] * 2, "capacities": [2, None]},
            r"shares\[0\]=3 exceeds capacities\[0\]=2",
        ),
        (
            {"shares": [1], "models": [TimeModel(1, 0)], "method": "greedy"},
            r"method must be one of seed, optimal, got 'greedy'",
        ),
    ],
)
def test_rebalance_bad_input(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        rebalance(**kwargs)  # type: ignore[arg-type]


def _bisect_equal_finish(total: int, models: Sequence[TimeModel], caps: Sequence[float]) -> float:
    """Reference: smallest T with sum_d clip((T - b_d) / k_d, 0, cap_d) >= total, by bisection."""

    def held(t: float) -> float:
        return sum(min(c, max(0.0, (t - m.b) / m.k)) for m, c in zip(models, caps, strict=True))

    lo, hi = 0.0, 1.0
    while held(hi) < total:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if held(mid) >= total else (mid, hi)
    return hi


def test_equal_finish_time_with_caps_and_late_starters_matches_bisection() -> None:
    # the sweep reaches F before its last event (a cap binds, a node with a large b never
    # starts): T* must still solve sum_d clip((T - b_d) / k_d, 0, cap_d) = F
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 6))
        models = [
            TimeModel(float(rng.uniform(0.05, 5.0)), float(rng.choice([0.0, 1.0, 50.0])))
            for _ in range(n)
        ]
        caps = [float(rng.choice([math.inf, 3.0, 20.0])) for _ in range(n)]
        total = int(rng.integers(1, 40))
        if sum(min(c, total) for c in caps) < total:
            continue
        want = _bisect_equal_finish(total, models, caps)
        assert _equal_finish_time(total, models, caps) == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_optimal_rounds_down_from_the_continuous_optimum() -> None:
    # F = 3, k = (0.5, 2, 2): T* = 1 gives (2, 0.5, 0.5); rounding each up to (2, 1, 1) and
    # taking one back leaves makespan 2, but the optimum (by enumeration) is (3, 0, 0) at 1.5
    models = [TimeModel(0.5, 0.0), TimeModel(2.0, 0.0), TimeModel(2.0, 0.0)]
    alloc = rebalance([1, 1, 1], models, method="optimal")
    assert alloc.makespan == brute_makespan(3, models, [math.inf] * 3) == 1.5
    assert alloc.samples == (3, 0, 0)


def test_fit_follows_the_latest_observations() -> None:
    # the "dynamic" time model: only the latest MAX_POINTS count; the node got twice as slow
    old = [(float(load), 1.0 * load + 2.0) for load in range(1, MAX_POINTS + 1)]
    new = [(float(load), 2.0 * load + 3.0) for load in range(1, MAX_POINTS + 1)]
    fitted = fit_time_model(old + new)
    assert fitted == TimeModel(2.0, 3.0)
