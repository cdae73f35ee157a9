"""Sample allocation and rebalancing (seed 000, claims 7-10; DESIGN.md steps 7-9).

* :func:`initial_shares` -- seed formula 7, ``f_d = F * m_d / sum(m)``, with per-node capacity
  limits (water-filling: ``f_d = min(cap_d, lambda * m_d)``), rounded to whole samples that
  add up to exactly ``F`` (largest remainders, which minimises both the sum of absolute and
  the sum of squared rounding errors).
* :class:`TimeModel` and :func:`fit_time_model` -- seed formula 8, ``T = k * f + b``, fitted
  robustly (Theil-Sen) from (load, seconds) observations, falling back to a prior.
* :func:`rebalance` -- seed formula 9 (``method="seed"``): move
  ``delta = (T_s - T_f) / (k_s + k_f)`` samples (rounded to the better neighbouring integer)
  from the slowest node s to the fastest node f while that shortens the pair's finish (a
  fastest node that cannot take one sample and still finish before s is passed over for
  the next fastest, until no node can); or (``method="optimal"``) the global equal-finish
  optimum with integer rounding.

Participation convention
    A node given 0 samples does not train this round: its predicted time is 0 and it does not
    count in the makespan. The time model ``k * f + b`` applies to ``f >= 1``. (Without this
    convention a very slow node would hold up the round by ``b`` even with nothing to do.)
    For the seed method, the "fastest" node is the one that would finish earliest after
    taking work, ``k * f + b`` (which is ``b`` for an idle node).

Optimal method
    Over real loads, ``max_d (k_d f_d + b_d)`` subject to ``sum f = F`` and
    ``0 <= f_d <= cap_d`` is minimised by the smallest time ``T*`` with
    ``sum_d clip((T* - b_d) / k_d, 0, cap_d) = F`` (DESIGN.md's
    ``T* = (F + sum b/k) / sum 1/k`` when no capacity binds and no node drops out). Integer
    loads: start from ``floor(f_d)`` (each finishes by ``T*``, a lower bound of the integer
    optimum ``M*``) and hand each leftover sample to the node whose finish grows least. Every
    step then finishes by ``M*`` (some node still has room below ``M*`` while samples are
    left), so the result is the integer optimum -- tested against exhaustive search.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from logging import WARNING, getLogger
from typing import Any, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "MAX_SAMPLES",
    "Allocation",
    "Method",
    "TimeModel",
    "fit_time_model",
    "initial_shares",
    "predicted_makespan",
    "predicted_times",
    "rebalance",
]

logger = getLogger(__name__)

Method = Literal["seed", "optimal"]
METHODS: tuple[str, ...] = get_args(Method)
#: largest sample count (a total, a share, a capacity) the allocation takes: the splits are
#: computed in float64, which holds every integer up to 2**53 exactly
MAX_SAMPLES = 2**53
#: fewest distinct loads that :func:`fit_time_model` fits a line through
MIN_POINTS = 2
#: most recent observations that :func:`fit_time_model` uses (the node's current state)
MAX_POINTS = 512


@dataclass(frozen=True)
class TimeModel:
    """Linear iteration-time model of one node, ``seconds = k * load + b`` (seed formula 8).

    Attributes
    ----------
    k : float
        Seconds per sample; finite and ``> 0``.
    b : float
        Fixed seconds per iteration (start-up, transfers); finite and ``>= 0``.
    """

    k: float
    b: float

    def __post_init__(self) -> None:
        validate.number("TimeModel.k", self.k, low=0.0, low_inclusive=False, error=InputError)
        validate.number("TimeModel.b", self.b, low=0.0, error=InputError)

    def predict(self, load: float) -> float:
        """Return the predicted seconds ``k * load + b`` of an iteration of ``load`` samples."""
        return self.k * load + self.b


@dataclass(frozen=True)
class Allocation:
    """A sample allocation and its predicted timing.

    Attributes
    ----------
    samples : tuple of int
        Samples per node; they add up to the total ``F``.
    predicted_seconds : tuple of float
        Predicted iteration time per node (0 for a node with no samples).
    makespan : float
        The slowest node's predicted time.
    method : str
        ``"seed"`` or ``"optimal"``.
    """

    samples: tuple[int, ...]
    predicted_seconds: tuple[float, ...]
    makespan: float
    method: str


# ---------------------------------------------------------------- validation helpers
def _check_total(total: int) -> int:
    return validate.integer("total", total, low=0, high=MAX_SAMPLES, error=InputError)


def _check_counts(values: Sequence[int], field: str) -> list[int]:
    return [
        validate.integer(f"{field}[{i}]", v, low=0, high=MAX_SAMPLES, error=InputError)
        for i, v in enumerate(values)
    ]


def _check_capacities(capacities: Sequence[int | None] | None, n: int) -> list[float]:
    """Return capacities as floats (``inf`` for no limit)."""
    if capacities is None:
        return [math.inf] * n
    if len(capacities) != n:
        raise InputError(f"capacities must have one entry per node ({n}), got {len(capacities)}")
    out: list[float] = []
    for i, c in enumerate(capacities):
        checked = validate.integer(f"capacities[{i}]", c, low=0, allow_none=True, error=InputError)
        out.append(math.inf if checked is None else float(checked))
    return out


def _check_models(models: Sequence[TimeModel], n: int) -> None:
    if len(models) != n:
        raise InputError(f"models must have one TimeModel per node ({n}), got {len(models)}")
    for i, m in enumerate(models):
        if not isinstance(m, TimeModel):
            raise InputError(f"models[{i}] must be a TimeModel, got {type(m).__name__}")


# ---------------------------------------------------------------- formula 7
def _largest_remainder(
    exact: NDArray[np.float64], total: int, room: NDArray[np.bool_]
) -> list[int]:
    """Round ``exact`` (summing to ``total``) to integers summing to ``total``.

    Leftover units go to the largest fractional parts among nodes marked in ``room``
    (ties to the lower index).
    """
    floors = np.floor(exact)
    out = floors.astype(np.int64)
    left = total - int(out.sum())  # an integer sum: a float one is inexact near 2**53
    if left > 0:
        frac = np.where(room, exact - floors, -1.0)
        order = np.lexsort((np.arange(exact.size), -frac))
        out[order[:left]] += 1
    elif left < 0:  # float drift only: take from the smallest fractional parts
        frac = np.where(out > 0, exact - floors, np.inf)
        order = np.lexsort((np.arange(exact.size), frac))
        out[order[:-left]] -= 1
    return [int(v) for v in out]


def initial_shares(
    total: int,
    ratios: Sequence[float] | NDArray[np.floating[Any]],
    capacities: Sequence[int | None] | None = None,
) -> tuple[int, ...]:
    """Split ``total`` samples by match ratio (seed formula 7), within capacities.

    Parameters
    ----------
    total : int
        ``F``, the samples to split; ``>= 0``.
    ratios : sequence of float or numpy.ndarray
        Match ratio ``m_d`` of each node (e.g. from :func:`flower_edge.radar.match_ratios`);
        finite and ``>= 0``.
    capacities : sequence of int or None, optional
        Most samples each node can take (e.g. its local data size); ``None`` for no limit.
        A node at its limit is filled and the rest is split among the others by ratio.

    Returns
    -------
    tuple of int
        Samples per node, adding up to exactly ``total``; ``|f_d - exact_d| < 1``.

    Raises
    ------
    InputError
        Empty node list, a bad ratio or capacity, ``total < 0``, nodes with ratio > 0 whose
        capacities cannot hold ``total``, or (a guard, never seen) ratios whose range defeats
        float arithmetic.
    """
    total = _check_total(total)
    if isinstance(ratios, str) or not hasattr(ratios, "__len__"):
        raise InputError(
            f"ratios must be a sequence of match ratios, one per node, got {type(ratios).__name__}"
        )
    n = len(ratios)
    if n == 0:
        raise InputError("ratios: the node list is empty; need at least 1 node")
    m = np.asarray(
        [
            validate.number(f"ratios[{i}]", v, low=0.0, error=InputError)
            for i, v in enumerate(ratios)
        ],
        dtype=np.float64,
    )
    cap = np.asarray(_check_capacities(capacities, n))
    if total == 0:
        return (0,) * n
    if (m > 0).any():  # formula 7 depends on the ratios' proportions only: scale the largest
        # into [0.5, 1), so that subnormal or huge ratios neither overflow nor vanish; by a
        # power of two, which is exact: ordinary ratios split bit for bit as unscaled (one
        # below the smallest float after scaling keeps the smallest: it can still take samples)
        exponent = math.frexp(float(m.max()))[1]
        tiny = np.finfo(np.float64).smallest_subnormal
        m = np.where(m > 0, np.maximum(np.ldexp(m, -exponent), tiny), 0.0)
    else:
        raise InputError(
            f"ratios: no node has a match ratio > 0, so total={total} samples cannot be split "
            "by match ratio (f_d = F m_d / sum m)"
        )
    usable = (m > 0) & (cap > 0)
    held = float(cap[usable].sum())
    if not usable.any() or held < total:
        raise InputError(
            f"capacities: nodes with match ratio > 0 can hold {held:g} samples, fewer than "
            f"total={total}"
        )
    # water-filling: x_d = min(cap_d, lam * m_d); saturate nodes in order of cap_d / m_d
    idx = np.flatnonzero(usable)
    thresholds = cap[idx] / m[idx]
    order = idx[np.argsort(thresholds, kind="stable")]
    t_sorted = np.sort(thresholds, kind="stable")
    cum_cap = np.concatenate(([0.0], np.cumsum(cap[order])[:-1]))
    rest_m = m[order][::-1].cumsum()[::-1]  # sum of ratios of the unsaturated suffix
    # a subnormal sum of ratios overflows lam: handled below, never a RuntimeWarning on stderr
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        lam_i = (total - cum_cap) / rest_m
    first = int(np.argmax(lam_i <= t_sorted))  # a suffix with lam below every threshold exists
    exact = np.zeros(n)
    if math.isfinite(lam_i[first]):
        exact[idx] = np.minimum(cap[idx], lam_i[first] * m[idx])
    else:  # the unsaturated ratios sum to a subnormal: lam overflows, their proportions do not
        rest = total - cum_cap[first]
        with np.errstate(over="ignore"):  # only saturated nodes overflow: their cap holds
            exact[idx] = np.minimum(cap[idx], rest * (m[idx] / rest_m[first]))
    exact = np.minimum(exact, cap)
    room = usable & (np.floor(exact) < cap)
    out = _largest_remainder(exact, total, room)
    if sum(out) != total or any(not 0 <= v <= c for v, c in zip(out, cap, strict=True)):
        raise InputError(  # never a silent wrong split; the ratios' range defeats float maths
            f"ratios: their range (the smallest {float(np.min(m[m > 0]) / m.max()):g} of the "
            f"largest) is too wide to split total={total} within the capacities"
        )
    return tuple(out)


# ---------------------------------------------------------------- formula 8
def _theil_sen(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Theil-Sen line: median of the slopes of all pairs with distinct x; median residual.

    Pure Python for a few points (a node's usual history: no array overhead), numpy beyond.
    """
    if len(x) <= 32:
        slopes = [
            (y[j] - y[i]) / (x[j] - x[i])
            for i in range(len(x))
            for j in range(i + 1, len(x))
            if x[j] != x[i]
        ]
        slope = statistics.median(slopes)
        return slope, statistics.median([yy - slope * xx for xx, yy in zip(x, y, strict=True)])
    ax, ay = np.asarray(x), np.asarray(y)
    i, j = np.triu_indices(ax.size, 1)
    dx = ax[j] - ax[i]
    keep = dx != 0
    slope = float(np.median((ay[j] - ay[i])[keep] / dx[keep]))
    return slope, float(np.median(ay - slope * ax))


def fit_time_model(
    observations: Sequence[tuple[float, float]],
    prior: TimeModel | None = None,
    *,
    min_points: int = MIN_POINTS,
) -> TimeModel:
    """Fit ``seconds = k * load + b`` robustly to (load, seconds) observations.

    Uses the Theil-Sen estimator (median of the slopes of all pairs of observations with
    distinct loads; tolerates up to ~29% outliers) on the latest :data:`MAX_POINTS`;
    the intercept is the median residual ``median(seconds - k * load)``, clamped to ``>= 0``
    (an iteration never takes negative time).

    Parameters
    ----------
    observations : sequence of (float, float)
        ``(load, seconds)`` pairs; loads and seconds finite and ``>= 0``.
    prior : TimeModel, optional
        Returned when the data cannot give a usable line: fewer than ``min_points`` distinct
        loads, or a fitted slope that is not ``> 0``.
    min_points : int (default: 2)
        Fewest distinct loads to fit a line through; ``>= 2``.

    Returns
    -------
    TimeModel
        The fitted model, or ``prior``.

    Raises
    ------
    InputError
        A malformed or negative observation, ``min_points < 2``, a ``prior`` that is not a
        :class:`TimeModel`, or no usable fit and no prior.
    """
    validate.integer("min_points", min_points, low=2, error=InputError)
    if prior is not None and not isinstance(prior, TimeModel):
        raise InputError(f"prior must be a TimeModel or None, got {type(prior).__name__}")
    loads: list[float] = []
    secs: list[float] = []
    for i, obs in enumerate(observations):
        try:
            load, sec = (float(v) for v in obs)
        except (TypeError, ValueError):
            raise InputError(
                f"observations[{i}] must be a (load, seconds) pair of numbers, got {obs!r}"
            ) from None
        if not (math.isfinite(load) and load >= 0 and math.isfinite(sec) and sec >= 0):
            raise InputError(
                f"observations[{i}] must have a finite load >= 0 and seconds >= 0, got {obs!r}"
            )
        loads.append(load)
        secs.append(sec)
    reason = ""
    if len(set(loads)) < min_points:
        reason = f"{len(set(loads))} distinct loads < min_points={min_points}"
    else:
        slope, intercept = _theil_sen(loads[-MAX_POINTS:], secs[-MAX_POINTS:])
        if math.isfinite(slope) and slope > 0:
            return TimeModel(slope, max(0.0, intercept))
        reason = f"fitted slope {slope:g} is not > 0"
    if prior is None:
        raise InputError(f"observations: cannot fit a time model ({reason}) and no prior given")
    logger.debug("time model: %s; using the prior %s", reason, prior)
    return prior


# ---------------------------------------------------------------- timing
def predicted_times(shares: Sequence[int], models: Sequence[TimeModel]) -> tuple[float, ...]:
    """Predicted seconds per node: ``k * f + b`` for ``f >= 1``, 0 for an idle node."""
    f = _check_counts(shares, "shares")
    _check_models(models, len(f))
    return tuple(m.predict(v) if v > 0 else 0.0 for v, m in zip(f, models, strict=True))


def predicted_makespan(shares: Sequence[int], models: Sequence[TimeModel]) -> float:
    """Predicted time of the slowest node that has samples (0 when none has).

    Parameters
    ----------
    shares : sequence of int
        Samples per node.
    models : sequence of TimeModel
        One time model per node.
    """
    return max(predicted_times(shares, models), default=0.0)


# ---------------------------------------------------------------- formula 9
def _seed_step(
    t_s: float, t_g: float, s: TimeModel, g: TimeModel, f_s: int, f_g: int, room_g: float
) -> int:
    """Return the samples to move from the slowest node s to the fastest g (0: none helps).

    ``delta = (T_s - T_g) / (k_s + k_g)`` (seed formula 9) rounded down or up, within
    ``[1, min(f_s, room_g)]``: of the two, the one with the smaller gap ``|T_g' - T_s'|``
    among those after which both nodes finish before ``T_s``.
    """
    delta = (t_s - t_g) / (s.k + g.k)
    if delta <= 0:
        return 0
    limit = min(f_s, room_g)
    best: tuple[float, int] | None = None
    for raw in {math.floor(delta), math.ceil(delta)}:
        step = int(min(max(raw, 1), limit))
        new_s = s.predict(f_s - step) if f_s > step else 0.0
        new_g = g.predict(f_g + step)
        if max(new_s, new_g) >= t_s:  # this transfer does not shorten the pair's finish
            continue
        gap = abs(new_g - s.predict(f_s - step))
        if best is None or (gap, step) < best:
            best = (gap, step)
    return 0 if best is None else best[1]


class _Heaps:
    """Slowest loaded node and fastest node with room, under changing loads (lazy deletion)."""

    def __init__(self, f: list[int], models: Sequence[TimeModel], cap: list[float]) -> None:
        self.f, self.models, self.cap = f, models, cap
        self.ver = [0] * len(f)
        self.slow: list[tuple[float, int, int]] = []  # (-time, node, version): loaded nodes
        self.fast: list[tuple[float, int, int]] = []  # (time, node, version): nodes with room
        for d in range(len(f)):
            self.push(d)

    def push(self, d: int) -> None:
        self.ver[d] += 1
        t = self.models[d].predict(self.f[d])
        if self.f[d] > 0:
            heapq.heappush(self.slow, (-t, d, self.ver[d]))
        if self.f[d] < self.cap[d]:
            heapq.heappush(self.fast, (t, d, self.ver[d]))

    def _top(self, heap: list[tuple[float, int, int]]) -> tuple[float, int, int] | None:
        while heap and heap[0][2] != self.ver[heap[0][1]]:
            heapq.heappop(heap)
        return heap[0] if heap else None

    def slowest(self) -> tuple[float, int] | None:
        top = self._top(self.slow)
        return None if top is None else (-top[0], top[1])

    def fastest_except(self, s: int) -> tuple[float, int] | None:
        top = self._top(self.fast)
        if top is None or top[1] != s:
            return None if top is None else (top[0], top[1])
        held = heapq.heappop(self.fast)
        top = self._top(self.fast)
        heapq.heappush(self.fast, held)
        return None if top is None else (top[0], top[1])

    def set_aside(self, d: int) -> None:
        """Take node ``d`` out of the receivers until its load changes (its next push)."""
        self.ver[d] += 1  # drops both of its entries lazily ...
        if self.f[d] > 0:  # ... and it stays a sender
            heapq.heappush(self.slow, (-self.models[d].predict(self.f[d]), d, self.ver[d]))


def _seed_rebalance(
    f: list[int], models: Sequence[TimeModel], cap: list[float], max_moves: int
) -> list[int]:
    """Move samples from the slowest to the fastest node while the pair finishes earlier."""
    heaps = _Heaps(f, models, cap)
    moves = 0
    while True:
        slowest = heaps.slowest()
        fastest = None if slowest is None else heaps.fastest_except(slowest[1])
        if slowest is None or fastest is None:
            return f
        (t_s, s), (t_g, g) = slowest, fastest
        step = _seed_step(t_s, t_g, models[s], models[g], f[s], f[g], cap[g] - f[g])
        if step == 0:
            if t_g >= t_s:  # every node finishes together: balanced
                return f
            # The fastest node cannot take one sample and still finish before the slowest
            # (a node with a tiny share and a steep k finishes first but cannot help). The
            # slowest only gets faster, so it never can while its own load stays: try the
            # next fastest node instead of stopping with the others still able to help.
            heaps.set_aside(g)
            continue
        if moves == max_moves:
            logger.log(WARNING, "seed rebalancing stopped after %s moves (max_moves)", moves)
            return f
        f[s] -= step
        f[g] += step
        heaps.push(s)
        heaps.push(g)
        moves += 1


def _equal_finish_time(total: int, models: Sequence[TimeModel], cap: list[float]) -> float:
    """Smallest ``T`` with ``sum_d clip((T - b_d) / k_d, 0, cap_d) >= total`` (sweep)."""
    if total == 0:
        return 0.0
    events: list[tuple[float, float]] = []  # (time, change of slope d(sum f)/dT)
    for m, c in zip(models, cap, strict=True):
        if c <= 0:
            continue
        events.append((m.b, 1.0 / m.k))
        if math.isfinite(c):
            events.append((m.b + m.k * c, -1.0 / m.k))
    events.sort()
    load, slope, t_prev = 0.0, 0.0, events[0][0]
    goal = total * (1.0 - 1e-12)  # tolerate float drift in the running sum
    for t, ds in events:
        reach = load + slope * (t - t_prev)
        if slope > 0 and reach >= goal:
            return t_prev + max(0.0, total - load) / slope
        load, t_prev = reach, t
        slope += ds
    return t_prev + max(0.0, total - load) / slope if slope > 0 else t_prev


def _optimal_rebalance(total: int, models: Sequence[TimeModel], cap: list[float]) -> list[int]:
    """Integer loads of least makespan (see the module docstring)."""
    t_star = _equal_finish_time(total, models, cap)
    f = [
        int(min(c, math.floor(max(0.0, (t_star - m.b) / m.k))))
        for m, c in zip(models, cap, strict=True)
    ]
    left = total - sum(f)
    if left > 0:
        heap = [(m.k * (v + 1) + m.b, d) for d, (m, v) in enumerate(zip(models, f, strict=True))]
        heap = [e for e in heap if f[e[1]] < cap[e[1]]]
        heapq.heapify(heap)
        for _ in range(left):
            _, d = heapq.heappop(heap)
            f[d] += 1
            if f[d] < cap[d]:
                heapq.heappush(heap, (models[d].k * (f[d] + 1) + models[d].b, d))
    elif left < 0:  # float drift only: take samples back from the latest finishers
        back = [(-(m.k * v + m.b), d) for d, (m, v) in enumerate(zip(models, f, strict=True)) if v]
        heapq.heapify(back)
        for _ in range(-left):
            _, d = heapq.heappop(back)
            f[d] -= 1
            if f[d] > 0:
                heapq.heappush(back, (-(models[d].k * f[d] + models[d].b), d))
    return f


def rebalance(
    shares: Sequence[int],
    models: Sequence[TimeModel],
    *,
    method: Method = "seed",
    capacities: Sequence[int | None] | None = None,
    max_moves: int | None = None,
) -> Allocation:
    """Rebalance sample shares so that the nodes finish an iteration together.

    Parameters
    ----------
    shares : sequence of int
        Current samples per node (e.g. from :func:`initial_shares`); their sum ``F`` is kept.
    models : sequence of TimeModel
        One time model per node.
    method : {"seed", "optimal"} (default: "seed")
        ``"seed"``: the seed's slowest-to-fastest transfers (formula 9), starting from
        ``shares``. ``"optimal"``: the least makespan over all integer splits of ``F``
        (``shares`` only gives ``F``).
    capacities : sequence of int or None, optional
        Most samples each node can take; ``None`` for no limit.
    max_moves : int, optional
        Limit on the seed method's transfers, ``>= 0`` (default ``100 * n + 1000``); reaching
        it logs a warning and returns the shares reached so far.

    Returns
    -------
    Allocation
        Samples, predicted seconds per node and the makespan.

    Raises
    ------
    InputError
        Empty node list, mismatched lengths, an unknown method, a negative share, a share
        above its node's capacity, a bad ``max_moves``, or a time model whose predicted time
        of the node's largest possible share overflows a float.
    """
    validate.choice("method", method, METHODS, error=InputError)
    f = _check_counts(shares, "shares")
    if not f:
        raise InputError("shares: the node list is empty; need at least 1 node")
    _check_models(models, len(f))
    cap = _check_capacities(capacities, len(f))
    limit = validate.integer("max_moves", max_moves, low=0, allow_none=True, error=InputError)
    for i, (v, c) in enumerate(zip(f, cap, strict=True)):
        if v > c:
            raise InputError(f"shares[{i}]={v} exceeds capacities[{i}]={int(c)}")
    total = sum(f)
    cap = [min(c, float(total)) for c in cap]  # room beyond F is never used
    for i, (m, c) in enumerate(zip(models, cap, strict=True)):
        if not math.isfinite(m.predict(c)):
            raise InputError(
                f"models[{i}]: the predicted time k * f + b of {int(c)} samples overflows a "
                f"float (k={m.k!r}, b={m.b!r}); give k and b in larger time units"
            )
    if method == "seed":
        limit = 100 * len(f) + 1000 if limit is None else limit
        out = _seed_rebalance(list(f), models, cap, limit)
    else:
        out = _optimal_rebalance(total, models, cap)
    times = predicted_times(out, models)
    return Allocation(tuple(out), times, max(times, default=0.0), method)
