"""Flower's synchronous Strategy API on a semi-asynchronous strategy, driven by hand.

``start()`` never calls ``configure_train``, ``aggregate_train`` or ``configure_evaluate``
(there are no synchronous rounds), but a user who drives a strategy round by round through
Flower's :class:`~flwr.serverapp.strategy.Strategy` methods gets FedAvg's behaviour from
them: one train message per registered node, the valid replies averaged by their example
counts, and the app's metrics averaged as FedAvg averages them.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from flower_edge import wire
from flower_edge.aggregation import weighted_average
from flower_edge.errors import InputError
from strategies.client_eval import ClientEvaluation
from strategies.evaluation import to_record
from strategies.fedavg_options import SYNC_HOOKS, FedAvgOptions, aggregate_with, overridden_hooks
from strategies.intake import averaged_app_metrics
from strategies.records import TrainReply, parse_train_reply

if TYPE_CHECKING:
    from strategies.base import SemiAsyncStrategy

__all__ = [
    "log_start",
    "warn_synchronous_use",
    "sync_aggregate_train",
    "sync_configure_evaluate",
    "sync_configure_train",
]


def warn_synchronous_use(strategy: SemiAsyncStrategy, base: type[SemiAsyncStrategy]) -> None:
    """Log once per strategy that Flower's synchronous rounds drive it, not its event loop.

    ``configure_train`` is never called by ``start()``: a call means that some loop of the
    user's runs FedAvg's rounds on the strategy, typically a FedAvg subclass whose own
    ``start()`` override (Flower's ``examples/advanced-pytorch``) was rebased on a flower-edge
    strategy; its settings block would otherwise claim a threshold, values and abandoning
    that never apply.

    Parameters
    ----------
    strategy : SemiAsyncStrategy
        The strategy whose ``configure_train`` was called.
    base : type
        The class whose ``start()`` runs the event loop.
    """
    if strategy.sync_warned:
        return
    strategy.sync_warned = True
    name = type(strategy).__name__
    # the flower-edge class the user's class derives from (EdgeStrategy, FedBuff, ...)
    ours = next(c for c in type(strategy).__mro__ if c.__module__.startswith("strategies."))
    if type(strategy).start is not base.start:
        how = f"{name}.start() overrides {ours.__name__}.start() with a round loop of its own"
        fix = "make that start() call super().start(...) instead of running rounds"
    else:
        how = (
            f"{name} is driven round by round through configure_train (by a loop of the "
            "ServerApp's, or a wrapper whose start() is Flower's: "
            "DifferentialPrivacyServerSideFixedClipping(...), say)"
        )
        fix = "call its own start(); a wrapper's rounds can only be FedAvg's"
    log(
        WARNING,
        "%s, so %s's semi-asynchronous loop does not run: these are FedAvg's synchronous "
        "rounds (every registered node trains, each round waits for all of them, the updates "
        "averaged by their example counts); threshold K, shares, values, abandoning, the stop "
        "rule and checkpoints do not apply. To run %s, %s (docs/dropin.md)",
        how,
        ours.__name__,
        ours.__name__,
        fix,
    )


def sync_configure_train(
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    grid: Grid,
    fedavg: FedAvgOptions,
) -> list[Message]:
    """Return one train message per registered node, under ``fedavg``'s record keys."""
    cfg = ConfigRecord(dict(config))
    cfg[wire.SERVER_ROUND] = server_round
    content = RecordDict({fedavg.arrayrecord_key: arrays, fedavg.configrecord_key: cfg})
    return [Message(content, node, MessageType.TRAIN) for node in grid.get_node_ids()]


def sync_aggregate_train(
    server_round: int, replies: Iterable[Message], fedavg: FedAvgOptions
) -> tuple[ArrayRecord | None, MetricRecord | None]:
    """Average valid replies by their example counts; bad replies are dropped with a WARNING.

    The metrics are the app's, averaged as FedAvg averages them, and ``participants``; or
    ``fedavg.train_metrics_aggr_fn``'s record where one is given. ``(None, None)`` when no
    reply is valid.
    """
    parsed: list[TrainReply] = []
    contents: list[RecordDict] = []
    keys: list[str] | None = None
    for msg in replies:
        if keys is None and msg.has_content() and msg.content.array_records:
            keys = list(next(iter(msg.content.array_records.values())).keys())
        try:
            reply = parse_train_reply(
                msg, keys or [], fedavg.weighted_by_key, fedavg.arrayrecord_key
            )
        except InputError as exc:
            log(
                WARNING,
                "round %s: rejected reply of node %s: %s",
                server_round,
                msg.metadata.src_node_id,
                exc,
            )
            continue
        if reply.arrays is not None:
            parsed.append(reply)
            contents.append(msg.content)
    if not parsed or keys is None:
        return None, None
    arrays = weighted_average(
        [list(r.arrays or ()) for r in parsed], [float(r.num_examples) for r in parsed]
    )
    # the app's metrics averaged by their example counts, as FedAvg's, and the count
    metrics = MetricRecord({**averaged_app_metrics(parsed), "participants": len(parsed)})
    fn = fedavg.train_metrics_aggr_fn
    if fn is not None:
        metrics = aggregate_with(fn, "train_metrics_aggr_fn", contents, fedavg.weighted_by_key)
    return to_record(keys, arrays), metrics


def log_start(
    strategy: SemiAsyncStrategy,
    base: type,
    num_rounds: int,
    initial_arrays: ArrayRecord,
    train_config: ConfigRecord | None,
    evaluate_config: ConfigRecord | None,
) -> None:
    """Log the lines of Flower's ``Strategy.start``, the settings and what start() ignores.

    ``base`` is the class whose synchronous hooks ``start()`` replaces: a subclass that
    overrides one gets a WARNING naming what takes its place.
    """
    log(INFO, "Starting %s strategy:", type(strategy).__name__)
    log(INFO, "\t├── Number of rounds (aggregations): %d", num_rounds)
    size = sum(len(array.data) for array in initial_arrays.values()) / 1024**2
    log(INFO, "\t├── ArrayRecord (%.2f MB)", size)  # the lines of Flower's Strategy.start
    for what, config in (("train", train_config), ("evaluate", evaluate_config)):
        shown = {k: "<bytes>" if isinstance(v, bytes) else v for k, v in (config or {}).items()}
        log(INFO, "\t├── ConfigRecord (%s): %s", what, shown or "(empty!)")
    strategy.summary()
    for hook in overridden_hooks(type(strategy), base):
        log(
            WARNING,
            "%s overrides %s, which start() does not call (there are no synchronous "
            "rounds): %s (docs/dropin.md)",
            type(strategy).__name__,
            hook,
            SYNC_HOOKS[hook],
        )
    if evaluate_config is not None and strategy.fraction_evaluate == 0:
        log(
            WARNING,
            "%s: evaluate_config given but fraction_evaluate is 0: no client-side "
            "evaluation (set fraction_evaluate > 0)",
            strategy.name,
        )


def sync_configure_evaluate(
    strategy: SemiAsyncStrategy,
    server_round: int,
    arrays: ArrayRecord,
    config: ConfigRecord,
    grid: Grid,
) -> list[Message]:
    """Return evaluate messages for ``strategy.fraction_evaluate`` of the registered nodes."""
    evaluation = ClientEvaluation(
        strategy.fraction_evaluate, strategy.min_evaluate_nodes, config, 3600.0, strategy.fedavg
    )
    ids = [int(n) for n in grid.get_node_ids()]
    chosen = evaluation.sample(server_round, ids, len(ids))
    return [evaluation.message(n, server_round, arrays) for n in chosen]
