"""EdgeStrategy: semi-asynchronous, threshold-triggered, time-decayed aggregation with values.

Seed 001 (``../shared/seeds/001_895444edf83ec060.txt``; DESIGN.md "Seed 001"): the server
aggregates as soon as the number of received local models exceeds the threshold K, weights
each by ``c_i * g(dt_i)`` (``c_i`` its sample share, ``g`` a decreasing function of its delay),
values every participant by leave-one-out on the server's test metric, and sends the values
back so that clients still training on a stale global can decide to abandon it. Sample shares
come from seed 000 (resource profiles -> distorted radar match ratios -> shares, rebalanced
after each aggregation from each node's fitted ``T = k f + b``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final, Literal, Unpack, get_args

import numpy as np

from flower_edge import validate
from flower_edge.aggregation import WeightedSum
from flower_edge.arrays import NDArray, cast_like, delta_reference
from flower_edge.errors import ConfigError
from flower_edge.server_opt import ServerOptConfig, ServerOptimizer, staleness_scale
from strategies.base import SemiAsyncStrategy, StrategyOptions
from strategies.config import (
    DEFAULT_PATIENCE,
    DEFAULT_PATIENCE_PASSES,
    DEFAULT_WINDOW_PASSES,
    ShareConfig,
    StopConfig,
)
from strategies.records import Combined, Update

__all__ = ["AGGREGATES", "PRESETS", "PRESET_SHARES", "Aggregate", "EdgeStrategy", "PresetName"]

Aggregate = Literal["models", "deltas"]
AGGREGATES: tuple[str, ...] = get_args(Aggregate)
"""What EdgeStrategy averages: the local models (the seed) or their deltas from their bases."""

PresetName = Literal["edge", "edge-seed"]
#: EdgeStrategy's method options in each preset (measured in docs/benchmarks/simulations.md):
#: ``edge`` is the project's best configuration, ``edge-seed`` the seeds' rule exactly
PRESETS: Final[Mapping[str, Mapping[str, Any]]] = {
    "edge": {
        "aggregate": "deltas",
        "server_lr": 0.03,
        "staleness_lr": True,
        "average_passes": 1.0,
        "serve_better": True,
        "server_opt": ServerOptConfig("sign"),
    },
    "edge-seed": {
        "aggregate": "models",
        "server_lr": 1.0,
        "staleness_lr": False,
        "average_passes": None,
        "serve_better": False,
        "server_opt": None,
    },
}
#: the ShareConfig fields each preset sets (where the user's ShareConfig keeps the default):
#: ``edge`` caps a node's share at 2.5 epochs of its own data (1.25x the bundled scenarios' 2
#: local epochs, so match-ratio shares stay live; docs/benchmarks/simulations.md, issue 10
#: session 6); the seed's shares are uncapped
PRESET_SHARES: Final[Mapping[str, Mapping[str, Any]]] = {
    "edge": {"max_epochs": 2.5},
    "edge-seed": {"max_share_fraction": 1.0, "max_epochs": None, "zero_ratio": "none"},
}


def _delta(array: NDArray, base: NDArray) -> NDArray:
    """``array - base`` in float64 (float tensors) or int64 (integer counters).

    Always an array: numpy makes a scalar of the difference of two 0-d arrays (batch norm's
    ``num_batches_tracked``), which the running sum refuses.
    """
    dtype = np.float64 if np.asarray(base).dtype.kind == "f" else np.int64
    return np.asarray(np.asarray(array, dtype=dtype) - np.asarray(base, dtype=dtype))


class _StepSum(WeightedSum):
    """A :class:`WeightedSum` whose means are new global models ``x + lr * u(step)``.

    ``deltas=False``: the sum holds local models ``x_i`` and ``step = mean - x``;
    ``deltas=True``: it holds deltas ``x_i - x_base_i`` and ``step = mean``. Leave-one-out
    means (``mean_without``) are the new global without update i, the same way, and
    :meth:`update` returns the model that update i alone would give, so first-order values
    see the same geometry as with the seed's rule. ``u`` is the identity, or with an
    ``optimizer`` its direction for the float tensors' step (peeked: every candidate sees the
    same optimizer state; integer tensors take the mean change itself, at lr 1);
    :meth:`commit` then applies
    the step of the candidate that became the global model, once.
    """

    def __init__(
        self,
        global_arrays: Sequence[NDArray],
        lr: float,
        *,
        deltas: bool,
        optimizer: ServerOptimizer | None = None,
    ) -> None:
        # deltas of a bool or uint8 array are int64 (negative when a value goes down)
        super().__init__(delta_reference(global_arrays) if deltas else global_arrays)
        self._global = [np.asarray(a) for a in global_arrays]
        self._lr = lr
        self._deltas = deltas
        self._optimizer = optimizer
        self._floats = [a.dtype.kind == "f" for a in self._global]

    def _steps(self, arrays: Sequence[NDArray]) -> list[NDArray]:
        steps = [np.asarray(a, dtype=np.float64) for a in arrays]
        if not self._deltas:
            steps = [s - x.astype(np.float64) for s, x in zip(steps, self._global, strict=True)]
        return steps

    def _finish(self, arrays: Sequence[NDArray]) -> list[NDArray]:
        steps = self._steps(arrays)
        lrs = [self._lr] * len(steps)
        if self._optimizer is not None:
            pairs = zip(steps, self._floats, strict=True)
            moved = iter(self._optimizer.peek([s for s, f in pairs if f]))
            steps = [next(moved) if f else s for s, f in zip(steps, self._floats, strict=True)]
            # counters and masks take the mean change itself: the optimizer's lr is a step
            # per coordinate of the float tensors (0.03 x a counter's +4 would round to 0)
            lrs = [self._lr if f else 1.0 for f in self._floats]
        return [
            cast_like(x.astype(np.float64) + lr * step, x)
            for step, x, lr in zip(steps, self._global, lrs, strict=True)
        ]

    def commit(self, key: Hashable | None) -> None:
        """Advance the optimizer with the step of the full mean (``None``) or of ``key``'s."""
        if self._optimizer is None:
            return
        steps = self._steps(super().mean() if key is None else super().mean_without(key))
        self._optimizer.apply([s for s, f in zip(steps, self._floats, strict=True) if f])

    def mean(self) -> list[NDArray]:
        return self._finish(super().mean())

    def mean_without(self, key: Hashable) -> list[NDArray]:
        return self._finish(super().mean_without(key))

    def update(self, key: Hashable) -> Sequence[NDArray]:
        return self._finish(super().update(key))


class EdgeStrategy(SemiAsyncStrategy):
    """The semi-asynchronous edge strategy of seed 001 on Flower's Message API.

    Aggregation trigger: after a finished update is accepted, if the number of accepted
    updates since the last aggregation is **greater than** K (``> threshold``, as the seed
    has it), those updates are aggregated and the count restarts from 0. With K = 3 the
    4th update triggers.

    Weights: ``w_i = c_i * g(dt_i)``; ``c_i`` the job's sample share (``ShareConfig.weight_by``),
    ``g`` the decay chosen by name (``"exponential"``, ``"polynomial"``, ``"hinge"``,
    ``"constant"``) or a callable, ``dt_i`` the receive time of the update minus the send time
    of the global it started from, on the server's clock (virtual under a virtual clock). The
    new global model is ``sum_i w_i x_i / sum_i w_i``.

    Values: leave-one-out on ``evaluate_fn``'s metric (``ValuationConfig``): contribution
    ``metric(x) - metric(x_{-i})`` (reversed for a loss), value = contribution / sum of
    contributions after clamping negatives to 0; equal values when no contribution is
    positive or without an ``evaluate_fn``. Values go into the next train messages and into
    ``Result.train_metrics_clientapp[r]["value-<node id>"]``.

    Not in the seed (options; the defaults are the seed's rule): ``server_lr`` (``eta``)
    moves the global model only part of the way, ``x <- x + eta (sum_i w_i x_i / sum_i w_i -
    x)``; ``aggregate="deltas"`` averages each update's change from the global model it
    started from instead of the model itself, ``x <- x + eta sum_i w_i (x_i - x_base_i) /
    sum_i w_i``. With many nodes and few participants per aggregation, updates are several
    versions stale, and averaging their full models pulls the global back towards those old
    versions; averaging deltas keeps the progress made since (docs/strategy.md, *Weights*).

    Parameters
    ----------
    threshold : int
        K, ``>= 1`` and ``<`` the number of nodes.
    aggregate : {"models", "deltas"} (default: "models")
        Average the local models (the seed) or their deltas from their base models.
    server_lr : float (default: 1.0)
        ``eta`` in ``(0, 1]`` for ``"models"``, ``> 0`` for ``"deltas"``.
    staleness_lr : bool (default: False)
        Scale ``eta`` at each aggregation by ``mean_i 1 / sqrt(1 + tau_i)`` over the buffer
        (``tau_i`` the versions published since update i's base; FedBuff's staleness weight,
        Nguyen et al., AISTATS 2022): steps made of stale updates are shorter, which lets a
        larger ``eta`` stay stable (:func:`flower_edge.server_opt.staleness_scale`).
    average_passes : float, optional
        Serve the moving average of the global models over about this many passes of the
        federation (:class:`flower_edge.server_opt.ModelAverage`, decay
        :func:`~flower_edge.server_opt.average_decay` with ``P = ceil(nodes / (K + 1))``
        aggregations per pass): it is what ``evaluate_fn`` scores for the Result and the
        convergence stop, and what ``Result.arrays`` holds; the clients keep training from
        the global model itself, and leave-one-out values are computed on it. ``None`` (the
        seed): the global model is served.
    serve_better : bool (default: False)
        With ``average_passes`` and an ``evaluate_fn``: after each aggregation, serve
        whichever of the global model and its average scores better on the valuation metric
        (``ValuationConfig.metric_key`` and ``higher_is_better``; a tie keeps the average).
        Early in a run the average lags behind the global model; later it smooths the noise
        of asynchronous steps: this serves the better of the two at every point. Score on a
        validation set of the server's, not on the test set you report. The choice is
        logged (``served=global``) and counted in the train metrics (``served-global``);
        after a resume the average is served until the next aggregation.
    server_opt : ServerOptConfig, optional
        With ``aggregate="deltas"``: a server optimizer on the aggregated pseudo-gradient
        (Reddi et al., "Adaptive Federated Optimization", ICLR 2021): the new global model
        is ``x + eta * u(step)``, ``u`` FedAvgM's momentum or FedAdam's ``m / (sqrt(v) +
        tau)`` (:class:`flower_edge.server_opt.ServerOptimizer`); every leave-one-out model
        is the same rule without update i, and the optimizer steps once per aggregation,
        with the model that became the global one. Its moments are checkpointed. ``None``
        (the seed): ``u`` is the step itself.
    **options : StrategyOptions
        See :class:`~strategies.base.SemiAsyncStrategy` (typed; an unknown keyword raises
        ``TypeError``).

    Examples
    --------
    >>> from strategies import EdgeStrategy
    >>> strategy = EdgeStrategy(threshold=4, decay="polynomial", decay_a=0.5)
    >>> stale_ok = EdgeStrategy(threshold=10, aggregate="deltas", server_lr=0.5)
    """

    name = "edge"
    #: the seed ends the task when the global model converges: a plateau stop by default, on
    #: the mean metric of the last pass, after 4 passes over the federation without a new best
    default_stop = StopConfig(
        patience=DEFAULT_PATIENCE,
        patience_passes=DEFAULT_PATIENCE_PASSES,
        window_passes=DEFAULT_WINDOW_PASSES,
    )

    def __init__(
        self,
        threshold: int,
        *,
        aggregate: Aggregate = "models",
        server_lr: float = 1.0,
        staleness_lr: bool = False,
        average_passes: float | None = None,
        serve_better: bool = False,
        server_opt: ServerOptConfig | None = None,
        **options: Unpack[StrategyOptions],
    ) -> None:
        super().__init__(threshold, **options)
        if server_opt is not None and not isinstance(server_opt, ServerOptConfig):
            got = type(server_opt).__name__
            raise ConfigError(f"server_opt must be a ServerOptConfig or None, got {got}")
        if server_opt is not None and aggregate != "deltas":
            raise ConfigError('server_opt needs aggregate="deltas": it steps on the mean delta')
        self.server_opt = server_opt
        #: the run's optimizer (new at a run's first aggregation; restored on resume)
        self.server_optimizer = None if server_opt is None else server_opt.build()
        self.aggregate, self.server_lr = self.validate_options(aggregate, server_lr)
        self.staleness_lr = validate.boolean("staleness_lr", staleness_lr)
        self.average_passes = validate.number(
            "average_passes", average_passes, low=0.0, low_inclusive=False, allow_none=True
        )
        self.serve_better = validate.boolean("serve_better", serve_better)
        if self.serve_better and self.average_passes is None:
            raise ConfigError(
                "serve_better=True needs average_passes: it chooses between the global model "
                "and its moving average"
            )
        self.needs_bases = self.aggregate == "deltas"

    @classmethod
    def preset(
        cls, name: PresetName, threshold: int, **options: Unpack[StrategyOptions]
    ) -> EdgeStrategy:
        """Return the ``"edge"`` (the project's best) or ``"edge-seed"`` (the seeds) strategy.

        ``"edge"``: deltas from each update's base model; the global model moves by the sign
        of their weighted mean (``server_opt=ServerOptConfig("sign")``), 0.03 per coordinate
        scaled by the buffer's mean ``1/sqrt(1 + tau)`` (``server_lr``, ``staleness_lr``),
        shares capped at 2.5 epochs of each node's own data, the served model averaged over
        one pass (``average_passes``) or the global model when it scores better
        (``serve_better``);
        every seed mechanism stays on (match-ratio shares and rebalancing, threshold K,
        decayed weights, leave-one-out values sent back, the abandon rule, the convergence
        stop). ``"edge-seed"``: the seeds' rule exactly, model
        averaging ``sum w_i x_i / sum w_i`` and uncapped shares ``F m_d / sum m``.

        Parameters
        ----------
        name : {"edge", "edge-seed"}
            The preset.
        threshold : int
            K.
        **options : StrategyOptions
            As the constructor's. A ``shares`` option keeps its own values; the preset sets
            only the :data:`PRESET_SHARES` fields that it leaves at their defaults. The
            preset's own options (:data:`PRESETS`, e.g. ``aggregate``) raise ``TypeError``.

        Examples
        --------
        >>> from strategies import EdgeStrategy
        >>> best = EdgeStrategy.preset("edge", threshold=4)
        >>> seed = EdgeStrategy.preset("edge-seed", threshold=4)
        """
        validate.choice("preset", name, tuple(PRESETS))
        own = sorted(set(PRESETS[name]) & set(options))
        if own:
            raise TypeError(
                f"EdgeStrategy.preset({name!r}) sets {', '.join(own)} itself; to choose "
                f"{'it' if len(own) == 1 else 'them'}, build EdgeStrategy(threshold, ...) with "
                "the options of the preset (strategies.edge.PRESETS)"
            )
        given = options.get("shares")
        if given is not None and not isinstance(given, ShareConfig):
            raise ConfigError(f"shares must be a ShareConfig, got {type(given).__name__}")
        shares = ShareConfig() if given is None else given
        default = ShareConfig()
        fields = {
            k: v
            for k, v in PRESET_SHARES[name].items()
            if getattr(shares, k) == getattr(default, k)
        }
        options["shares"] = dataclasses.replace(shares, **fields)
        strategy = cls(threshold, **PRESETS[name], **options)
        strategy.name = name  # its log lines say which preset ran ("[edge-seed round 3]")
        return strategy

    @staticmethod
    def validate_options(aggregate: object, server_lr: object) -> tuple[Aggregate, float]:
        """Check EdgeStrategy's own options and return them typed.

        ``aggregate`` is one of :data:`AGGREGATES`; ``server_lr`` is in ``(0, 1]`` with
        ``"models"`` and ``> 0`` with ``"deltas"``. Raises ConfigError naming the field.
        """
        mode = validate.choice("aggregate", aggregate, AGGREGATES)
        lr = validate.number(
            "server_lr",
            server_lr,
            low=0.0,
            low_inclusive=False,
            high=1.0 if mode == "models" else None,
        )
        return ("models" if mode == "models" else "deltas"), lr

    def combine(
        self,
        global_arrays: list[NDArray],
        updates: Sequence[Update],
        version: int,
        bases: dict[int, list[NDArray]],
    ) -> Combined:
        """Return the new global model (see the class notes; the default is the seed's rule).

        With ``"deltas"``, an update whose base model is no longer known (e.g. restored
        from a checkpoint) counts as a delta from the current global model.
        """
        if self.aggregate == "models" and self.server_lr == 1.0 and not self.staleness_lr:
            return super().combine(global_arrays, updates, version, bases)
        deltas = self.aggregate == "deltas"
        lr = self.server_lr
        if self.staleness_lr:
            lr *= staleness_scale([max(0, version - u.base_version) for u in updates])
        if self.server_opt is not None and version == 0:  # a new run: zero moments
            self.server_optimizer = self.server_opt.build()
        total = _StepSum(global_arrays, lr, deltas=deltas, optimizer=self.server_optimizer)
        weights = []
        for update in updates:
            weight = self.coefficient(update) * self.decay(update.delay)
            arrays: list[NDArray] = list(update.arrays)
            if deltas:
                base = bases.get(update.base_version, global_arrays)
                arrays = [_delta(a, b) for a, b in zip(arrays, base, strict=True)]
            total.add((update.node_id, update.job_id), arrays, weight, checked=True)
            weights.append(weight)
        return Combined(total.mean(), tuple(weights), total)

    def summary_lines(self) -> list[str]:
        """Return the aggregation rule's settings for ``summary()``."""
        served = (
            "the global model"
            if self.average_passes is None
            else f"its moving average over {self.average_passes:g} pass(es) of the federation"
        )
        return [
            f"aggregate: {self.aggregate}, server_lr {self.server_lr}, "
            f"staleness_lr {self.staleness_lr}, server_opt {self.server_opt}",
            f"served model: {served}"
            + (" or the global model when it scores better" if self.serve_better else ""),
        ]
