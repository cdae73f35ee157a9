"""Staleness decay: how much a late local model counts (seed 001, paragraph 3).

The server weights local model ``i`` by ``w_i = c_i * g(dt_i)``, where ``dt_i`` is the receive
time of the update minus the send time of the global model it started from, and ``g`` is a
preset decreasing function with ``g(0) = 1`` and ``g > 0``. The decays are registered in
:data:`DECAY_RULES`, one :class:`DecayRule` each; :func:`decay_table` renders them as the
table of ``docs/strategy.md`` (a test keeps the two equal). Adding a decay is one
:class:`DecayRule` in :data:`DECAY_RULES` plus its name in the :data:`DecayName` Literal (an
import-time check fails when the two disagree); the run config, the checks and the docs follow.

``dt`` is in whatever unit the caller measures it (seconds on the server's clock for the edge
strategy, versions for the FedAsync / FedBuff baselines). An exponential decay underflows to
zero for ``a * dt`` beyond about 745; every decay here is floored at :data:`MIN_DECAY` (the
smallest normal float) so that a weight never becomes zero: the decays are non-increasing
everywhere and strictly decreasing above the floor (hinge: beyond ``b``).

Also here: the baselines' staleness weights, FedBuff's ``1 / sqrt(1 + staleness)`` (Nguyen et
al., "Federated Learning with Buffered Asynchronous Aggregation", AISTATS 2022) and FedAsync's
mixing ``alpha * s(staleness)`` (Xie, Koyejo and Gupta, "Asynchronous Federated Optimization",
2019), whose ``s`` are the registered decays marked ``fedasync``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from flower_edge import validate
from flower_edge.errors import ConfigError, InputError

__all__ = [
    "DECAYS",
    "DECAY_PARAMS",
    "DECAY_RULES",
    "MIN_DECAY",
    "MIXINGS",
    "Decay",
    "DecayName",
    "DecayParam",
    "DecayRule",
    "MixingName",
    "decay_table",
    "fedasync_mixing",
    "fedbuff_weight",
    "make_decay",
]

MIN_DECAY: float = sys.float_info.min
"""Floor of every decay value (about 2.2e-308): a weight is never zero."""


@dataclass(frozen=True)
class DecayParam:
    """A parameter shared by the decays (``a`` or ``b``).

    Parameters
    ----------
    name : str
        Keyword of :class:`Decay` and :func:`make_decay` (``decay_<name>`` elsewhere).
    default : float
        Its default value.
    allow_zero : bool
        Whether 0 is allowed (``>= 0``) or not (``> 0``); it is never negative.
    """

    name: str
    default: float
    allow_zero: bool

    @property
    def bound(self) -> str:
        """The allowed range as text: ``"> 0"`` or ``">= 0"``."""
        return validate.describe_range(0.0, None, low_inclusive=self.allow_zero)

    def check(self, value: object) -> float:
        """Return ``value`` as a float, or raise a ConfigError naming the parameter."""
        return validate.number(
            f"decay parameter {self.name}", value, low=0.0, low_inclusive=self.allow_zero
        )


DECAY_PARAMS: dict[str, DecayParam] = {
    p.name: p for p in (DecayParam("a", 0.5, False), DecayParam("b", 4.0, True))
}
"""The parameters of the decays, by name: ``a`` (rate, ``> 0``), ``b`` (hinge point, ``>= 0``)."""


@dataclass(frozen=True)
class DecayRule:
    """One registered decay ``g(dt; a, b)``.

    Parameters
    ----------
    name : str
        The name users give (``decay="hinge"``, run config ``decay = "hinge"``).
    formula : str
        ``g(dt)`` as the docs print it.
    params : tuple of str
        The :data:`DECAY_PARAMS` it uses (the others are ignored, not checked).
    fn : callable
        ``fn(dt, a, b) -> g``, before the :data:`MIN_DECAY` floor.
    fedasync : bool
        Whether FedAsync accepts it as its staleness function ``s`` (Xie et al. define
        constant, polynomial and hinge forms).
    """

    name: str
    formula: str
    params: tuple[str, ...]
    fn: Callable[[float, float, float], float]
    fedasync: bool


DECAY_RULES: dict[str, DecayRule] = {
    rule.name: rule
    for rule in (
        DecayRule(
            name="exponential",
            formula="exp(-a * dt)",
            params=("a",),
            fn=lambda dt, a, b: math.exp(-a * dt),
            fedasync=False,
        ),
        DecayRule(
            name="polynomial",
            formula="(1 + dt) ** (-a)",
            params=("a",),
            fn=lambda dt, a, b: (1.0 + dt) ** -a,
            fedasync=True,
        ),
        DecayRule(
            name="hinge",
            formula="1 if dt <= b else 1 / (a * (dt - b) + 1)",
            params=("a", "b"),
            fn=lambda dt, a, b: 1.0 if dt <= b else 1.0 / (a * (dt - b) + 1.0),
            fedasync=True,
        ),
        DecayRule(
            name="constant",
            formula="1",
            params=(),
            fn=lambda dt, a, b: 1.0,
            fedasync=True,
        ),
    )
}
"""The registered decays, in the order the docs and messages list them."""

DecayName = Literal["exponential", "polynomial", "hinge", "constant"]
"""Names of :data:`DECAY_RULES`, for type checkers."""
MixingName = Literal["polynomial", "hinge", "constant"]
"""Names of the :data:`DECAY_RULES` marked ``fedasync``, for type checkers."""

DECAYS: tuple[str, ...] = tuple(DECAY_RULES)
"""Names accepted by :class:`Decay` and :func:`make_decay`."""

MIXINGS: tuple[str, ...] = tuple(name for name, rule in DECAY_RULES.items() if rule.fedasync)
"""Staleness functions ``s`` accepted by :func:`fedasync_mixing` and FedAsync."""

if get_args(DecayName) != DECAYS or get_args(MixingName) != MIXINGS:  # pragma: no cover
    raise ImportError(
        f"DecayName {get_args(DecayName)} / MixingName {get_args(MixingName)} disagree with "
        f"DECAY_RULES {DECAYS} / {MIXINGS}: add the new decay's name to the Literal"
    )


def decay_table() -> str:
    """Render :data:`DECAY_RULES` as the Markdown table of ``docs/strategy.md``.

    Returns
    -------
    str
        A Markdown table (name, ``g(dt)``, parameters, FedAsync), one row per decay, with no
        trailing newline.
    """
    rows = ["| name | g(dt) | parameters | FedAsync `s` |", "|---|---|---|---|"]
    for rule in DECAY_RULES.values():
        params = ", ".join(
            f"`{p} {DECAY_PARAMS[p].bound}` (default {DECAY_PARAMS[p].default:g})"
            for p in rule.params
        )
        rows.append(
            f"| `{rule.name}` | `{rule.formula}` | {params or 'none'} | "
            f"{'yes' if rule.fedasync else 'no'} |"
        )
    return "\n".join(rows)


def _check_delay(delay: float, name: str = "delay") -> float:
    """Return ``delay`` as a float after checking that it is a finite number >= 0."""
    return validate.number(name, delay, low=0.0, error=InputError)


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
    a: float = DECAY_PARAMS["a"].default
    b: float = DECAY_PARAMS["b"].default

    def __post_init__(self) -> None:
        validate.choice("decay", self.name, DECAYS)
        for param in DECAY_RULES[self.name].params:
            DECAY_PARAMS[param].check(getattr(self, param))

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
        value = DECAY_RULES[self.name].fn(_check_delay(delay), self.a, self.b)
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
        Unknown name (the message lists :data:`DECAYS`), unknown or out-of-range parameter
        (every given one, also one the named decay does not use), or parameters given with a
        callable.
    """
    if isinstance(spec, Decay):
        if params:
            raise ConfigError("decay parameters cannot be given with a Decay instance")
        return spec
    if isinstance(spec, str):
        unknown = sorted(set(params) - set(DECAY_PARAMS))
        if unknown:
            allowed = ", ".join(f"{p.name} ({p.bound})" for p in DECAY_PARAMS.values())
            raise ConfigError(
                f"unknown decay parameter(s) {', '.join(unknown)}; allowed: {allowed}"
            )
        checked = {name: DECAY_PARAMS[name].check(value) for name, value in params.items()}
        return Decay(validate.choice("decay", spec, DECAYS), **checked)  # type: ignore[arg-type]
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
        return validate.number(
            f"the decay function's result at delay {dt!r}",
            self.fn(dt),
            low=0.0,
            low_inclusive=False,
            error=InputError,
        )


def _check_staleness(staleness: int) -> int:
    return validate.integer("staleness", staleness, low=0, error=InputError)


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
        One of :data:`MIXINGS`: ``"polynomial"`` (``s = (1 + t - tau) ** (-a)``),
        ``"hinge"`` (``s = 1`` while ``t - tau <= b``, else ``1 / (a * (t - tau - b) + 1)``)
        or ``"constant"`` (``s = 1``).
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
    rate = validate.probability("FedAsync alpha", alpha, allow_zero=False)
    validate.choice("FedAsync staleness function", kind, MIXINGS)
    return rate * Decay(kind, a=a, b=b)(_check_staleness(staleness))
