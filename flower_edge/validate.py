"""Validation of settings and inputs, written once for every layer.

Each function checks one value, returns it converted to its plain Python type, and raises
:class:`~flower_edge.errors.ConfigError` (or the class given as ``error``) with a message that
names the field, the allowed range and the value received::

    lr = number("learning_rate", lr, low=0.0, low_inclusive=False)  # float > 0
    k = integer("threshold K", k, low=1)  # int >= 1
    mode = choice("mode", mode, ("quick", "full"))

Messages
--------
- a value of the wrong type, or not finite: ``"{name} must be a finite number {range}, got
  {value!r}"`` (``"an integer {range}"`` for integers, ``"a number {range}"`` when
  ``finite=False``);
- a number outside its range: ``"{name} must be {range}, got {value!r}"``;
- an integer outside its range: ``"{name} must be an integer {range}, got {value!r}"``;
- a choice: ``"{name} must be one of a, b, c, got {value!r}"``.

``{range}`` reads ``> 0``, ``>= 0``, ``<= 1``, ``in [0, 1]`` or ``in (0, 1]``. ``bool`` is never
accepted as a number (``True`` is an ``int`` in Python). numpy scalars are accepted; numpy
itself is imported only by :func:`numbers`, so that command-line tools start fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

if TYPE_CHECKING:  # numpy is imported where an array is checked: the CLIs start without it
    import numpy as np
    import numpy.typing as npt

from flower_edge.errors import ConfigError

_T = TypeVar("_T")

__all__ = [
    "boolean",
    "choice",
    "describe_range",
    "integer",
    "number",
    "numbers",
    "from_text",
    "probability",
    "text",
    "whole",
]


def _fmt(bound: float) -> str:
    """Print a bound as the messages do: ``0`` not ``0.0``, ``0.5`` and ``1e-06`` as such."""
    if isinstance(bound, Integral):
        return str(int(bound))
    value = float(bound)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def describe_range(
    low: float | None,
    high: float | None,
    *,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> str:
    """Render an allowed range as the messages print it.

    Parameters
    ----------
    low, high : float, optional
        The bounds; ``None`` is unbounded on that side.
    low_inclusive, high_inclusive : bool (default: True)
        Whether each bound is allowed.

    Returns
    -------
    str
        ``"in [0, 1]"``, ``"in (0, 1]"``, ``">= 0"``, ``"> 0"``, ``"<= 1"``, ``"< 1"`` or
        ``""`` when both bounds are ``None``.
    """
    if low is not None and high is not None:
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        return f"in {left}{_fmt(low)}, {_fmt(high)}{right}"
    if low is not None:
        return f"{'>=' if low_inclusive else '>'} {_fmt(low)}"
    if high is not None:
        return f"{'<=' if high_inclusive else '<'} {_fmt(high)}"
    return ""


def _inside(
    value: float,
    low: float | None,
    high: float | None,
    low_inclusive: bool,
    high_inclusive: bool,
) -> bool:
    if low is not None and (value < low if low_inclusive else value <= low):
        return False
    return not (high is not None and (value > high if high_inclusive else value >= high))


def _with_range(text: str, bounds: str) -> str:
    return f"{text} {bounds}" if bounds else text


@overload
def number(
    name: str,
    value: object,
    *,
    low: float | None = ...,
    high: float | None = ...,
    low_inclusive: bool = ...,
    high_inclusive: bool = ...,
    finite: bool = ...,
    allow_none: Literal[False] = ...,
    error: type[Exception] = ...,
) -> float: ...


@overload
def number(
    name: str,
    value: object,
    *,
    low: float | None = ...,
    high: float | None = ...,
    low_inclusive: bool = ...,
    high_inclusive: bool = ...,
    finite: bool = ...,
    allow_none: bool,
    error: type[Exception] = ...,
) -> float | None: ...


def number(
    name: str,
    value: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    finite: bool = True,
    allow_none: bool = False,
    error: type[Exception] = ConfigError,
) -> float | None:
    """Check a real number and return it as a ``float``.

    Parameters
    ----------
    name : str
        The field as the user knows it (``"learning_rate"``, ``"weights[2]"``).
    value : object
        The value to check: an ``int``, ``float`` or numpy scalar, not a ``bool``.
    low, high : float, optional
        Bounds of the allowed range; ``None`` (default) is unbounded on that side.
    low_inclusive, high_inclusive : bool (default: True)
        Whether each bound itself is allowed.
    finite : bool (default: True)
        Reject NaN and +-Inf. With ``False`` only NaN is rejected (Inf still has to be in
        the range).
    allow_none : bool (default: False)
        Accept ``None`` ("not set") and return it unchanged.
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    float or None
        ``float(value)``; ``None`` when ``value`` is ``None`` and ``allow_none``.

    Raises
    ------
    InputError
        ``error`` with a message naming the field, the range and the value.
    """
    bounds = describe_range(low, high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
    if value is None and allow_none:
        return None
    kind = "a finite number" if finite else "a number"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise error(f"{_with_range(f'{name} must be {kind}', bounds)}, got {value!r}")
    try:
        out = float(value)
    except OverflowError:  # an int beyond the float range counts as infinite
        out = math.inf if value > 0 else -math.inf  # type: ignore[operator]  # an int
    if math.isnan(out) or (finite and not math.isfinite(out)):
        raise error(f"{_with_range(f'{name} must be {kind}', bounds)}, got {value!r}")
    if not _inside(out, low, high, low_inclusive, high_inclusive):
        raise error(f"{name} must be {bounds}, got {value!r}")
    return out


def numbers(
    name: str,
    values: object,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
    columns: Sequence[str] | None = None,
    error: type[Exception] = ConfigError,
) -> npt.NDArray[np.float64]:
    """Check an array of numbers at once and return it as a float64 array.

    The first bad entry (in C order) is reported exactly as :func:`number` reports a scalar,
    under the name ``{name}[i]`` (``{name}[i][j]`` for a matrix, ``{name}[i]['col']`` with
    ``columns``). The check is vectorised for numeric arrays.

    Parameters
    ----------
    name : str
        The field as the user knows it (``"resources"``).
    values : array_like
        The numbers; ``bool`` entries and strings are rejected.
    low, high : float, optional
        Bounds of the allowed range; ``None`` (default) is unbounded on that side.
    low_inclusive, high_inclusive : bool (default: True)
        Whether each bound itself is allowed.
    columns : sequence of str, optional
        Names of the last axis, printed with ``repr`` in the messages.
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    numpy.ndarray
        ``values`` as float64, same shape.
    """
    import numpy as np

    bounds: dict[str, Any] = {
        "low": low,
        "high": high,
        "low_inclusive": low_inclusive,
        "high_inclusive": high_inclusive,
        "error": error,
    }
    raw = np.asarray(values)
    if raw.dtype.kind not in "fiu":  # name the entry that is a bool, a string, None, ...
        entries = np.asarray(values, dtype=object)
        for index in np.ndindex(entries.shape):
            number(_entry_name(name, index, columns), entries[index], **bounds)
    arr = raw.astype(np.float64)
    ok = np.isfinite(arr)
    if low is not None:
        ok &= arr >= low if low_inclusive else arr > low
    if high is not None:
        ok &= arr <= high if high_inclusive else arr < high
    if not np.all(ok):
        index = tuple(int(i) for i in np.argwhere(~ok)[0])
        number(_entry_name(name, index, columns), float(arr[index]), **bounds)
    return arr


def _entry_name(name: str, index: tuple[int, ...], columns: Sequence[str] | None) -> str:
    parts = [f"[{i}]" for i in index]
    if columns is not None and index:
        parts[-1] = f"[{columns[index[-1]]!r}]"
    return name + "".join(parts)


@overload
def integer(
    name: str,
    value: object,
    *,
    low: int | None = ...,
    high: int | None = ...,
    allow_none: Literal[False] = ...,
    integral_float: bool = ...,
    error: type[Exception] = ...,
) -> int: ...


@overload
def integer(
    name: str,
    value: object,
    *,
    low: int | None = ...,
    high: int | None = ...,
    allow_none: bool,
    integral_float: bool = ...,
    error: type[Exception] = ...,
) -> int | None: ...


def integer(
    name: str,
    value: object,
    *,
    low: int | None = None,
    high: int | None = None,
    allow_none: bool = False,
    integral_float: bool = False,
    error: type[Exception] = ConfigError,
) -> int | None:
    """Check an integer (``int`` or numpy integer, not ``bool`` nor ``2.0``) in ``[low, high]``.

    Values read from JSON or TOML pass ``integral_float=True``: their writers (pandas,
    JavaScript, a TOML ``3.0``) emit whole numbers as ``400.0``, which is then taken as ``400``;
    ``400.5``, NaN and infinity are still refused.

    Parameters
    ----------
    name : str
        The field as the user knows it.
    value : object
        The value to check.
    low, high : int, optional
        Inclusive bounds; ``None`` (default) is unbounded on that side.
    allow_none : bool (default: False)
        Accept ``None`` ("not set") and return it unchanged.
    integral_float : bool (default: False)
        Accept a float that holds a whole number (``400.0``, see :func:`whole`).
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    int or None
        ``int(value)``; ``None`` when ``value`` is ``None`` and ``allow_none``.

    Raises
    ------
    InputError
        ``error`` with ``"{name} must be an integer {range}, got {value!r}"``.
    """
    if value is None and allow_none:
        return None
    bounds = describe_range(low, high)
    checked = whole(value) if integral_float else value
    if (
        isinstance(checked, bool)
        or not isinstance(checked, Integral)
        or not _inside(int(checked), low, high, True, True)
    ):  # the message shows the value as received: 1e+30, not its 31 digits
        raise error(f"{_with_range(f'{name} must be an integer', bounds)}, got {value!r}")
    return int(checked)


def whole(value: _T) -> _T | int:
    """Return a float that holds a whole number as an ``int``, anything else unchanged.

    JSON and TOML writers emit whole numbers as floats (``400.0``); :func:`integer` with
    ``integral_float=True`` takes them through this function. ``bool``, integers, ``400.5``,
    NaN and infinity come back unchanged (for :func:`integer` to refuse or accept).

    Parameters
    ----------
    value : object
        Any value; numpy floats count as floats.

    Returns
    -------
    int or type of value
        ``int(value)`` for a finite, whole float; ``value`` otherwise.
    """
    if isinstance(value, bool | Integral) or not isinstance(value, Real):
        return value
    try:
        as_float = float(value)
    except OverflowError:  # a Fraction beyond the float range
        return value
    return int(as_float) if math.isfinite(as_float) and as_float.is_integer() else value


def from_text(text: str, kind: type[int] | type[float]) -> object:
    """Convert a command-line option's text to ``kind``, or return the text when it is not one.

    Pass the result to :func:`integer` or :func:`number`, which then report text that is not a
    number as received: ``integer("--repeats", from_text(text, int), low=1)``.

    Parameters
    ----------
    text : str
        The option's text.
    kind : type
        ``int`` or ``float``.

    Returns
    -------
    object
        ``kind(text)``, or ``text`` unchanged when it does not parse.
    """
    try:
        return kind(text)
    except ValueError:
        return text


def probability(
    name: str,
    value: object,
    *,
    allow_zero: bool = True,
    allow_one: bool = True,
    error: type[Exception] = ConfigError,
) -> float:
    """Check a finite number in ``[0, 1]`` (each end optional) and return it as a ``float``.

    Parameters
    ----------
    name : str
        The field as the user knows it.
    value : object
        The value to check.
    allow_zero, allow_one : bool (default: True)
        Whether 0 and 1 are allowed (``(0, 1]``, ``[0, 1)``, ``(0, 1)``).
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    float
        ``float(value)``.
    """
    return number(
        name,
        value,
        low=0.0,
        high=1.0,
        low_inclusive=allow_zero,
        high_inclusive=allow_one,
        error=error,
    )


def choice(
    name: str,
    value: object,
    options: Iterable[str],
    *,
    error: type[Exception] = ConfigError,
) -> str:
    """Check that ``value`` is one of ``options`` and return it.

    Parameters
    ----------
    name : str
        The field as the user knows it.
    value : object
        The value to check.
    options : iterable of str
        The allowed values, in the order the message lists them.
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    str
        ``value``.

    Raises
    ------
    InputError
        ``error`` with ``"{name} must be one of a, b, c, got {value!r}"``.
    """
    allowed = tuple(options)
    if not isinstance(value, str) or value not in allowed:
        raise error(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def boolean(name: str, value: object, *, error: type[Exception] = ConfigError) -> bool:
    """Check a ``bool`` (numpy's included; ``0`` and ``1`` are not booleans) and return it.

    Parameters
    ----------
    name : str
        The field as the user knows it.
    value : object
        The value to check.
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    bool
        ``bool(value)``.
    """
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)  # type: ignore[arg-type]
    raise error(f"{name} must be a boolean (True or False), got {value!r}")


def text(
    name: str,
    value: object,
    *,
    allow_empty: bool = False,
    error: type[Exception] = ConfigError,
) -> str:
    """Check a string, non-empty unless ``allow_empty``, and return it.

    Parameters
    ----------
    name : str
        The field as the user knows it.
    value : object
        The value to check.
    allow_empty : bool (default: False)
        Whether ``""`` is allowed.
    error : type of Exception (default: ConfigError)
        The exception class to raise (``InputError`` for bad input rather than settings).

    Returns
    -------
    str
        ``value``.
    """
    if not isinstance(value, str) or (not value and not allow_empty):
        kind = "a string" if allow_empty else "a non-empty string"
        raise error(f"{name} must be {kind}, got {value!r}")
    return value
