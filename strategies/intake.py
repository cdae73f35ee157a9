"""Intake of finished updates: checks, the buffered :class:`Update`, and the buffer's screen.

Functions over a :class:`~strategies.loop.EventLoop`:

- :func:`accept_finished`: check a finished reply (staleness bound, lateness, arrays that fit
  the global model, ``num-examples`` against the job's share) and build its :class:`Update`,
  or reject it with a logged reason that names the field;
- :func:`train_metrics`: the Result's train metrics of an aggregation, with the app's own
  metrics averaged by ``num-examples`` as Flower's FedAvg does;
- :func:`note_ignored_records`: say once per node that a reply's extra records are unread;
- :func:`screen_buffer`: before an aggregation, reject every buffered update without a known
  share (an unmodified ClientApp, whose ``num-examples`` is its weight basis) that claims more
  than ``ShareConfig.absurd_factor`` times the median of the other nodes' reports
  (:func:`absurd_examples`). It runs at the trigger rather than at
  arrival so that the first updates of a run, which have no reference yet, are screened too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from logging import WARNING
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import Message, MetricRecord, RecordDict
from flwr.common.logger import log

from flower_edge import wire
from flower_edge.aggregation import check_update, update_too_far
from flower_edge.arrays import NDArray
from strategies.fedavg_options import FedAvgOptions, aggregate_with
from strategies.membership import Job, Node
from strategies.metric_average import average_metrics
from strategies.records import AggregationRecord, TrainReply, Update, parse_reply_for

if TYPE_CHECKING:
    from strategies.loop import EventLoop

__all__ = [
    "INTEGER_MODEL_HINT",
    "INTEGER_REPLY_HINT",
    "absurd_examples",
    "note_ignored_records",
    "parse_train_reply",
    "accept_finished",
    "averaged_app_metrics",
    "metric_records",
    "name_array",
    "screen_buffer",
    "train_metrics",
    "update_problem",
]


def accept_finished(
    loop: EventLoop, node: Node, job: Job, reply: TrainReply, when: float
) -> Update | None:
    """Return the :class:`Update` of a finished reply, or ``None`` after rejecting it."""
    base = job.base_version if reply.base_version is None else reply.base_version
    reason = update_problem(
        reply,
        job.share,
        loop.version - base,
        late=node.late,
        loop=loop.strategy.loop,
        absurd_factor=loop.strategy.shares.absurd_factor,
        global_arrays=loop.global_arrays,
        keys=loop.keys,
    )
    if reason is not None:
        loop.reject(node, job.job_id, reason)
        return None
    loop.note_abandon(node, job, reply, base)  # restarted jobs can finish in one slice
    # dt runs from the send of the global the update started from (after an abandon, the
    # newer global the node restarted from), not from the job's first message
    delay = max(when - job.delivered[base], 0.0)
    if job.abandoned == 0 and job.share > 0:
        loop.planner.observe(node, job.share, max(when - job.started_at, 0.0))
    loop.reported[node.node_id] = reply.num_examples
    return Update(
        node_id=node.node_id,
        job_id=job.job_id,
        base_version=base,
        arrays=reply.arrays or (),
        num_examples=reply.num_examples,
        share=job.share,
        delay=delay,
        received_at=when,
        late=node.late,
        train_loss=reply.train_loss,
        app_metrics=reply.app_metrics,
    )


def screen_buffer(loop: EventLoop) -> None:
    """Reject the buffered updates whose ``num-examples`` is absurd (see the module doc)."""
    factor = loop.strategy.shares.absurd_factor
    kept = []
    for update in loop.buffer:
        reason = None
        if update.share <= 0:
            reason = absurd_examples(update.num_examples, update.node_id, loop.reported, factor)
        if reason is None:
            kept.append(update)
            continue
        loop.reported.pop(update.node_id, None)  # never a reference for the others
        node = loop.nodes.get(update.node_id)
        if node is not None and node.job is None:
            loop.reject(node, update.job_id, reason)
        else:  # the node has moved on to a new job: log and record only
            loop.record_rejection(update.node_id, update.job_id, reason)
    loop.buffer = kept


def train_metrics(
    record: AggregationRecord,
    updates: Sequence[Update],
    abandoned_total: int,
    options: FedAvgOptions | None = None,
) -> MetricRecord:
    """Return the Result's ``train_metrics_clientapp`` entry of an aggregation.

    The app's own metrics are averaged by ``num-examples`` (:func:`averaged_app_metrics`),
    or aggregated by ``options.train_metrics_aggr_fn`` (FedAvg's) over one RecordDict per
    update: its app metrics and ``weighted_by_key`` = its example count under ``"metrics"``.
    """
    out: dict[str, int | float | list[int] | list[float]] = {
        "participants": len(record.participants),
        "mean-staleness": float(np.mean(record.staleness)),
        "max-staleness": int(max(record.staleness)),
        "mean-delay": float(np.mean(record.delays)),
        "clock-time": float(record.time),
        "late-updates": sum(record.late),
        "abandoned-jobs": abandoned_total,
        "num-examples": sum(u.num_examples for u in updates),
    }
    # a loss whose product with its num-examples overflows (1e300 x 2**62) is left out
    losses = [(u.train_loss, u.num_examples) for u in updates if u.train_loss is not None]
    losses = [(x, n) for x, n in losses if math.isfinite(x * n)]
    loss = math.fsum(x * n for x, n in losses) / sum(n for _, n in losses) if losses else None
    if loss is not None and math.isfinite(loss):
        out["train-loss"] = loss
    fn = None if options is None else options.train_metrics_aggr_fn
    app: Mapping[str, Any] = averaged_app_metrics(updates)
    if fn is not None and options is not None:
        key = options.weighted_by_key
        app = aggregate_with(fn, "train_metrics_aggr_fn", metric_records(updates, key), key)
    for key, mean in app.items():
        out.setdefault(key, mean)  # the strategy's own keys win a clash
    per_node: dict[str, float] = {}
    for node_id, value, weight in zip(
        record.participants, record.values, record.weights, strict=True
    ):
        per_node[f"value-{node_id}"] = per_node.get(f"value-{node_id}", 0.0) + value
        per_node[f"weight-{node_id}"] = per_node.get(f"weight-{node_id}", 0.0) + weight
    out.update(per_node)
    return MetricRecord(out)


def metric_records(updates: Sequence[Update], weight_key: str) -> list[RecordDict]:
    """Return one RecordDict per update for FedAvg's ``train_metrics_aggr_fn``.

    Each holds a MetricRecord under ``"metrics"``: the update's app metrics
    (:attr:`~strategies.records.Update.app_metrics`) and ``weight_key`` = its example count.
    """
    out = []
    for u in updates:
        metrics: dict[str, int | float | list[float]] = {
            k: list(v) if isinstance(v, tuple) else v for k, v in u.app_metrics
        }
        metrics[weight_key] = u.num_examples
        out.append(RecordDict({wire.METRICS: MetricRecord(metrics)}))  # type: ignore[arg-type]
    return out


def averaged_app_metrics(
    updates: Sequence[Update] | Sequence[TrainReply],
) -> dict[str, float | list[float]]:
    """Return each app metric averaged by ``num-examples`` over the updates that sent it.

    This is what Flower's FedAvg does with the train metrics (``aggregate_metricrecords``
    weighted by ``num-examples``), so an app's ``train_loss`` reads the same under both.
    Lists are averaged element by element. A value of another shape than the one most
    examples sent (a list of another length, a number among lists), or whose product with its
    ``num-examples`` would make the sum overflow, is left out with a WARNING naming the metric
    and the node (:func:`~strategies.metric_average.average_metrics`).
    """
    rows = [(u.node_id, u.num_examples, dict(u.app_metrics)) for u in updates]
    return average_metrics(rows, "train")


def parse_train_reply(loop: EventLoop, msg: Message, node_id: int) -> tuple[Any, str | None]:
    """Parse the reply ``msg`` of ``node_id`` to a train message (:func:`parse_reply_for`).

    Returns the parsed reply (``None`` when rejected) and the reason of a rejection; a
    :class:`TrainReply`'s unread records are noted (:func:`note_ignored_records`).
    """
    reply, reason = parse_reply_for(
        msg,
        node_id,
        loop.keys,
        virtual=loop.clock.is_virtual,
        weight_key=loop.strategy.weighted_by_key,
        arrays_key=loop.strategy.arrayrecord_key,
    )
    if isinstance(reply, TrainReply):
        note_ignored_records(loop, msg.content, node_id)
    return reply, reason


def note_ignored_records(loop: EventLoop, content: RecordDict, node_id: int) -> None:
    """Log, once per node, the ArrayRecords and MetricRecords of a train reply left unread.

    A reply is read for one ArrayRecord (the strategy's ``arrayrecord_key``, else ``arrays``,
    else the only one) and one MetricRecord (``metrics``, or the only one); any other is
    ignored. Flower's FedAvg refuses such a reply's whole round ("Expected exactly one
    ArrayRecord"); here the update stands.
    """
    extra, read = [], []
    for records, preferred in (
        (dict(content.array_records), (loop.strategy.arrayrecord_key, wire.ARRAYS)),
        (dict(content.metric_records), (wire.METRICS,)),
    ):
        used = next((k for k in preferred if k in records), next(iter(records), None))
        read.append(repr(used))
        extra += sorted(key for key in records if key != used)
    if extra and node_id not in loop.noted_extra:
        loop.noted_extra.add(node_id)
        log(
            WARNING,
            "%s: train reply of node %s carries records %s besides the %s ArrayRecord and the "
            "%s MetricRecord read: they are ignored, the update stands (logged once per node)",
            loop.name,
            node_id,
            extra,
            *read,
        )


def absurd_examples(
    num_examples: int, node_id: int, reported: Mapping[int, int], factor: float
) -> str | None:
    """Return why ``num_examples`` is absurd beside the other nodes' reports (else ``None``).

    For an update without a known share (an unmodified ClientApp), ``num-examples`` is its
    weight basis: one node that claims 10**9 examples would take the aggregate over. It is
    absurd when it is more than ``factor`` times the median of the latest accepted report of
    every *other* node in ``reported`` (at least two of them; fewer give no reference).
    """
    others = [n for nid, n in reported.items() if nid != node_id]
    if len(others) < 2:
        return None
    median = float(np.median(others))
    if num_examples > factor * median:
        return (
            f"absurd {wire.NUM_EXAMPLES} {num_examples}: more than {factor:g}x the median "
            f"({median:g}) of the other nodes' reports"
        )
    return None


def name_array(reason: str, keys: Sequence[str]) -> str:
    """Return ``reason`` with its leading ``array i`` named by the model key, when known."""
    head, _, rest = reason.partition(" ")
    index, _, tail = rest.partition(" ")
    if head == "array" and index.isdigit() and int(index) < len(keys):
        return f"array {index} ({keys[int(index)]!r}) {tail}"
    return reason


#: the tails of check_update's reasons for an array of the other kind than the model's
#: (float where the global model's is an integer or bool one, or the reverse)
_FLOAT_FOR_INT = "expected non-float like"
_INT_FOR_FLOAT = "expected float like"
#: appended to the first: FedAvg averages such an array into float64, this strategy keeps the
#: model's dtypes (docs/dropin.md)
INTEGER_MODEL_HINT = (
    " (the initial model's array is an integer or bool one, which the strategy keeps: build "
    "initial_arrays with a float dtype for the arrays the ClientApp trains, e.g. "
    "np.array(..., dtype=np.float64); FedAvg would average it into float64)"
)
#: appended to the second
INTEGER_REPLY_HINT = (
    " (the strategy keeps the initial model's float dtype: send this array back as float, "
    "e.g. with .astype(np.float64), or build initial_arrays with the integer dtype the "
    "ClientApp sends; FedAvg would average it into float64)"
)


def _kind_hint(reason: str) -> str:
    """Return how to fix an array of the other kind than the model's (``""`` for others)."""
    if _FLOAT_FOR_INT in reason:
        return INTEGER_MODEL_HINT
    return INTEGER_REPLY_HINT if _INT_FOR_FLOAT in reason else ""


def update_problem(
    reply: TrainReply,
    share: int,
    staleness: int,
    *,
    late: bool,
    loop: Any,
    absurd_factor: float,
    global_arrays: Sequence[NDArray],
    keys: Sequence[str] = (),
) -> str | None:
    """Return why a finished update cannot enter the buffer (``None`` if it can).

    ``loop`` is the strategy's ``LoopConfig`` (``staleness_bound``, ``accept_late``); the
    arrays must fit ``global_arrays`` (a bad array is named by its index and, given the
    model's ``keys``, its name); more than ``absurd_factor`` times a known ``share`` of
    examples is absurd.
    """
    bound = loop.staleness_bound
    if bound is not None and staleness > bound:
        return f"staleness {staleness} beyond the bound {bound}"
    if late and not loop.accept_late:
        return "missed its deadline (accept_late is off)"
    reason = check_update(list(reply.arrays or ()), list(global_arrays))
    if reason is None and loop.max_update_ratio is not None:
        reason = update_too_far(
            list(reply.arrays or ()), list(global_arrays), loop.max_update_ratio
        )
    if reason is not None:
        return name_array(reason, keys) + _kind_hint(reason)
    if share > 0 and reply.num_examples > absurd_factor * share:
        return f"absurd {wire.NUM_EXAMPLES} {reply.num_examples} for a share of {share}"
    return None
