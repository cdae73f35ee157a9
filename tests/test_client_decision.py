"""The seed-001 abandon rule against hand-computed cases and brute-force references."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.decision import (
    NEUTRAL_VALUE,
    Decision,
    decide,
    derive_theta,
    linear_resources,
    neutral_value,
    node_value,
)
from flower_edge.errors import InputError
from flower_edge.radar import match_ratios

# (node, ids, values, last_known) -> (value, participated), worked out by hand
VALUE_CASES = [
    # first round: no results yet, never valued -> the neutral value
    (5, [], [], None, (NEUTRAL_VALUE, False)),
    # took part in the last aggregation -> its value there
    (5, [3, 5, 9], [0.2, 0.5, 0.3], 0.1, (0.5, True)),
    # missed the last aggregation -> its latest known value
    (5, [3, 9], [0.4, 0.6], 0.25, (0.25, False)),
    # missed it and never valued before -> neutral: the mean of the latest values
    (5, [3, 9], [0.4, 0.6], None, (0.5, False)),
    (5, [1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], None, (0.25, False)),
    # a value of exactly 0 in the results is a value, not "absent"
    (5, [5], [0.0], 0.7, (0.0, True)),
]


@pytest.mark.parametrize(("node", "ids", "values", "last", "expected"), VALUE_CASES)
def test_node_value_table(
    node: int, ids: list[int], values: list[float], last: float | None, expected: tuple
) -> None:
    assert node_value(node, ids, values, last) == expected


# (alpha, theta, R, V) -> (score, abandon), by hand
DECIDE_CASES = [
    (0.5, 0.6, 0.8, 0.4, 0.6, True),  # score == theta abandons (>=)
    (0.5, 0.6, 0.8, 0.2, 0.5, False),
    (0.0, 0.3, 1.0, 0.25, 0.25, False),  # alpha = 0: value only
    (0.0, 0.25, 0.0, 0.25, 0.25, True),  # alpha = 0, tie
    (1.0, 0.5, 0.5, 0.0, 0.5, True),  # alpha = 1: resources only, tie
    (1.0, 0.5, 0.49, 1.0, 0.49, False),  # alpha = 1 ignores a high value
    (0.25, 0.7, 0.4, 0.9, 0.25 * 0.4 + 0.75 * 0.9, True),  # 0.775
    (0.3, 0.0, 0.0, 0.0, 0.0, True),  # theta = 0 always abandons
    (0.3, float("inf"), 1.0, 1.0, 1.0, False),  # theta = inf never does
    (0.2, 0.62, 0.3, 0.7, 0.62, True),  # 0.2*0.3 + 0.8*0.7 rounds to 0.6199999999999999: a tie
]


@pytest.mark.parametrize(("alpha", "theta", "r", "v", "score", "abandon"), DECIDE_CASES)
def test_decide_table(
    alpha: float, theta: float, r: float, v: float, score: float, abandon: bool
) -> None:
    d = decide(alpha, theta, r, v)
    assert d.score == pytest.approx(score, abs=1e-12)
    assert d.abandon is abandon
    assert (d.value, d.resource, d.participated) == (v, r, True)


def test_first_round_decision_uses_the_neutral_value() -> None:
    value, participated = node_value(11, [], [], None)
    d = decide(0.5, 0.6, 0.9, value, participated)
    assert d == Decision(score=0.7, abandon=True, value=0.5, resource=0.9, participated=False)


def test_explicit_default_value() -> None:
    assert node_value(3, [1, 2], [0.5, 0.5], None, default=0.0) == (0.0, False)


def test_node_that_missed_the_aggregation_uses_its_last_value() -> None:
    value, participated = node_value(2, [1, 3], [0.5, 0.5], 0.8)
    d = decide(0.5, 0.6, 0.3, value, participated)
    assert d.score == pytest.approx(0.55)
    assert not d.abandon
    assert not d.participated


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-0.1, 0.5, 0.5, 0.5), r"alpha must be .*in \[0, 1\], got -0.1"),
        ((1.5, 0.5, 0.5, 0.5), r"alpha must be .*in \[0, 1\]"),
        ((0.5, -1.0, 0.5, 0.5), r"theta must be (a number )?>= 0"),
        ((0.5, float("nan"), 0.5, 0.5), r"theta must be (a number )?>= 0"),
        ((0.5, 0.5, 1.2, 0.5), r"resource must be .*in \[0, 1\], got 1.2"),
        ((0.5, 0.5, 0.5, -0.01), r"value must be .*in \[0, 1\]"),
        ((0.5, 0.5, float("nan"), 0.5), r"resource must be .*in \[0, 1\]"),
        ((True, 0.5, 0.5, 0.5), r"alpha must be a finite number"),
    ],
)
def test_decide_rejects_out_of_range(args: tuple, match: str) -> None:
    with pytest.raises(InputError, match=match):
        decide(*args)


def test_node_value_rejects_bad_results() -> None:
    with pytest.raises(InputError, match="same length, got 2 and 1"):
        node_value(1, [1, 2], [0.5], None)
    with pytest.raises(InputError, match="must not repeat a node id"):
        node_value(1, [1, 1], [0.5, 0.5], None)
    with pytest.raises(InputError, match=r"every entry of values must be .*in \[0, 1\]"):
        node_value(1, [1], [1.5], None)
    with pytest.raises(InputError, match=r"last known value must be .*in \[0, 1\]"):
        node_value(1, [], [], 2.0)


# ---------------------------------------------------------------- neutral value


def test_neutral_value_is_the_mean_of_the_latest_values() -> None:
    assert neutral_value([]) == NEUTRAL_VALUE
    assert neutral_value([1.0]) == 1.0
    # K + 1 = 5 participants whose values sum to 1: 1 / (K + 1)
    assert neutral_value([0.1, 0.3, 0.2, 0.15, 0.25]) == pytest.approx(0.2)
    with pytest.raises(InputError, match=r"every entry of values must be .*in \[0, 1\]"):
        neutral_value([0.5, -0.1])


# ---------------------------------------------------------------- linear resource scale


def test_linear_resources_by_hand() -> None:
    r = linear_resources([0.04, 0.16, 0.01, 0.0])
    np.testing.assert_allclose(r, [0.5, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(linear_resources([0.0, 0.0]), [1.0, 1.0])


@settings(max_examples=60, deadline=None)
@given(
    best=st.lists(st.floats(0.05, 10.0), min_size=4, max_size=4),
    scale=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
    p_c=st.floats(0.05, 0.95),
    drop=st.booleans(),
)
def test_linear_resource_of_a_scaled_copy_is_its_scale(
    best: list[float], scale: list[float], p_c: float, drop: bool
) -> None:
    """Brute force: a node with c times the best node's scores on every axis has R = c.

    Its polygon on the distorted radar is the best node's scaled by c, so its area (the
    match ratio) is c^2 times the best node's, whatever the chart; R undoes the square.
    """
    evaluations = np.array([best] + [[c * b for b in best] for c in scale])
    ratios = match_ratios(evaluations, p_c, drop_empty_axes=drop)
    np.testing.assert_allclose(linear_resources(ratios), [1.0, *scale], atol=1e-9)


def test_linear_resources_rejects_bad_ratios() -> None:
    with pytest.raises(InputError, match="node list is empty"):
        linear_resources([])
    with pytest.raises(InputError, match=r"match_ratios\[1\] must be .*in \[0, 1\]"):
        linear_resources([0.2, 1.5])
    with pytest.raises(InputError, match=r"match_ratios\[0\] must be .*in \[0, 1\]"):
        linear_resources([float("nan")])


# ---------------------------------------------------------------- derived theta


def _quantile_by_hand(scores: list[float], q: float) -> float:
    """Linear interpolation between order statistics, written out."""
    s = sorted(scores)
    h = q * (len(s) - 1)
    j = math.floor(h)
    if j + 1 >= len(s):
        return s[-1]
    return s[j] + (h - j) * (s[j + 1] - s[j])


def test_derive_theta_by_hand() -> None:
    # scores 0.5*R + 0.5*V: 0.3, 0.5, 0.7 -> median 0.5
    assert derive_theta([0.4, 0.8, 1.0], [0.2, 0.2, 0.4]) == pytest.approx(0.5)
    # alpha = 1: resources only; quantile 0.25 of [0.2, 0.4, 0.6, 0.8] = 0.35
    assert derive_theta([0.8, 0.2, 0.6, 0.4], [0, 0, 0, 0], 1.0, 0.25) == pytest.approx(0.35)
    assert derive_theta([0.3], [0.1], 0.5, 0.9) == pytest.approx(0.2)


@settings(max_examples=80, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30),
    alpha=st.floats(0, 1),
    q=st.floats(0, 1),
)
def test_derive_theta_against_brute_force(
    pairs: list[tuple[float, float]], alpha: float, q: float
) -> None:
    r, v = [p[0] for p in pairs], [p[1] for p in pairs]
    scores = [alpha * a + (1 - alpha) * b for a, b in pairs]
    theta = derive_theta(r, v, alpha, q)
    assert theta == pytest.approx(_quantile_by_hand(scores, q), abs=1e-12)
    # the rule can act: the best-scoring node always abandons, and at least a fraction
    # 1 - q of the nodes do (fewer only through ties that rounding breaks)
    decisions = [decide(alpha, theta, a, b).abandon for a, b in pairs]
    assert decisions[int(np.argmax(scores))]
    n = len(pairs)
    assert sum(decisions) >= math.floor((1 - q) * (n - 1)) + 1 - sum(
        1 for s in scores if math.isclose(s, theta, rel_tol=1e-9, abs_tol=1e-12)
    )


def test_median_theta_lets_half_of_a_measured_population_abandon() -> None:
    """The issue's failure: with theta = 0.6 nothing fires; the derived theta does."""
    rng = np.random.default_rng(0)
    ratios = rng.uniform(0.01, 0.2, size=20)  # match ratios as measured (median 0.02-0.13)
    values = rng.dirichlet(np.ones(5))  # the last aggregation's K + 1 = 5 participants
    resources = linear_resources(ratios)
    v = [float(values[i]) if i < 5 else neutral_value(list(values)) for i in range(20)]
    fixed = [decide(0.5, 0.6, float(a), b).abandon for a, b in zip(resources, v, strict=True)]
    theta = derive_theta(resources, v)
    live = [decide(0.5, theta, float(a), b).abandon for a, b in zip(resources, v, strict=True)]
    assert sum(live) == 10
    assert sum(fixed) < sum(live)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([], []), "must be non-empty and of the same length, got 0 and 0"),
        (([0.5], [0.5, 0.5]), "same length, got 1 and 2"),
        (([1.5], [0.5]), r"resources\[0\] must be .*in \[0, 1\], got 1.5"),
        (([0.5], [-1.0]), r"values\[0\] must be .*in \[0, 1\]"),
        (([0.5], [0.5], 2.0), r"alpha must be .*in \[0, 1\]"),
        (([0.5], [0.5], 0.5, -0.1), r"quantile must be .*in \[0, 1\]"),
    ],
)
def test_derive_theta_rejects_bad_input(args: tuple, match: str) -> None:
    with pytest.raises(InputError, match=match):
        derive_theta(*args)


def test_every_permutation_gives_the_same_theta() -> None:
    r, v = [0.1, 0.9, 0.5, 0.7], [0.3, 0.1, 0.2, 0.4]
    thetas = {
        derive_theta([r[i] for i in p], [v[i] for i in p]) for p in itertools.permutations(range(4))
    }
    assert len(thetas) == 1
