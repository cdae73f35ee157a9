"""Staleness decay: how much a late local model counts (seed 001, paragraph 3).

The server weights local model ``i`` by ``w_i = c_i * g(dt_i)``, where ``dt_i`` is the receive
time of the update minus the send time of the global model it started from, and ``g`` is a
preset decreasing function with ``g(0) = 1`` and ``g > 0``:

=============  ==========================================  =====================
name           g(dt)                                       parameters
=============  ==========================================  =====================
exponential    ``exp(-a * dt)``                            ``a > 0``
polynomial     ``(1 + dt) ** (-a)``                        ``a > 0``
hinge          ``1 if dt <= b else 1 / (a * (dt - b) + 1)``  ``a > 0, b >= 0``
constant       ``1``                                       none
=============  ==========================================  =====================

``dt`` is in whatever unit the caller measures it (seconds on the server's clock for the edge
strategy, versions for the FedAsync / FedBuff baselines). An exponential decay underflows to
zero for ``a * dt`` beyond about 745; every decay here is floored at :data:`MIN_DECAY` (the
smallest normal float) so that a weight never becomes zero: the decays are non-increasing
everywhere and strictly decreasing above the floor (hinge: beyond ``b``).

Also here: the baselines' staleness weights, FedBuff's ``1 / sqrt(1 + staleness)`` (Nguyen et
al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022) and FedAsync's
mixing ``alpha * s(staleness)`` (Xie, Koyejo and Gupta, "Asynchronous Federated Optimization",
2019), whose ``s`` are the polynomial, hinge and constant forms above.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Literal, get_args

from flower_edge.errors import ConfigError, InputError

__all__ = [
    "DECAYS",
    "MIN_DECAY",
    "MIXINGS",
    "Decay",
    "DecayName",
    "MixingName",
    "fedasync_mixing",
    "fedbuff_weight",
    "make_decay",
]

DecayName = Literal["exponential", "polynomial", "hinge", "constant"]
MixingName = Literal["constant", "polynomial", "hinge"]

DECAYS: tuple[str, ...] = get_args(DecayName)
"""Names accepted by :class:`Decay` and :func:`make_decay`."""

MIXINGS: tuple[str, ...] = get_args(MixingName)
"""Staleness functions ``s`` accepted by :func:`fedasync_mixing`."""

MIN_DECAY: float = sys.float_info.min
"""Floor of every decay value (about 2.2e-308): a weight is never zero."""


def _check_delay(delay: float, name: str = "delay") -> float:
    """Return ``delay`` as a float after checking that it is a finite number >= 0."""
    if isinstance(delay, bool) or not isinstance(delay, Real):
        raise InputError(f"{name} must be a real number >= 0, got {delay!r}")
    value = float(delay)
    if not math.isfinite(value) or value < 0.0:
        raise InputError(f"{name} must be finite and >= 0, got {value!r}")
    return value


def _check_param(name: str, value: float, *, allow_zero: bool) -> None:
    bound = ">= 0" if allow_zero else "> 0"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"decay parameter {name} must be a real number {bound}, got {value!r}")
    ok = value >= 0.0 if allow_zero else value > 0.0
    if not math.isfinite(value) or not ok:
        raise ConfigError(f"decay parameter {name} must be finite and {bound}, got {value!r}")


@dataclass(frozen=True)
class Decay:
    """A named decreasing function ``g(dt)`` with ``g(0) = 1`` and ``g > 0``.

    Parameters
    ----------
    name : DecayName
        One of :data:`DECAYS`: ``"exponential"``, ``"polynomial"``, ``"hinge"``, ``"constant"``.
    a : float (default: 0.5)
        Decay rate; finite and ``> 0`` (unused by ``"constant"``).
    b : float (default: 4.0)
        Hinge point of ``"hinge"``: no decay while ``dt <= b``; finite and ``>= 0``
        (unused by the others).

    Raises
    ------
    ConfigError
        Unknown name, or a parameter the decay uses out of its range.
    """

    name: DecayName
    a: float = 0.5
    b: float = 4.0

    def __post_init__(self) -> None:
        if self.name not in DECAYS:
            raise ConfigError(f"unknown decay {self.name!r}; choose one of {', '.join(DECAYS)}")
        if self.name != "constant":
            _check_param("a", self.a, allow_zero=False)
        if self.name == "hinge":
            _check_param("b", self.b, allow_zero=True)

    def __call__(self, delay: float) -> float:
        """Return ``g(delay)``.

        Parameters
        ----------
        delay : float
            The delay ``dt``; finite and ``>= 0``.

        Returns
        -------
        float
            The decay in ``[MIN_DECAY, 1]``; exactly 1 at ``delay = 0``.

        Raises
        ------
        InputError
            ``delay`` negative, NaN, infinite or not a number.
        """
        dt = _check_delay(delay)
        if self.name == "exponential":
            value = math.exp(-self.a * dt)
        elif self.name == "polynomial":
            value = (1.0 + dt) ** (-self.a)
        elif self.name == "hinge":
            value = 1.0 if dt <= self.b else 1.0 / (self.a * (dt - self.b) + 1.0)
        else:
            value = 1.0
        return max(value, MIN_DECAY)


def make_decay(spec: str | Callable[[float], float], **params: float) -> Callable[[float], float]:
    """Build a decay function from a name and parameters, or wrap a user callable.

    Parameters
    ----------
    spec : str or callable
        A name in :data:`DECAYS` (parameters ``a`` and ``b`` as keywords, see :class:`Decay`),
        a :class:`Decay` (returned as is), or a callable ``g(dt) -> float``. A user callable
        is wrapped so that every call checks its input (finite, ``>= 0``) and its result
        (finite, ``> 0``); it should be decreasing with ``g(0) = 1``, which cannot be checked.
    **params : float
        ``a`` and/or ``b`` for a named decay; none for a callable.

    Returns
    -------
    Callable[[float], float]
        The decay ``g``.

    Raises
    ------
    ConfigError
        Unknown name (the message lists :data:`DECAYS`), unknown or out-of-range parameter,
        or parameters given with a callable.
    """
    if isinstance(spec, Decay):
        if params:
            raise ConfigError("decay parameters cannot be given with a Decay instance")
        return spec
    if isinstance(spec, str):
        unknown = sorted(set(params) - {"a", "b"})
        if unknown:
            raise ConfigError(
                f"unknown decay parameter(s) {', '.join(unknown)}; allowed: a (> 0), b (>= 0)"
            )
        if spec not in DECAYS:
            raise ConfigError(f"unknown decay {spec!r}; choose one of {', '.join(DECAYS)}")
        return Decay(spec, **params)  # type: ignore[arg-type]
    if not callable(spec):
        raise ConfigError(
            f"decay must be a name in {', '.join(DECAYS)} or a callable, got {type(spec).__name__}"
        )
    if params:
        raise ConfigError(
            f"decay parameters {', '.join(sorted(params))} apply only to named decays"
        )
    return _CheckedDecay(spec)


@dataclass(frozen=True)
class _CheckedDecay:
    """A user decay whose input and output are checked on every call."""

    fn: Callable[[float], float]

    def __call__(self, delay: float) -> float:
        dt = _check_delay(delay)
        value = self.fn(dt)
        if isinstance(value, bool) or not isinstance(value, Real):
            raise InputError(f"decay function returned {value!r}; it must return a float > 0")
        result = float(value)
        if not math.isfinite(result) or result <= 0.0:
            raise InputError(
                f"decay function returned {result!r} at delay {dt!r}; it must be finite and > 0"
            )
        return result


def _check_staleness(staleness: int) -> int:
    if isinstance(staleness, bool) or not isinstance(staleness, Integral):
        raise InputError(f"staleness must be an integer >= 0, got {staleness!r}")
    if staleness < 0:
        raise InputError(f"staleness must be an integer >= 0, got {staleness!r}")
    return int(staleness)


def fedbuff_weight(staleness: int) -> float:
    """Return FedBuff's staleness weight ``1 / sqrt(1 + staleness)``.

    Parameters
    ----------
    staleness : int
        Number of global versions published since the update's base version; ``>= 0``.

    Returns
    -------
    float
        The weight in ``(0, 1]``.

    Raises
    ------
    InputError
        ``staleness`` negative or not an integer.
    """
    return 1.0 / math.sqrt(1.0 + _check_staleness(staleness))


def fedasync_mixing(
    alpha: float,
    staleness: int,
    kind: MixingName = "polynomial",
    a: float = 0.5,
    b: float = 4.0,
) -> float:
    """Return FedAsync's mixing weight ``alpha_t = alpha * s(staleness)``.

    The server then sets ``x <- (1 - alpha_t) * x + alpha_t * x_new`` (Xie et al. 2019).

    Parameters
    ----------
    alpha : float
        Base mixing weight; in ``(0, 1]``.
    staleness : int
        ``t - tau``: versions published since the update's base version; ``>= 0``.
    kind : MixingName (default: "polynomial")
        ``"constant"`` (``s = 1``), ``"polynomial"`` (``s = (1 + t - tau) ** (-a)``) or
        ``"hinge"`` (``s = 1`` while ``t - tau <= b``, else ``1 / (a * (t - tau - b) + 1)``).
    a : float (default: 0.5)
        Decay rate, ``> 0``.
    b : float (default: 4.0)
        Hinge point, ``>= 0``.

    Returns
    -------
    float
        The mixing weight in ``(0, alpha]``.

    Raises
    ------
    ConfigError
        ``alpha`` outside ``(0, 1]``, unknown ``kind``, ``a`` or ``b`` out of range.
    InputError
        ``staleness`` negative or not an integer.
    """
    if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0.0 < alpha <= 1.0:
        raise ConfigError(f"FedAsync alpha must be in (0, 1], got {alpha!r}")
    if kind not in MIXINGS:
        raise ConfigError(
            f"unknown FedAsync staleness function {kind!r}; choose one of {', '.join(MIXINGS)}"
        )
    return float(alpha) * Decay(kind, a=a, b=b)(_check_staleness(staleness))
