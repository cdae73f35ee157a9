"""The seed-001 abandon rule against hand-computed cases."""

import pytest

from flower_edge.decision import DEFAULT_VALUE, Decision, decide, node_value
from flower_edge.errors import InputError

# (node, ids, values, last_known) -> (value, participated), worked out by hand
VALUE_CASES = [
    # first round: no results yet, never valued -> the documented default
    (5, [], [], None, (DEFAULT_VALUE, False)),
    # took part in the last aggregation -> its value there
    (5, [3, 5, 9], [0.2, 0.5, 0.3], 0.1, (0.5, True)),
    # missed the last aggregation -> its latest known value
    (5, [3, 9], [0.4, 0.6], 0.25, (0.25, False)),
    # missed it and never valued before -> default
    (5, [3, 9], [0.4, 0.6], None, (0.0, False)),
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


def test_first_round_decision_rests_on_resources_alone() -> None:
    value, participated = node_value(11, [], [], None)
    d = decide(0.5, 0.4, 0.9, value, participated)
    assert d == Decision(score=0.45, abandon=True, value=0.0, resource=0.9, participated=False)


def test_node_that_missed_the_aggregation_uses_its_last_value() -> None:
    value, participated = node_value(2, [1, 3], [0.5, 0.5], 0.8)
    d = decide(0.5, 0.6, 0.3, value, participated)
    assert d.score == pytest.approx(0.55)
    assert not d.abandon
    assert not d.participated


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-0.1, 0.5, 0.5, 0.5), r"alpha must be a number in \[0, 1\], got -0.1"),
        ((1.5, 0.5, 0.5, 0.5), r"alpha must be a number in \[0, 1\]"),
        ((0.5, -1.0, 0.5, 0.5), r"theta must be a number >= 0"),
        ((0.5, float("nan"), 0.5, 0.5), r"theta must be a number >= 0"),
        ((0.5, 0.5, 1.2, 0.5), r"resource must be a number in \[0, 1\], got 1.2"),
        ((0.5, 0.5, 0.5, -0.01), r"value must be a number in \[0, 1\]"),
        ((0.5, 0.5, float("nan"), 0.5), r"resource must be a number in \[0, 1\]"),
        ((True, 0.5, 0.5, 0.5), r"alpha must be a number"),
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
    with pytest.raises(InputError, match=r"every entry of values must be a number in \[0, 1\]"):
        node_value(1, [1], [1.5], None)
    with pytest.raises(InputError, match=r"last known value must be a number in \[0, 1\]"):
        node_value(1, [], [], 2.0)
