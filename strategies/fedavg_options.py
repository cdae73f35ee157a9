"""What Flower FedAvg's constructor arguments do in a semi-asynchronous strategy.

A drop-in swap (docs/dropin.md) replaces ``FedAvg(`` by ``EdgeStrategy(threshold=K, `` and
keeps the arguments. ``fraction_evaluate`` and ``min_evaluate_nodes`` are the strategy's own
(client-side evaluation); the others are read here, once, into :class:`FedAvgOptions`:

- ``weighted_by_key``, ``arrayrecord_key``, ``configrecord_key``, ``train_metrics_aggr_fn``
  and ``evaluate_metrics_aggr_fn`` are honoured as FedAvg honours them: the metric a plain
  ClientApp's replies give their example count in, the keys of the ArrayRecord and the
  ConfigRecord in the train and evaluate messages, and the functions that aggregate the
  replies' MetricRecords (``(list[RecordDict], weighted_by_key) -> MetricRecord``);
- ``min_available_nodes`` is the number of registered nodes to wait for before the first
  train message (FedAvg waits for it before each round): the loop's own ``LoopConfig.min_nodes``
  when that is not set, at least the fewest nodes that can trigger an aggregation (as FedAvg
  waits for at least its sample); a ``LoopConfig.min_nodes`` of another value is an error;
- ``fraction_train`` and ``min_train_nodes`` choose how many nodes a synchronous round trains:
  they are validated and ignored with one WARNING each that says what stands in for them.

Any other keyword is a ``TypeError`` naming it (:func:`unknown_options`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from logging import WARNING
from typing import Final

from flwr.app import MetricRecord, RecordDict
from flwr.common.logger import log

from flower_edge import validate, wire
from flower_edge.errors import ConfigError

__all__ = [
    "FEDAVG_IGNORED",
    "SYNC_HOOKS",
    "FedAvgOptions",
    "MetricsAggrFn",
    "aggregate_with",
    "overridden_hooks",
    "unknown_options",
]

#: FedAvg's ``train_metrics_aggr_fn`` / ``evaluate_metrics_aggr_fn``
MetricsAggrFn = Callable[[list[RecordDict], str], MetricRecord]

#: FedAvg's arguments that only choose how many nodes a synchronous round trains on, and what
#: stands in for each
FEDAVG_IGNORED: Final[dict[str, str]] = {
    "fraction_train": "every idle node trains; threshold K decides when to aggregate",
    "min_train_nodes": "every idle node trains; threshold K decides when to aggregate",
}
#: other Flower strategies' arguments, and where their value goes instead
_SERVER_LR = (
    "the server step is EdgeStrategy's and FedBuff's server_lr (EdgeStrategy: "
    "aggregate='deltas' for one > 1), FedAsync's alpha; there is no adaptive server optimiser"
)
ELSEWHERE: Final[dict[str, str]] = {
    "proximal_mu": "FedProx sends it to the ClientApp as train config 'proximal-mu': pass "
    "train_config=ConfigRecord({'proximal-mu': ...}) to start()",
    "eta": f"FedOpt's server learning rate: {_SERVER_LR}",
    "server_learning_rate": f"FedAvgM's: {_SERVER_LR}",
    "server_momentum": f"FedAvgM's: {_SERVER_LR}",
    "eta_l": "FedOpt's client learning rate, which FedOpt only logs: the ClientApp's own "
    "(pass it in start()'s train_config)",
    "beta_1": f"FedAdam/FedYogi's: {_SERVER_LR}",
    "beta_2": f"FedAdam/FedYogi's: {_SERVER_LR}",
    "tau": f"FedOpt's: {_SERVER_LR}",
}


@dataclass(frozen=True)
class FedAvgOptions:
    """FedAvg's record and aggregation arguments, honoured as FedAvg honours them.

    Parameters
    ----------
    weighted_by_key : str (default: "num-examples")
        The metric a plain ClientApp's train and evaluate replies give their example count in
        (a reply without it is read for ``num-examples``, flower-edge's own key).
    arrayrecord_key : str (default: "arrays")
        Key of the global model's ArrayRecord in the train and evaluate messages.
    configrecord_key : str (default: "config")
        Key of the ConfigRecord in the train and evaluate messages.
    train_metrics_aggr_fn : callable, optional
        ``fn(records, weighted_by_key) -> MetricRecord`` over the updates of an aggregation:
        one RecordDict per update holding its MetricRecord under ``"metrics"`` (the app's own
        finite metrics and ``weighted_by_key`` = its example count; no arrays). ``None``:
        averaged by the example count, FedAvg's default.
    evaluate_metrics_aggr_fn : callable, optional
        ``fn(records, weighted_by_key) -> MetricRecord`` over the contents of a round's
        evaluate replies that carry a usable example count. ``None``: FedAvg's average.
    min_available_nodes : int, optional
        Registered nodes to wait for before the first train message, at least the fewest
        that can trigger an aggregation (:meth:`nodes_to_wait`). ``None``: not given.
    """

    weighted_by_key: str = wire.NUM_EXAMPLES
    arrayrecord_key: str = wire.ARRAYS
    configrecord_key: str = wire.CONFIG
    train_metrics_aggr_fn: MetricsAggrFn | None = None
    evaluate_metrics_aggr_fn: MetricsAggrFn | None = None
    min_available_nodes: int | None = None

    def __post_init__(self) -> None:
        key = self.weighted_by_key
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(
                f"weighted_by_key must be a metric name (a non-empty str), got {key!r}"
            )
        if key != wire.NUM_EXAMPLES and key in wire.TRAIN_REPLY_KEYS:
            raise ConfigError(
                f"weighted_by_key {key!r} is a key of flower-edge's own protocol; name the "
                "metric your ClientApp puts its example count in"
            )
        validate.text("arrayrecord_key", self.arrayrecord_key)
        validate.text("configrecord_key", self.configrecord_key)
        if self.arrayrecord_key == self.configrecord_key:
            raise ConfigError(
                f"arrayrecord_key and configrecord_key must differ (both {self.arrayrecord_key!r}"
                "): a message holds both records"
            )
        for name in ("train_metrics_aggr_fn", "evaluate_metrics_aggr_fn"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name} must be callable or None, got {type(fn).__name__}")
        validate.integer("min_available_nodes", self.min_available_nodes, low=0, allow_none=True)

    def check_min_nodes(self, min_nodes: int | None) -> None:
        """Raise ConfigError if ``min_available_nodes`` and ``LoopConfig.min_nodes`` disagree."""
        given = self.min_available_nodes
        if given is not None and min_nodes is not None and given != min_nodes:
            raise ConfigError(
                f"min_available_nodes={given} and loop=LoopConfig(min_nodes={min_nodes}) both "
                "set the nodes to wait for before the first round, and disagree: pass one of them"
            )

    def nodes_to_wait(self, min_nodes: int | None, fewest: int) -> int:
        """Return the nodes to wait for before the first round.

        ``min_nodes``: ``LoopConfig.min_nodes``, which wins when set; else the larger of
        ``min_available_nodes`` and ``fewest`` (the fewest nodes that can trigger an
        aggregation), as FedAvg waits for the larger of it and the round's sample.
        """
        return min_nodes or max(self.min_available_nodes or 0, fewest)

    @classmethod
    def take(
        cls, strategy: str, unknown: dict[str, object]
    ) -> tuple[FedAvgOptions, dict[str, object]]:
        """Return the options of ``unknown`` and the keywords left (``strategy`` for the log).

        ``fraction_train`` and ``min_train_nodes`` are validated and ignored with one WARNING
        each.
        """
        rest = dict(unknown)
        taken = {name: rest.pop(name) for name in cls.__dataclass_fields__ if name in rest}
        for name, why in FEDAVG_IGNORED.items():
            if name not in rest:
                continue
            value = rest.pop(name)
            if name == "fraction_train":
                validate.probability(name, value)
            else:
                validate.integer(name, value, low=0)
            log(WARNING, "%s: %s=%r is ignored: %s (docs/dropin.md)", strategy, name, value, why)
        return cls(**taken), rest  # type: ignore[arg-type]  # checked in __post_init__

    def summary_line(self, nodes: int) -> str:
        """Describe the records' keys for the strategy's ``summary()`` (``nodes``: to wait for)."""
        fns = [
            f"{name} {getattr(fn, '__name__', type(fn).__name__)}"
            for name, fn in (
                ("train_metrics_aggr_fn", self.train_metrics_aggr_fn),
                ("evaluate_metrics_aggr_fn", self.evaluate_metrics_aggr_fn),
            )
            if fn is not None
        ]
        return (
            f"records: weighted by {self.weighted_by_key!r}, ArrayRecord key "
            f"{self.arrayrecord_key!r}, ConfigRecord key {self.configrecord_key!r}"
            + "".join(f", {fn}" for fn in fns)
            + (
                ""
                if self.min_available_nodes is None
                else f"; min_available_nodes {self.min_available_nodes}: waits for {nodes} nodes"
            )
        )


#: the synchronous Strategy hooks that a FedAvg subclass overrides, which the event loop does
#: not call, and what takes their place (``aggregate_evaluate`` is called: not listed)
SYNC_HOOKS: Final[dict[str, str]] = {
    "configure_train": "train messages are built per node and job by the event loop, with "
    "start()'s train_config and 'server-round' set to the round the update will count in",
    "aggregate_train": "each aggregation combines the buffered updates (the strategy's combine); "
    "train_metrics_aggr_fn aggregates their metrics, evaluate_fn sees each new global model",
    "configure_evaluate": "evaluate messages go to fraction_evaluate of the idle nodes after "
    "each aggregation, with start()'s evaluate_config",
}


def overridden_hooks(cls: type, base: type) -> list[str]:
    """Return the :data:`SYNC_HOOKS` that ``cls`` defines other than ``base``'s."""
    return [name for name in SYNC_HOOKS if getattr(cls, name) is not getattr(base, name)]


def aggregate_with(
    fn: MetricsAggrFn, name: str, records: list[RecordDict], key: str
) -> MetricRecord:
    """Return ``fn(records, key)``; raise ConfigError naming ``name`` unless a MetricRecord."""
    out = fn(records, key)
    if not isinstance(out, MetricRecord):
        raise ConfigError(f"{name} must return a flwr.app.MetricRecord, got {type(out).__name__}")
    return out


def unknown_options(strategy: str, unknown: dict[str, object]) -> str:
    """Return the TypeError message for keyword arguments ``strategy`` does not take."""
    parts = [
        f"an unexpected keyword argument {name!r}"
        + (f" ({ELSEWHERE[name]})" if name in ELSEWHERE else "")
        for name in sorted(unknown)
    ]
    return (
        f"{strategy} got {'; '.join(parts)}. "
        "See the drop-in guide (docs/dropin.md in the flower-edge repository) for which "
        "FedAvg arguments carry over."
    )
