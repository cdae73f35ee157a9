"""Distorted radar chart and match ratio (seed 000, formula 6) against hand and brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from flower_edge.errors import InputError
from flower_edge.radar import (
    AXES,
    match_ratios,
    polygon_area,
    radar_chart,
    standardise,
)


def closed_form(s: np.ndarray, p_c: float) -> np.ndarray:
    """DESIGN.md step 6, all four axes present and p_c + p_m = 1."""
    p_m = 1 - p_c
    c, g, m, d = s.T
    out: np.ndarray = p_c**2 * c * g + p_c * p_m * (g * m + d * c) + p_m**2 * m * d
    return out


def shoelace_ratio(scores: np.ndarray, lengths: list[float], order: list[int]) -> np.ndarray:
    """Polygon area over chart area with the axes in ``order``, evenly spread (k >= 3)."""
    k = len(order)
    angles = [2 * math.pi * i / k for i in range(k)]
    chart = polygon_area([lengths[j] for j in order], angles)
    return np.array(
        [polygon_area([row[j] * lengths[j] for j in order], angles) / chart for row in scores]
    )


def test_axes_in_seed_order() -> None:
    assert AXES == ("cpu", "gpu", "memory", "disk")


def test_standardise_by_hand() -> None:
    ev = [[2.0, 0.0, 10.0, 1.0], [4.0, 0.0, 5.0, 3.0]]
    expected = [[0.5, 0.0, 1.0, 1 / 3], [1.0, 0.0, 0.5, 1.0]]
    np.testing.assert_allclose(standardise(ev), expected)


def test_match_ratio_by_hand() -> None:
    # node 0 has the best of every axis: m = 1; node 1 halves everything: m = 1/4
    ev = [[4.0, 2.0, 8.0, 6.0], [2.0, 1.0, 4.0, 3.0]]
    np.testing.assert_allclose(match_ratios(ev, 0.7), [1.0, 0.25])
    # p_c = 0.5, s = (1, 0.5, 0.5, 1): 0.25*0.5 + 0.25*(0.25 + 1) + 0.25*0.5 = 0.5625
    ev = [[2.0, 1.0, 1.0, 2.0], [2.0, 2.0, 2.0, 2.0]]
    assert match_ratios(ev, 0.5)[0] == pytest.approx(0.5625)


@pytest.mark.parametrize("seed", range(5))
def test_four_axes_match_closed_form_and_shoelace(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ev = rng.uniform(0.01, 10.0, size=(7, 4))
    p_c = float(rng.uniform(0.05, 0.95))
    got = match_ratios(ev, p_c)
    s = standardise(ev)
    np.testing.assert_allclose(got, closed_form(s, p_c), rtol=1e-12)
    np.testing.assert_allclose(got, shoelace_ratio(s, [p_c, p_c, 1 - p_c, 1 - p_c], [0, 1, 2, 3]))


def test_chart_geometry_four_axes_ninety_degrees() -> None:
    chart = radar_chart(np.ones((2, 4)), 0.3)
    assert chart.axes == AXES
    assert chart.lengths == pytest.approx((0.3, 0.3, 0.7, 0.7))
    diffs = np.diff(chart.angles)
    np.testing.assert_allclose(np.abs(diffs), math.pi / 2)
    # total area of the distorted chart: (p_c + p_m)^2 / 2 = 1/2 at 90 degrees
    assert polygon_area(chart.lengths, chart.angles) == pytest.approx(0.5)


def test_axis_without_any_score_is_left_out_on_request_and_the_rest_form_a_triangle() -> None:
    rng = np.random.default_rng(11)
    ev = rng.uniform(0.1, 5.0, size=(6, 4))
    ev[:, 1] = 0.0  # no GPU anywhere
    p_c = 0.4
    chart = radar_chart(ev, p_c, drop_empty_axes=True)
    assert chart.axes == ("cpu", "memory", "disk")
    np.testing.assert_allclose(np.abs(np.diff(chart.angles)), 2 * math.pi / 3)
    s = standardise(ev)
    reference = shoelace_ratio(s, [p_c, p_c, 1 - p_c, 1 - p_c], [0, 2, 3])
    np.testing.assert_allclose(match_ratios(ev, p_c, drop_empty_axes=True), reference)
    # by hand: the C-M, M-D, D-C pairs only
    c, m, d = s[:, 0], s[:, 2], s[:, 3]
    by_hand = (p_c * 0.6 * c * m + 0.36 * m * d + 0.6 * p_c * d * c) / (2 * p_c * 0.6 + 0.36)
    np.testing.assert_allclose(match_ratios(ev, p_c, drop_empty_axes=True), by_hand)


def test_axis_without_any_score_stays_in_the_chart_by_default() -> None:
    """The seed's chart has four axes: no GPU anywhere puts every node at 0 on G."""
    rng = np.random.default_rng(11)
    ev = rng.uniform(0.1, 5.0, size=(6, 4))
    ev[:, 1] = 0.0
    p_c = 0.4
    chart = radar_chart(ev, p_c)
    assert chart.axes == AXES
    np.testing.assert_allclose(np.abs(np.diff(chart.angles)), math.pi / 2)
    s = standardise(ev)
    reference = shoelace_ratio(s, [p_c, p_c, 1 - p_c, 1 - p_c], [0, 1, 2, 3])
    np.testing.assert_allclose(match_ratios(ev, p_c), reference)
    np.testing.assert_allclose(match_ratios(ev, p_c), closed_form(s, p_c))


def test_two_gpu_less_nodes_split_70_30_on_four_axes_and_63_37_on_three() -> None:
    """The issue's example: dropping the empty G axis changes the shares."""
    from flower_edge.allocation import initial_shares

    ev = [[1.0, 0.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.43]]
    four = match_ratios(ev, 0.4)
    three = match_ratios(ev, 0.4, drop_empty_axes=True)
    # by hand, p_c = 0.4, p_m = 0.6: four axes m = p_c p_m s_D s_C + p_m^2 s_M s_D
    np.testing.assert_allclose(four, [0.24 + 0.36, 0.24 * 0.43 + 0.36 * 0.43])
    # three axes (C, M, D): (0.24 s_C s_M + 0.36 s_M s_D + 0.24 s_D s_C) / 0.84
    np.testing.assert_allclose(three, [1.0, (0.24 + 0.36 * 0.43 + 0.24 * 0.43) / 0.84])
    assert initial_shares(100, list(four)) == (70, 30)
    assert initial_shares(100, list(three)) == (63, 37)


def test_two_axes_form_a_right_triangle() -> None:
    # p_c = 0: compute axes have length 0 and are left out; M and D remain, m = s_M * s_D
    ev = [[5.0, 1.0, 2.0, 4.0], [1.0, 1.0, 4.0, 1.0]]
    chart = radar_chart(ev, 0.0)
    assert chart.axes == ("memory", "disk")
    assert abs(chart.angles[0] - chart.angles[1]) == pytest.approx(math.pi / 2)
    np.testing.assert_allclose(match_ratios(ev, 0.0), [0.5 * 1.0, 1.0 * 0.25])
    np.testing.assert_allclose(match_ratios(ev, 0.0, order_invariant=True), [0.5, 0.25])


def test_single_axis_is_a_length_ratio() -> None:
    ev = [[3.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    assert radar_chart(ev, 0.5, drop_empty_axes=True).axes == ("cpu",)
    np.testing.assert_allclose(match_ratios(ev, 0.5, drop_empty_axes=True), [1.0, 1 / 3])
    # on the seed's four axes a score on one axis alone spans no area
    np.testing.assert_allclose(match_ratios(ev, 0.5), [0.0, 0.0])


@pytest.mark.parametrize("gpu", [True, False])
def test_order_invariant_is_mean_over_all_axis_orders(gpu: bool) -> None:
    rng = np.random.default_rng(3)
    ev = rng.uniform(0.1, 5.0, size=(5, 4))
    if not gpu:
        ev[:, 1] = 0.0
    p_c = 0.65
    lengths = [p_c, p_c, 1 - p_c, 1 - p_c]
    present = [0, 1, 2, 3] if gpu else [0, 2, 3]
    s = standardise(ev)
    angles_k = [2 * math.pi * i / len(present) for i in range(len(present))]
    node_area = np.zeros(len(ev))
    chart_area = 0.0
    for order in itertools.permutations(present):
        node_area += [polygon_area([row[j] * lengths[j] for j in order], angles_k) for row in s]
        chart_area += polygon_area([lengths[j] for j in order], angles_k)
    got = match_ratios(ev, p_c, order_invariant=True, drop_empty_axes=True)
    np.testing.assert_allclose(got, node_area / chart_area)
    # with three axes every order is the same triangle; with four it differs from the seed's
    assert np.allclose(got, match_ratios(ev, p_c, drop_empty_axes=True)) is not gpu


def test_match_ratios_in_unit_interval_and_best_node_is_one() -> None:
    rng = np.random.default_rng(5)
    ev = rng.uniform(0, 3, size=(40, 4))
    ev[7] = ev.max(axis=0)
    for invariant in (False, True):
        m = match_ratios(ev, 0.3, order_invariant=invariant)
        assert m.shape == (40,)
        assert np.all((m >= 0) & (m <= 1))
        assert m[7] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("ev", "match"),
    [
        ([[1.0, float("nan"), 1.0, 1.0]], r"evaluations\[0\]\['gpu'\] must be a finite number"),
        ([[1.0, 1.0, float("inf"), 1.0]], r"evaluations\[0\]\['memory'\] must be a finite"),
        ([[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, -2.0]], r"evaluations\[1\]\['disk'\] must be >= 0"),
        (np.zeros((0, 4)), "node list is empty"),
        ([[1.0, 2.0, 3.0]], r"shape \(n_nodes, 4\)"),
        ([[0.0, 0.0, 0.0, 0.0]], "no node scores above zero"),
    ],
)
def test_bad_evaluations(ev: object, match: str) -> None:
    with pytest.raises(InputError, match=match):
        match_ratios(ev, 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_bad_compute_share(share: float) -> None:
    with pytest.raises(InputError, match=r"compute_share must be .*in \[0, 1\]"):
        match_ratios(np.ones((2, 4)), share)


def test_only_zero_length_axes_scored_is_an_error() -> None:
    # p_c = 1 leaves only C and G, on which nobody scores
    with pytest.raises(InputError, match="no node scores above zero"):
        match_ratios([[0.0, 0.0, 1.0, 1.0]], 1.0)
