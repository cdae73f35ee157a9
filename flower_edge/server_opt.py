"""Server-side step rules for asynchronous aggregation of deltas: pure numpy over plain arrays.

An asynchronous server receives local *deltas* ``D_i = x_i - x_base_i`` (a node's model minus
the global model its job started from), weighted by ``w_i`` (in the edge strategy
``w_i = c_i * g(dt_i)``, seed 001). This module turns a buffer of them into the server's
*step* ``s`` and the step into a *direction* ``u`` applied as ``x <- x + lr * u``:

* :func:`work_normalised_step` -- FedNova (Wang et al., "Tackling the Objective Inconsistency
  Problem in Heterogeneous Federated Optimization", NeurIPS 2020): each delta is divided by
  its local work ``tau_i`` (local steps), the normalised deltas are averaged with the weights
  and scaled back by the weighted mean work ``tau_eff = sum w_i tau_i / sum w_i``:
  ``s = tau_eff * sum_i w_i (D_i / tau_i) / sum_i w_i``. A node that trained many epochs of
  its own (label-skewed) data then moves the model as much per unit of work as the others,
  not in proportion to its work.
* :class:`UpdateCache` -- CA2FL (Wang et al., "Tackling the Data Heterogeneity in Asynchronous
  Federated Learning with Cached Update Calibration", ICLR 2024): the server keeps each node's
  latest delta ``h_j``; the step is the cached mean plus the buffer's news,
  ``s = h_bar + sum_i w_i (D_i - h_i) / sum_i w_i``, with ``h_bar`` the mean of the cache
  *before* the buffer arrived (``h_j = 0`` for a node not heard from yet when the divisor is
  the number of nodes, as in the paper), then ``h_i <- D_i``. Every node's latest direction
  stays in every step, so a buffer of a few (fast, biased) nodes no longer decides the step.
* :class:`ServerOptimizer` -- the step as a pseudo-gradient of a server optimizer (Reddi et
  al., "Adaptive Federated Optimization", ICLR 2021): ``"sgd"`` (``u = s``), ``"momentum"``
  (FedAvgM: ``m <- beta1 m + s``, ``u = m``), ``"adam"`` (FedAdam: ``m <- beta1 m +
  (1 - beta1) s``, ``v <- beta2 v + (1 - beta2) s^2``, ``u = m / (sqrt(v) + tau)``, no bias
  correction, as in the paper), ``"sign"`` (a server signSGD step, ``u = sign(s)``) and
  ``"rprop"`` (Rprop, Riedmiller and Braun, ICNN 1993, in its variant without
  backtracking: ``u = r * sign(s)`` with a per-coordinate rate ``r`` that grows by
  ``grow`` while the step's sign holds and shrinks by ``shrink`` when it flips).
* :func:`staleness_scale` -- a staleness-adaptive server learning rate: the mean over the
  buffer of FedBuff's ``1 / sqrt(1 + tau_i)`` (``tau_i`` the versions published since update
  i's base), which shrinks steps made of stale deltas.
* :class:`ModelAverage` -- Polyak averaging of the iterates on the server: the model the
  server *serves* (evaluates, returns, checkpoints) is the exponential moving average of the
  global models, ``e_t = beta_t e_{t-1} + (1 - beta_t) x_t`` with ``beta_t = min(beta,
  1 - 1/t)`` (the plain mean of the first models, then an EMA; ``e_1 = x_1``), while the
  clients keep training from ``x_t``. On label-skewed data each aggregation holds a few
  nodes' updates and the global model swings towards their labels; the average over about
  one pass of the federation (:func:`average_decay`) holds every node's recent direction.
* :class:`StepSum` -- a :class:`~flower_edge.aggregation.WeightedSum` of per-update terms whose
  ``mean`` (and leave-one-out ``mean_without``) are new global models ``x + lr * u(offset +
  scale * mean)``; with it every rule above keeps seed 001's leave-one-out values: the global
  model without update ``i`` is the same rule applied to the buffer without ``i``.

Every function takes and returns lists of float64 arrays (one per model tensor); casting back
to the model's dtypes is the caller's (``StepSum`` does it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

from flower_edge import validate
from flower_edge.aggregation import WeightedSum
from flower_edge.arrays import NDArray, cast_like, delta_reference
from flower_edge.errors import InputError

__all__ = [
    "CACHE_DIVISORS",
    "OPTIMIZERS",
    "PRESET_STEP_SEARCH",
    "CacheDivisor",
    "OptimizerName",
    "ModelAverage",
    "ServerOptConfig",
    "ServerOptimizer",
    "StepSum",
    "UpdateCache",
    "average_decay",
    "staleness_scale",
    "work_normalised_step",
]

Array = NDArray
Float64s = list[npt.NDArray[np.float64]]

OptimizerName = Literal["sgd", "momentum", "adam", "sign", "rprop"]
OPTIMIZERS: tuple[str, ...] = get_args(OptimizerName)
CacheDivisor = Literal["nodes", "seen"]
CACHE_DIVISORS: tuple[str, ...] = get_args(CacheDivisor)
#: the ``edge`` preset's server step search where a validation set values (the bundled
#: scenarios, ``deploy/app``; ``strategies.ValuationConfig.step_search``): measured on 15
#: seeds per scenario, docs/benchmarks/simulations.md, issue 10, sessions 24 and 25
PRESET_STEP_SEARCH: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0)


def _f64(arrays: Sequence[Array]) -> Float64s:
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _check_weights(weights: Sequence[float], n: int, field: str = "weights") -> list[float]:
    if len(weights) != n:
        raise InputError(f"{field} must have one entry per update ({n}), got {len(weights)}")
    out: list[float] = validate.numbers(field, weights, low=0.0, error=InputError).tolist()
    if not math.fsum(out) > 0:
        raise InputError(f"{field} must not all be 0")
    return out


def _weighted_mean(arrays: Sequence[Sequence[Array]], weights: Sequence[float]) -> Float64s:
    total = math.fsum(weights)
    out = [np.zeros(np.shape(a), dtype=np.float64) for a in arrays[0]]
    for terms, w in zip(arrays, weights, strict=True):
        if w == 0:
            continue
        for acc, a in zip(out, terms, strict=True):
            acc += (w / total) * np.asarray(a, dtype=np.float64)
    return out


def work_normalised_step(
    deltas: Sequence[Sequence[Array]], weights: Sequence[float], work: Sequence[float]
) -> tuple[Float64s, float]:
    """Return FedNova's step ``tau_eff * sum w_i (D_i / tau_i) / sum w_i`` and ``tau_eff``.

    Parameters
    ----------
    deltas : sequence of array lists
        ``D_i``, one list of arrays per update.
    weights : sequence of float
        ``w_i >= 0``, not all 0.
    work : sequence of float
        ``tau_i > 0``: the local work of update i (local steps, or samples; only the ratios
        of the ``tau_i`` to ``tau_eff`` matter).

    Raises
    ------
    InputError
        Lengths that differ, a negative or non-finite weight, all weights 0, or a
        ``tau_i <= 0``.
    """
    if not deltas:
        raise InputError("deltas must hold at least one update")
    w = _check_weights(weights, len(deltas))
    if len(work) != len(deltas):
        raise InputError(f"work must have one entry per update ({len(deltas)}), got {len(work)}")
    taus: list[float] = validate.numbers(
        "work", work, low=0.0, low_inclusive=False, error=InputError
    ).tolist()
    tau_eff = math.fsum(wi * ti for wi, ti in zip(w, taus, strict=True)) / math.fsum(w)
    normalised = [
        [np.asarray(a, dtype=np.float64) / t for a in d] for d, t in zip(deltas, taus, strict=True)
    ]
    step = [tau_eff * s for s in _weighted_mean(normalised, w)]
    return step, tau_eff


def staleness_scale(staleness: Sequence[int]) -> float:
    """Return ``mean_i 1 / sqrt(1 + tau_i)`` over the buffer (FedBuff's staleness weight).

    Raises
    ------
    InputError
        An empty buffer or a negative staleness.
    """
    if not staleness:
        raise InputError("staleness must hold at least one update")
    for i, tau in enumerate(staleness):
        validate.integer(f"staleness[{i}]", tau, low=0, error=InputError)
    return math.fsum(1.0 / math.sqrt(1.0 + t) for t in staleness) / len(staleness)


def average_decay(passes: float, nodes: int, per_aggregation: int) -> float:
    """Return ``beta = 1 - 1 / (passes * P)``, ``P = ceil(nodes / per_aggregation)``.

    ``P`` is the number of aggregations in one pass over the federation (every node's
    update once); the moving average then spans about ``passes`` passes.

    Raises
    ------
    InputError
        ``passes <= 0`` or counts below 1.
    """
    validate.number("average_passes", passes, low=0.0, low_inclusive=False, error=InputError)
    validate.integer("nodes", nodes, low=1, error=InputError)
    validate.integer("per_aggregation", per_aggregation, low=1, error=InputError)
    span = passes * math.ceil(nodes / per_aggregation)
    return max(0.0, 1.0 - 1.0 / span)


class ModelAverage:
    """The exponential moving average of the global models (see the module notes).

    Parameters
    ----------
    beta : float
        The decay in ``[0, 1)``; 0 serves the global model itself.

    Attributes
    ----------
    count : int
        Global models averaged so far (``t``).
    arrays : list of float64 arrays or None
        The average ``e_t`` (``None`` before the first model).

    Examples
    --------
    >>> import numpy as np
    >>> avg = ModelAverage(0.5)
    >>> [float(avg.update([np.array([x])])[0][0]) for x in (4.0, 0.0, 0.0, 8.0)]
    [4.0, 2.0, 1.0, 4.5]
    """

    def __init__(self, beta: float) -> None:
        self.beta = validate.number(
            "average decay beta", beta, low=0.0, high=1.0, high_inclusive=False, error=InputError
        )
        self.count = 0
        self.arrays: Float64s | None = None

    def update(self, arrays: Sequence[Array]) -> list[Array]:
        """Average in the new global model; return the served model in its dtypes.

        Float arrays are averaged; other arrays (counters such as BatchNorm's
        ``num_batches_tracked``) are served as the newest global model has them.
        """
        new = _f64(arrays)
        self.count += 1
        if self.arrays is None or len(self.arrays) != len(new):
            self.arrays = new
        else:
            beta = min(self.beta, 1.0 - 1.0 / self.count)
            self.arrays = [
                beta * e + (1.0 - beta) * x for e, x in zip(self.arrays, new, strict=True)
            ]
        return self.served(arrays)

    def served(self, like: Sequence[Array]) -> list[Array]:
        """Return the average cast to the dtypes of ``like`` (its non-float arrays as they are)."""
        if self.arrays is None:
            return list(like)
        return [
            cast_like(e, a) if np.asarray(a).dtype.kind == "f" else np.asarray(a)
            for e, a in zip(self.arrays, like, strict=True)
        ]

    def restore(self, arrays: Sequence[Array], count: int) -> None:
        """Continue from a checkpointed average of ``count`` models."""
        self.arrays = _f64(arrays)
        self.count = validate.integer("averaged models", count, low=1, error=InputError)


class UpdateCache:
    """CA2FL's cache of each node's latest delta and its calibrated step.

    Parameters
    ----------
    num_nodes : int
        Nodes of the federation, ``>= 1``; with ``divisor="nodes"`` the cached mean is over
        this many nodes (the paper: a node not heard from counts as a zero delta).
    divisor : {"nodes", "seen"} (default: "nodes")
        Divide the sum of the cached deltas by the number of nodes or by the number of
        nodes in the cache.
    """

    def __init__(self, num_nodes: int, divisor: CacheDivisor = "nodes") -> None:
        validate.integer("num_nodes", num_nodes, low=1, error=InputError)
        validate.choice("divisor", divisor, CACHE_DIVISORS, error=InputError)
        self.num_nodes = num_nodes
        self.divisor: CacheDivisor = divisor
        self._cache: dict[int, Float64s] = {}
        self._sum: Float64s | None = None

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._cache

    def get(self, node_id: int) -> Float64s | None:
        """Return the cached delta of ``node_id`` (``None`` if not cached)."""
        return self._cache.get(node_id)

    def mean(self, like: Sequence[Array]) -> Float64s:
        """Return ``h_bar``: the cached sum over the divisor (zeros shaped ``like`` if empty)."""
        if self._sum is None or not self._cache:
            return [np.zeros(np.shape(a), dtype=np.float64) for a in like]
        n = len(self._cache) if self.divisor == "seen" else max(self.num_nodes, len(self._cache))
        return [s / n for s in self._sum]

    def calibrated_step(
        self,
        deltas: Sequence[Sequence[Array]],
        weights: Sequence[float],
        node_ids: Sequence[int],
    ) -> Float64s:
        """Return ``h_bar + sum_i w_i (D_i - h_i) / sum_i w_i`` (the cache is not changed).

        ``h_i`` is node i's cached delta (zero if none). Call :meth:`store` afterwards.

        Raises
        ------
        InputError
            Lengths that differ, bad weights (see :func:`work_normalised_step`).
        """
        if not deltas:
            raise InputError("deltas must hold at least one update")
        w = _check_weights(weights, len(deltas))
        if len(node_ids) != len(deltas):
            raise InputError(
                f"node_ids must have one entry per update ({len(deltas)}), got {len(node_ids)}"
            )
        news = []
        for d, node in zip(deltas, node_ids, strict=True):
            cached = self._cache.get(node)
            d64 = _f64(d)
            news.append(
                d64 if cached is None else [a - h for a, h in zip(d64, cached, strict=True)]
            )
        step = _weighted_mean(news, w)
        return [h + s for h, s in zip(self.mean(deltas[0]), step, strict=True)]

    def store(self, node_id: int, delta: Sequence[Array]) -> None:
        """Make ``delta`` the cached delta of ``node_id`` (replacing its previous one)."""
        d64 = [a.copy() for a in _f64(delta)]
        if self._sum is None:
            self._sum = [np.zeros_like(a) for a in d64]
        old = self._cache.get(node_id)
        for i, a in enumerate(d64):
            self._sum[i] += a if old is None else a - old[i]
        self._cache[node_id] = d64

    def state(self) -> dict[int, Float64s]:
        """Return the cache (node id -> delta) for a checkpoint."""
        return dict(self._cache)

    def load(self, state: Mapping[int, Sequence[Array]]) -> None:
        """Replace the cache by ``state`` (from :meth:`state`); the sum is recomputed."""
        self._cache = {}
        self._sum = None
        for node_id in sorted(state):
            self.store(int(node_id), state[node_id])


@dataclass(frozen=True)
class ServerOptConfig:
    """The settings of a :class:`ServerOptimizer` (a record: each run builds its own state).

    Parameters
    ----------
    kind : {"sgd", "momentum", "adam", "sign", "rprop"} (default: "adam")
        As :class:`ServerOptimizer`'s.
    beta1 : float (default: 0.0)
        Momentum, in ``[0, 1)``; 0 with ``"adam"`` divides each step by the running RMS of
        the steps, coordinate by coordinate (RMSProp on the pseudo-gradient).
    beta2 : float (default: 0.99)
        Second-moment decay of ``"adam"``, in ``[0, 1)``.
    tau : float (default: 1e-3)
        Adaptivity of ``"adam"`` (``> 0``).
    bias_correction : bool (default: False)
        As :class:`ServerOptimizer`'s.
    grow, shrink, max_rate, min_rate : float (defaults: 1.2, 0.5, 4.0, 0.25)
        ``"rprop"``'s, as :class:`ServerOptimizer`'s.
    """

    kind: OptimizerName = "adam"
    beta1: float = 0.0
    beta2: float = 0.99
    tau: float = 1e-3
    bias_correction: bool = False
    grow: float = 1.2
    shrink: float = 0.5
    max_rate: float = 4.0
    min_rate: float = 0.25

    def __post_init__(self) -> None:
        self.build()  # validates every field, naming it

    def build(self) -> ServerOptimizer:
        """Return a fresh optimizer (zero moments) with these settings."""
        return ServerOptimizer(
            self.kind,
            beta1=self.beta1,
            beta2=self.beta2,
            tau=self.tau,
            bias_correction=self.bias_correction,
            grow=self.grow,
            shrink=self.shrink,
            max_rate=self.max_rate,
            min_rate=self.min_rate,
        )


class ServerOptimizer:
    """A server optimizer on the aggregated pseudo-gradient (Reddi et al., ICLR 2021).

    Parameters
    ----------
    kind : {"sgd", "momentum", "adam", "sign", "rprop"} (default: "sgd")
        ``"sgd"``: the direction is the step; ``"sign"``: its sign, coordinate by coordinate
        (a server signSGD step of ``lr`` per coordinate; no state but the step count);
        ``"rprop"``: the sign times a rate per coordinate, ``r <- min(r * grow, max_rate)``
        when the sign is the previous step's, ``max(r * shrink, min_rate)`` when it flipped,
        ``r`` unchanged after a zero (Rprop without backtracking; ``r`` starts at 1, so the
        first step is ``"sign"``'s). Its state is ``r`` and the previous sign, kept in the
        ``"m"`` and ``"v"`` slots of :meth:`state`;
        ``"momentum"``: FedAvgM, ``m <- beta1 m + s``;
        ``"adam"``: FedAdam, ``u = m / (sqrt(v) + tau)`` (no bias correction).
    beta1 : float (default: 0.9)
        Momentum, in ``[0, 1)``.
    beta2 : float (default: 0.99)
        Second-moment decay of ``"adam"``, in ``[0, 1)``.
    tau : float (default: 1e-3)
        Adaptivity of ``"adam"`` (``> 0``).
    bias_correction : bool (default: False)
        ``"adam"`` only: divide ``m`` by ``1 - beta1^t`` and ``v`` by ``1 - beta2^t`` at step
        ``t`` (Kingma and Ba's Adam). Without it (the paper's FedAdam) ``v`` starts near 0 and
        the first steps are about ``1 / sqrt(1 - beta2)`` times larger than later ones.
    grow : float (default: 1.2)
        ``"rprop"``: factor of a rate whose sign held, ``>= 1``.
    shrink : float (default: 0.5)
        ``"rprop"``: factor of a rate whose sign flipped, in ``(0, 1]``.
    max_rate, min_rate : float (defaults: 4.0, 0.25)
        ``"rprop"``: bounds of the rates, ``0 < min_rate <= 1 <= max_rate``.
    """

    def __init__(
        self,
        kind: OptimizerName = "sgd",
        *,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        bias_correction: bool = False,
        grow: float = 1.2,
        shrink: float = 0.5,
        max_rate: float = 4.0,
        min_rate: float = 0.25,
    ) -> None:
        validate.choice("kind", kind, OPTIMIZERS, error=InputError)
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            validate.probability(name, value, allow_one=False, error=InputError)
        validate.number("tau", tau, low=0.0, low_inclusive=False, error=InputError)
        validate.number("grow", grow, low=1.0, high=100.0, error=InputError)
        validate.number("shrink", shrink, low=0.0, low_inclusive=False, high=1.0, error=InputError)
        validate.number("max_rate", max_rate, low=1.0, high=1e6, error=InputError)
        validate.number(
            "min_rate", min_rate, low=0.0, low_inclusive=False, high=1.0, error=InputError
        )
        self.grow, self.shrink = float(grow), float(shrink)
        self.max_rate, self.min_rate = float(max_rate), float(min_rate)
        self.kind: OptimizerName = kind
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.tau = float(tau)
        self.bias_correction = validate.boolean(
            "bias_correction", bias_correction, error=InputError
        )
        self.m: Float64s | None = None
        self.v: Float64s | None = None
        self.steps = 0  # steps applied (t of the bias correction)

    def _moments(self, step: Float64s) -> tuple[Float64s, Float64s | None]:
        m0 = self.m if self.m is not None else [np.zeros_like(s) for s in step]
        if self.kind == "momentum":
            return [self.beta1 * m + s for m, s in zip(m0, step, strict=True)], None
        m = [self.beta1 * m + (1.0 - self.beta1) * s for m, s in zip(m0, step, strict=True)]
        v0 = self.v if self.v is not None else [np.zeros_like(s) for s in step]
        v = [self.beta2 * v + (1.0 - self.beta2) * s * s for v, s in zip(v0, step, strict=True)]
        return m, v

    def _direction(self, m: Float64s, v: Float64s | None, t: int) -> Float64s:
        if v is None:
            return m
        cm = cv = 1.0
        if self.bias_correction:
            cm, cv = 1.0 - self.beta1**t, 1.0 - self.beta2**t
        return [(mi / cm) / (np.sqrt(vi / cv) + self.tau) for mi, vi in zip(m, v, strict=True)]

    def _rprop(self, step: Float64s) -> tuple[Float64s, Float64s]:
        """Return ``"rprop"``'s new rates and the new signs (the direction is their product)."""
        rates0 = self.m if self.m is not None else [np.ones_like(s) for s in step]
        signs0 = self.v if self.v is not None else [np.zeros_like(s) for s in step]
        rates, signs = [], []
        for r, p, s in zip(rates0, signs0, step, strict=True):
            g = np.sign(s)
            agree = g * p
            grown = np.minimum(r * self.grow, self.max_rate)
            shrunk = np.maximum(r * self.shrink, self.min_rate)
            rates.append(np.where(agree > 0, grown, np.where(agree < 0, shrunk, r)))
            signs.append(g)
        return rates, signs

    def _stateless(self, s: Float64s) -> Float64s:
        """Return the direction of ``"sgd"`` (the step) or ``"sign"`` (its sign): no moments."""
        return s if self.kind == "sgd" else [np.sign(x) for x in s]

    def peek(self, step: Sequence[Array]) -> Float64s:
        """Return the direction for ``step`` without changing the optimizer's state."""
        s = _f64(step)
        if self.kind in ("sgd", "sign"):
            return self._stateless(s)
        if self.kind == "rprop":
            return [r * g for r, g in zip(*self._rprop(s), strict=True)]
        return self._direction(*self._moments(s), self.steps + 1)

    def apply(self, step: Sequence[Array]) -> Float64s:
        """Return the direction for ``step`` and advance the state (one server step)."""
        s = _f64(step)
        if self.kind in ("sgd", "sign"):
            self.steps += 1
            return self._stateless(s)
        if self.kind == "rprop":
            self.m, self.v = self._rprop(s)
            self.steps += 1
            return [r * g for r, g in zip(self.m, self.v, strict=True)]
        self.m, self.v = self._moments(s)
        self.steps += 1
        return self._direction(self.m, self.v, self.steps)

    def state(self) -> dict[str, Float64s]:
        """Return the moments (``"m"``, ``"v"`` when set) and ``"t"`` for a checkpoint."""
        out: dict[str, Float64s] = {"t": [np.array(float(self.steps))]}
        if self.m is not None:
            out["m"] = list(self.m)
        if self.v is not None:
            out["v"] = list(self.v)
        return out

    def load(self, state: Mapping[str, Sequence[Array]]) -> None:
        """Restore the moments from :meth:`state`."""
        self.m = _f64(state["m"]) if "m" in state else None
        self.v = _f64(state["v"]) if "v" in state else None
        self.steps = int(np.asarray(state["t"][0]).item()) if "t" in state else 0


class StepSum(WeightedSum):
    """A weighted sum of per-update terms whose means are new global models.

    ``mean()`` is ``x + lr * direction_fn(offset + scale * sum_i w_i t_i / sum_i w_i)``, and
    ``mean_without(i)`` the same without term i: the leave-one-out global model of seed 001
    under any of this module's rules (``t_i`` the delta, or ``D_i / tau_i`` for FedNova, or
    ``D_i - h_i`` for CA2FL with ``offset = h_bar``; ``direction_fn`` e.g.
    :meth:`ServerOptimizer.peek`). ``update(i)`` is the global model that update i alone
    would give.

    Parameters
    ----------
    global_arrays : sequence of arrays
        ``x``, the current global model (its dtypes are those of the results).
    lr : float
        Server learning rate, ``> 0``.
    offset : list of float64 arrays, optional
        Added to the mean before ``direction_fn`` (default: zeros).
    scale : float (default: 1.0)
        Multiplies the mean.
    direction_fn : callable, optional
        Maps the step to the direction (default: identity). It must not change any state:
        it is called once per leave-one-out model.
    """

    def __init__(
        self,
        global_arrays: Sequence[Array],
        lr: float,
        *,
        offset: Float64s | None = None,
        scale: float = 1.0,
        direction_fn: Callable[[Float64s], Float64s] | None = None,
    ) -> None:
        validate.number("lr", lr, low=0.0, low_inclusive=False, error=InputError)
        validate.number("scale", scale, error=InputError)
        super().__init__(delta_reference(global_arrays))  # non-float terms as int64
        self._step_global = [np.asarray(a) for a in global_arrays]
        self._step_lr = float(lr)
        self._step_offset = offset
        self._step_scale = float(scale)
        self._step_direction_fn = direction_fn

    def step_of(self, mean: Sequence[Array]) -> Float64s:
        """Return ``offset + scale * mean`` (the step before the optimizer)."""
        step = [self._step_scale * np.asarray(a, dtype=np.float64) for a in mean]
        if self._step_offset is not None:
            step = [s + o for s, o in zip(step, self._step_offset, strict=True)]
        return step

    def finish(self, mean: Sequence[Array]) -> list[Array]:
        """Return ``x + lr * direction_fn(step_of(mean))`` cast to the model's dtypes."""
        step = self.step_of(mean)
        direction = step if self._step_direction_fn is None else self._step_direction_fn(step)
        return [
            cast_like(x.astype(np.float64) + self._step_lr * d, x)
            for x, d in zip(self._step_global, direction, strict=True)
        ]

    def raw_mean(self) -> list[Array]:
        """Return ``sum_i w_i t_i / sum_i w_i`` itself (float64 for float terms)."""
        return [np.asarray(a, dtype=np.float64) for a in super().mean()]

    def mean(self) -> list[Array]:
        """Return the new global model ``x + lr * u(offset + scale * mean)``."""
        return self.finish(self.raw_mean())

    def mean_without(self, key: Hashable) -> list[Array]:
        """Return the new global model without term ``key`` (leave-one-out)."""
        return self.finish(super().mean_without(key))

    def update(self, key: Hashable) -> Sequence[Array]:
        """Return the global model that term ``key`` alone would give."""
        return self.finish(super().update(key))
