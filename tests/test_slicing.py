"""The slice budget chosen from the runtime's per-message overhead (flower_edge.slicing)."""

from __future__ import annotations

import itertools

import pytest

from flower_edge.errors import ConfigError, InputError
from flower_edge.slicing import (
    DEFAULT_FACTOR,
    message_overhead,
    overhead_share,
    slice_budget_for_overhead,
)


@pytest.mark.parametrize(
    ("overhead", "factor", "floor", "expected"),
    [
        (0.0, 10.0, 1.0, 1.0),  # no overhead: the floor
        (0.05, 10.0, 1.0, 1.0),  # 10 x 0.05 = 0.5 < floor
        (0.1, 10.0, 1.0, 1.0),  # the switch point
        (0.3, 10.0, 1.0, 3.0),
        (3.0, 10.0, 1.0, 30.0),  # ~3 s per message on Flower's deployment runtime
        (3.0, 4.0, 0.5, 12.0),
    ],
)
def test_slice_is_the_larger_of_floor_and_factor_times_overhead(
    overhead: float, factor: float, floor: float, expected: float
) -> None:
    assert slice_budget_for_overhead(overhead, factor=factor, floor=floor) == pytest.approx(
        expected
    )


def test_overhead_share_stays_within_the_bound_the_factor_promises() -> None:
    # brute force over a grid: the chosen slice never spends more than 1 / (1 + c) on overhead,
    # and where the factor (not the floor) decides, it spends exactly that
    for o, c, f in itertools.product([0.0, 0.01, 0.2, 1.0, 3.0, 17.0], [1, 4, 10], [0.1, 1, 5]):
        s = slice_budget_for_overhead(o, factor=c, floor=f)
        share = overhead_share(s, o)
        assert share <= 1 / (1 + c) + 1e-12
        if c * o > f:
            assert share == pytest.approx(1 / (1 + c))


def test_overhead_share_is_overhead_over_slice_plus_overhead() -> None:
    assert overhead_share(30.0, 3.0) == pytest.approx(3.0 / 33.0)
    assert overhead_share(1.0, 0.0) == 0.0
    assert DEFAULT_FACTOR == 10.0


def test_message_overhead_is_the_median_gap() -> None:
    rtt = [4.0, 3.5, 30.0, 3.2, 3.4]  # one straggler does not move the median
    work = [1.0, 0.5, 1.0, 0.2, 0.4]
    gaps = sorted(r - w for r, w in zip(rtt, work, strict=True))
    assert message_overhead(rtt, work) == pytest.approx(gaps[len(gaps) // 2])
    assert message_overhead([1.0, 2.0], [0.0, 0.0]) == pytest.approx(1.5)


def test_message_overhead_is_never_negative() -> None:
    assert message_overhead([1.0], [1.2]) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"overhead": -1.0}, r"overhead must be >= 0, got -1.0"),
        ({"overhead": float("nan")}, r"overhead must be a finite number >= 0"),
        ({"overhead": 1.0, "factor": 0.0}, r"factor must be > 0, got 0.0"),
        ({"overhead": 1.0, "floor": -2.0}, r"floor must be > 0, got -2.0"),
        ({"overhead": True}, r"overhead must be a finite number >= 0, got True"),
    ],
)
def test_bad_settings_name_the_field_and_range(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        slice_budget_for_overhead(**kwargs)


def test_bad_measurements_are_input_errors() -> None:
    with pytest.raises(InputError, match="same length, got 2 and 1"):
        message_overhead([1.0, 2.0], [0.5])
    with pytest.raises(InputError, match="at least one message"):
        message_overhead([], [])
    with pytest.raises(InputError, match=r"compute\[1\] must be >= 0, got -0.5"):
        message_overhead([1.0, 2.0], [0.5, -0.5])
