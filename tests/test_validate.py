"""flower_edge.validate and flower_edge.arrays: every branch, messages asserted."""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from flower_edge.arrays import cast_like
from flower_edge.errors import ConfigError, InputError
from flower_edge.validate import (
    boolean,
    choice,
    describe_range,
    from_text,
    integer,
    number,
    numbers,
    probability,
    text,
)


@pytest.mark.parametrize(
    ("low", "high", "low_inc", "high_inc", "expected"),
    [
        (0.0, 1.0, True, True, "in [0, 1]"),
        (0.0, 1.0, False, True, "in (0, 1]"),
        (0.0, 1.0, True, False, "in [0, 1)"),
        (1, 65536, True, True, "in [1, 65536]"),
        (0.0, None, True, True, ">= 0"),
        (0.0, None, False, True, "> 0"),
        (None, 1.5, True, True, "<= 1.5"),
        (None, 1e-6, True, False, "< 1e-06"),
        (None, None, True, True, ""),
    ],
)
def test_describe_range(
    low: float | None, high: float | None, low_inc: bool, high_inc: bool, expected: str
) -> None:
    assert describe_range(low, high, low_inclusive=low_inc, high_inclusive=high_inc) == expected


def _brute_inside(value: float, low: float | None, high: float | None, li: bool, hi: bool) -> bool:
    """Reference: the range as a set membership written out case by case."""
    ok_low = low is None or (value >= low if li else value > low)
    ok_high = high is None or (value <= high if hi else value < high)
    return ok_low and ok_high


@pytest.mark.parametrize("li", [True, False])
@pytest.mark.parametrize("hi", [True, False])
@pytest.mark.parametrize("low", [None, 0.0, 1.0])
@pytest.mark.parametrize("high", [None, 1.0, 2.0])
def test_number_range_against_brute_force(
    li: bool, hi: bool, low: float | None, high: float | None
) -> None:
    for value in (-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0):
        kwargs: dict[str, Any] = {
            "low": low,
            "high": high,
            "low_inclusive": li,
            "high_inclusive": hi,
        }
        if _brute_inside(value, low, high, li, hi):
            assert number("x", value, **kwargs) == value
        else:
            bounds = describe_range(low, high, low_inclusive=li, high_inclusive=hi)
            with pytest.raises(ConfigError) as info:
                number("x", value, **kwargs)
            assert str(info.value) == f"x must be {bounds}, got {value!r}"


def test_number_returns_float_and_accepts_numpy() -> None:
    assert number("n", 3) == 3.0
    assert isinstance(number("n", 3), float)
    assert number("n", np.float32(0.5)) == 0.5
    assert number("n", np.int64(2), low=0) == 2.0
    assert number("n", math.inf, finite=False, low=0) == math.inf


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (True, {"low": 0.0, "low_inclusive": False}, "lr must be a finite number > 0, got True"),
        ("1", {}, "lr must be a finite number, got '1'"),
        (None, {}, "lr must be a finite number, got None"),
        (math.nan, {"low": 0.0}, "lr must be a finite number >= 0, got nan"),
        (math.inf, {"high": 1.0}, "lr must be a finite number <= 1, got inf"),
        (math.nan, {"finite": False}, "lr must be a number, got nan"),
        (-1.0, {"low": 0.0, "low_inclusive": False}, "lr must be > 0, got -1.0"),
        (1.0, {"low": 0.0, "high": 1.0, "high_inclusive": False}, r"lr must be in [0, 1), got 1.0"),
        (-math.inf, {"finite": False, "low": 0.0}, "lr must be >= 0, got -inf"),
    ],
)
def test_number_messages(value: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        number("lr", value, **kwargs)
    assert str(info.value) == message


def test_number_none_and_error_class() -> None:
    assert number("x", None, allow_none=True) is None
    assert number("x", 2.0, allow_none=True, low=0) == 2.0
    with pytest.raises(InputError) as info:
        number("x", -1, low=0, error=InputError)
    assert type(info.value) is InputError


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, {"low": 1}, "k must be an integer >= 1, got 0"),
        (1.5, {"low": 0}, "k must be an integer >= 0, got 1.5"),
        (2.0, {}, "k must be an integer, got 2.0"),
        (True, {"low": 0}, "k must be an integer >= 0, got True"),
        ("3", {"low": 0}, "k must be an integer >= 0, got '3'"),
        (4, {"low": 0, "high": 3}, "k must be an integer in [0, 3], got 4"),
        (None, {"high": 3}, "k must be an integer <= 3, got None"),
    ],
)
def test_integer_messages(value: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        integer("k", value, **kwargs)
    assert str(info.value) == message


def test_integer_accepts() -> None:
    assert integer("k", 0, low=0) == 0
    assert integer("k", 3, low=0, high=3) == 3
    got = integer("k", np.int32(7))
    assert got == 7
    assert type(got) is int
    assert integer("k", None, allow_none=True) is None
    with pytest.raises(ConfigError):
        integer("k", None)


def test_probability() -> None:
    assert probability("p", 0) == 0.0
    assert probability("p", 1) == 1.0
    with pytest.raises(ConfigError, match=r"^p must be in \(0, 1\], got 0$"):
        probability("p", 0, allow_zero=False)
    with pytest.raises(ConfigError, match=r"^p must be in \[0, 1\), got 1$"):
        probability("p", 1, allow_one=False)
    with pytest.raises(InputError, match=r"^p must be a finite number in \[0, 1\], got 'a'$"):
        probability("p", "a", error=InputError)


def test_choice() -> None:
    assert choice("mode", "full", ("quick", "full")) == "full"
    with pytest.raises(ConfigError) as info:
        choice("mode", "slow", ["quick", "full"])
    assert str(info.value) == "mode must be one of quick, full, got 'slow'"
    with pytest.raises(ConfigError, match="got 3"):
        choice("mode", 3, ("quick",))


def test_boolean() -> None:
    assert boolean("flag", True) is True
    assert boolean("flag", np.bool_(False)) is False
    for bad in (0, 1, "true", None):
        with pytest.raises(ConfigError) as info:
            boolean("flag", bad)
        assert str(info.value) == f"flag must be a boolean (True or False), got {bad!r}"


def test_text() -> None:
    assert text("key", "a") == "a"
    assert text("key", "", allow_empty=True) == ""
    with pytest.raises(ConfigError, match="^key must be a non-empty string, got ''$"):
        text("key", "")
    with pytest.raises(ConfigError, match="^key must be a string, got 3$"):
        text("key", 3, allow_empty=True)


@pytest.mark.parametrize(
    ("ref_dtype", "values", "expected"),
    [
        (np.float32, [0.25, 1.5], [0.25, 1.5]),
        (np.int64, [0.5, 1.5, 2.4, -0.6], [0, 2, 2, -1]),
        (np.bool_, [0.2, 0.9], [False, True]),
        (np.uint8, [3.5, 254.6], [4, 255]),
    ],
)
def test_cast_like(ref_dtype: Any, values: list[float], expected: list[Any]) -> None:
    ref = np.zeros(len(values), dtype=ref_dtype)
    out = cast_like(np.asarray(values, dtype=np.float64), ref)
    assert out.dtype == ref.dtype
    assert out.tolist() == expected


def test_cast_like_does_not_copy_matching_float() -> None:
    values = np.ones(3)
    assert cast_like(values, np.zeros(3)) is values


def test_numbers_names_the_first_bad_entry_like_number() -> None:
    ok = numbers("r", [0.0, 0.5, 1.0], low=0.0, high=1.0)
    assert ok.dtype == np.float64
    assert ok.tolist() == [0.0, 0.5, 1.0]
    cases: list[tuple[Any, str]] = [
        ([0.5, 1.5, -1.0], "r[1] must be in [0, 1], got 1.5"),
        ([0.1, math.nan], "r[1] must be a finite number in [0, 1], got nan"),
        ([0.5, "a"], "r[1] must be a finite number in [0, 1], got 'a'"),
        ([0.5, None], "r[1] must be a finite number in [0, 1], got None"),
        ([True], "r[0] must be a finite number in [0, 1], got True"),
    ]
    for values, message in cases:
        with pytest.raises(InputError) as info:
            numbers("r", values, low=0.0, high=1.0, error=InputError)
        assert str(info.value) == message


def test_numbers_matrix_with_column_names_against_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        arr = rng.uniform(-0.2, 2.0, size=(3, 2))
        bad = [(i, j) for i in range(3) for j in range(2) if not arr[i, j] > 0.0]
        if not bad:
            assert numbers("e", arr, low=0.0, low_inclusive=False).tolist() == arr.tolist()
            continue
        i, j = bad[0]
        col = ("cpu", "gpu")[j]
        with pytest.raises(ConfigError) as info:
            numbers("e", arr, low=0.0, low_inclusive=False, columns=("cpu", "gpu"))
        assert str(info.value) == f"e[{i}][{col!r}] must be > 0, got {float(arr[i, j])!r}"


@pytest.mark.parametrize(
    ("text", "kind", "check", "message"),
    [
        ("many", int, {"low": 1, "high": 100}, "--x must be an integer in [1, 100], got 'many'"),
        ("-5", int, {"low": 0}, "--x must be an integer >= 0, got -5"),
        ("2.5", int, {}, "--x must be an integer, got '2.5'"),
        ("half", float, {"low": 0.0}, "--x must be a finite number >= 0, got 'half'"),
        ("nan", float, {"low": 0.0}, "--x must be a finite number >= 0, got nan"),
        ("0", float, {"low": 0.0, "low_inclusive": False}, "--x must be > 0, got 0.0"),
    ],
)
def test_from_text_lets_the_checks_report_the_text_received(
    text: str, kind: type[int] | type[float], check: dict[str, Any], message: str
) -> None:
    check_fn: Any = integer if kind is int else number
    with pytest.raises(ConfigError) as info:
        check_fn("--x", from_text(text, kind), **check)
    assert str(info.value) == message


def test_from_text_converts() -> None:
    assert from_text("7", int) == 7
    assert from_text("0.25", float) == 0.25
    assert from_text("x", float) == "x"


def test_importing_validate_does_not_import_numpy() -> None:
    code = "import sys, flower_edge.validate; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_an_int_beyond_the_float_range_is_out_of_range_not_an_overflow() -> None:
    # float(10**400) raised OverflowError, e.g. from a client's profile report
    huge = 10**400
    with pytest.raises(ConfigError, match="x must be a finite number, got 1000"):
        number("x", huge)
    with pytest.raises(InputError, match=r"x must be a finite number in \[0, 1\]"):
        probability("x", -huge, error=InputError)
    with pytest.raises(ConfigError, match=r"x\[1\] must be a finite number"):
        numbers("x", [1, huge])
    assert number("x", huge, finite=False) == math.inf
    with pytest.raises(ConfigError, match="x must be >= 0"):
        number("x", -huge, finite=False, low=0)
