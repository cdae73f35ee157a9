"""Client-side evaluation, as Flower's strategies do it: ``fraction_evaluate`` of the nodes.

After each aggregation ``r`` the loop sends an ``evaluate`` message with the new global model
to ``max(min_evaluate_nodes, int(fraction_evaluate * nodes))`` nodes (Flower's ``FedAvg``
count), drawn (seeded by ``r``) among the idle ones (no message out: one message per node
holds for evaluation too, since Flower's simulation engine would run two messages to one
node concurrently on snapshots of its state). Their replies are averaged by
``num-examples``, as Flower's ``FedAvg`` does, into ``Result.evaluate_metrics_clientapp[r]``.
``fraction_evaluate = 0`` (the default) sends none and says so once in the log.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from logging import INFO, WARNING
from typing import Final

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log

from flower_edge import validate, wire
from strategies.config import DEFAULT_ABSURD_FACTOR
from strategies.dispatch import Dispatcher
from strategies.fedavg_options import FedAvgOptions, MetricsAggrFn, aggregate_with
from strategies.intake import absurd_examples
from strategies.membership import Node
from strategies.metric_average import average_metrics
from strategies.records import INT64_MAX, short_error

__all__ = ["NO_HANDLER_HINT", "ClientEvaluation", "aggregate_evaluate_replies"]

#: Flower's error reason for a message type that the ClientApp has no handler for
NO_HANDLER: Final = "No evaluate function registered"
#: what the log adds to it
NO_HANDLER_HINT: Final = (
    "the ClientApp has no @app.evaluate() handler: pass fraction_evaluate=0.0 to the strategy"
)


def _weight(value: object) -> int | None:
    """Return ``num-examples`` as a positive int64 (``140`` or ``140.0``), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value <= 0 or value != int(value) or value > INT64_MAX:
        return None  # beyond int64 (an integer-valued float): sums of such overflowed
    return int(value)


def aggregate_evaluate_replies(
    replies: Iterable[Message],
    asked: Mapping[str, int] | None = None,
    weight_key: str = wire.NUM_EXAMPLES,
    aggr_fn: MetricsAggrFn | None = None,
    absurd_factor: float = DEFAULT_ABSURD_FACTOR,
) -> MetricRecord | None:
    """Average the metrics of valid evaluate replies, weighted by ``num-examples``.

    As Flower's ``FedAvg`` (``aggregate_metricrecords``): numbers and lists of numbers (element
    by element) are averaged, and the weighting key itself is left out of the result. The
    weight is the strategy's ``weighted_by_key`` metric where a reply has it, else
    ``num-examples`` (a flower-edge client's key). Each metric is averaged over the replies
    that sent a usable value of it, so a node that sends ``nan``, a list of another length or
    leaves a metric out neither dilutes nor shifts the others' average (its value is skipped
    with a WARNING naming the node and the metric; the kept shape is the one most examples
    sent, whatever the order of the replies:
    :func:`~strategies.metric_average.average_metrics`). Flower's FedAvg skips the round's
    aggregation when the replies' keys differ, and raises on lists of different lengths.

    Error replies, replies without a positive ``num-examples``, with several MetricRecords
    and none named ``metrics``, or claiming more than ``absurd_factor`` times the median
    ``num-examples`` of the round's other replies (at least two; ``ShareConfig.absurd_factor``,
    the train replies' screen) are skipped, logged with the node ``asked`` maps the
    replied-to message id to (an error reply made by the SuperLink, e.g. for a node that is
    gone, carries the SuperLink's id as its source). Returns ``None`` when no reply is
    usable. ``aggr_fn`` (FedAvg's ``evaluate_metrics_aggr_fn``) aggregates the usable
    replies' contents instead, as ``aggr_fn(records, weight_key)``.
    """
    kept: list[tuple[Message, int, int, dict[str, object]]] = []
    for msg in replies:
        node = (asked or {}).get(msg.metadata.reply_to_message_id, msg.metadata.src_node_id)
        read = _read_reply(msg, weight_key)
        if isinstance(read, str):
            log(WARNING, "evaluate reply of node %s skipped: %s", node, read)
        else:
            kept.append((msg, node, *read))
    counts = {i: weight for i, (_, _, weight, _) in enumerate(kept)}
    usable: list[RecordDict] = []
    rows: list[tuple[int, int, dict[str, object]]] = []
    for i, (msg, node, weight, metrics) in enumerate(kept):
        absurd = absurd_examples(weight, i, counts, absurd_factor)
        if absurd is not None:
            log(WARNING, "evaluate reply of node %s skipped: %s", node, absurd)
            continue
        usable.append(msg.content)
        rows.append((node, weight, metrics))
    if not usable:
        return None
    if aggr_fn is not None:
        return aggregate_with(aggr_fn, "evaluate_metrics_aggr_fn", usable, weight_key)
    return MetricRecord(average_metrics(rows, "evaluate"))  # type: ignore[arg-type]


def _read_reply(msg: Message, weight_key: str) -> tuple[int, dict[str, object]] | str:
    """Return an evaluate reply's weight and its metrics (the count keys left out), or why not."""
    if msg.has_error() or not msg.has_content():
        reason = short_error(msg.error.reason or "") if msg.has_error() else "no content"
        if NO_HANDLER in reason:  # Flower's words for a ClientApp without @app.evaluate()
            reason += f" ({NO_HANDLER_HINT})"
        return reason
    records = dict(msg.content.metric_records)
    if len(records) > 1 and wire.METRICS not in records:
        return (
            f"it has {len(records)} MetricRecords {sorted(records)} and none named {wire.METRICS!r}"
        )
    metrics = records.get(wire.METRICS, next(iter(records.values()), None))
    count = weight_key if metrics is not None and weight_key in metrics else wire.NUM_EXAMPLES
    got = None if metrics is None else metrics.get(count)
    weight = _weight(got)
    if metrics is None or weight is None:
        missing = metrics is None or count not in metrics
        # a key of neither name: both are named, as a train reply's rejection does
        name = (
            f"{weight_key!r} (weighted_by_key) or {count}"
            if missing and weight_key != wire.NUM_EXAMPLES
            else count
        )
        listed = f" (its metrics: {sorted(metrics)})" if missing and metrics is not None else ""
        return (
            f"{name} must be an integer > 0 within int64 (as train replies: 140 or 140.0), "
            f"got {got!r}{listed}"
        )
    skip = (count, wire.NUM_EXAMPLES)
    return weight, {k: v for k, v in metrics.items() if k not in skip}


class ClientEvaluation:
    """Sample nodes, build evaluate messages and collect the replies of each round.

    Parameters
    ----------
    fraction : float
        ``fraction_evaluate`` in ``[0, 1]``.
    min_nodes : int
        ``min_evaluate_nodes``, ``>= 0``.
    config : ConfigRecord
        ``start``'s ``evaluate_config`` (sent with every evaluate message).
    timeout : float
        TTL of the messages.
    options : FedAvgOptions, optional
        The strategy's FedAvg options: ``weighted_by_key`` and ``evaluate_metrics_aggr_fn``
        (see :func:`aggregate_evaluate_replies`), and the messages' record keys.
    absurd_factor : float (default: 100.0)
        ``ShareConfig.absurd_factor``: the replies' screen of absurd ``num-examples``.
    """

    def __init__(
        self,
        fraction: float,
        min_nodes: int,
        config: ConfigRecord,
        timeout: float,
        options: FedAvgOptions | None = None,
        absurd_factor: float = DEFAULT_ABSURD_FACTOR,
    ) -> None:
        self.options = FedAvgOptions() if options is None else options
        self.absurd_factor = absurd_factor
        #: the strategy's own ``aggregate_evaluate(round, replies)`` where a subclass overrides it
        self.aggregate: Callable[[int, list[Message]], MetricRecord | None] | None = None
        self.fraction = validate.probability("fraction_evaluate", fraction)
        self.min_nodes = validate.integer("min_evaluate_nodes", min_nodes, low=0)
        self.config = config
        self.timeout = timeout
        self.rounds: dict[str, int] = {}  # message id -> round
        self.asked: dict[str, int] = {}  # message id -> the node it went to
        self.replies_in: dict[str, Message] = {}  # pulled, not yet processed
        self.replies: dict[int, list[tuple[Message, int]]] = {}  # round -> (reply, node asked)
        self.expected: dict[int, int] = {}
        self.asked_in: dict[int, set[int]] = {}  # round -> the nodes asked
        self.last_done: tuple[int, list[tuple[Message, int]]] | None = None  # kept replies
        self.short_noted = False  # the "fewer idle nodes than wanted" line is logged once

    @property
    def enabled(self) -> bool:
        """Return whether any evaluation is sent."""
        return self.fraction > 0

    def sample(self, rnd: int, idle: Sequence[int], registered: int) -> list[int]:
        """Return the idle nodes to evaluate round ``rnd`` on (seeded by the round)."""
        if not self.enabled or not idle:
            return []
        want = self.wanted(registered)
        pool = sorted(idle)
        if want >= len(pool):
            return pool
        rng = np.random.default_rng(rnd)
        # choose positions, not ids: numpy turns a list of ids above 2**63 (Flower's node ids
        # are uint64) into float64, which rounds them to ids that do not exist
        return sorted(pool[int(i)] for i in rng.choice(len(pool), size=want, replace=False))

    def wanted(self, registered: int) -> int:
        """Return the nodes an evaluation round asks for, as Flower's FedAvg counts them."""
        return max(self.min_nodes, int(self.fraction * registered))

    def message(self, node_id: int, rnd: int, arrays: ArrayRecord) -> Message:
        """Build the evaluate message of round ``rnd`` for ``node_id``."""
        cfg = ConfigRecord(dict(self.config))
        cfg[wire.SERVER_ROUND] = rnd
        keys = self.options.arrayrecord_key, self.options.configrecord_key
        content = RecordDict({keys[0]: arrays, keys[1]: cfg})
        return Message(content, node_id, MessageType.EVALUATE, ttl=self.timeout, group_id=str(rnd))

    def sent(self, message_id: str, rnd: int, node_id: int) -> None:
        """Track an accepted evaluate message of round ``rnd`` to ``node_id``."""
        self.rounds[message_id] = rnd
        self.asked[message_id] = node_id
        self.expected[rnd] = self.expected.get(rnd, 0) + 1
        self.asked_in.setdefault(rnd, set()).add(node_id)

    def owns(self, message_id: str) -> bool:
        """Return whether ``message_id`` is an evaluate message still awaited."""
        return message_id in self.rounds

    def received(self, reply: Message | None, message_id: str) -> int | None:
        """Take the reply (``None``: lost) to ``message_id``; return its round once complete."""
        rnd = self.rounds.pop(message_id)
        node_id = self.asked.pop(message_id)
        if reply is not None:
            self.replies.setdefault(rnd, []).append((reply, node_id))
        self.expected[rnd] -= 1
        return rnd if self.expected[rnd] == 0 else None

    def start_round(
        self, rnd: int, nodes: Iterable[Node], arrays: ArrayRecord, dispatcher: Dispatcher
    ) -> None:
        """Send global ``rnd`` to ``fraction_evaluate`` of the idle ``nodes``."""
        every = list(nodes)
        idle = {n.node_id: n for n in every if n.outstanding is None and not n.gone}
        chosen = self.sample(rnd, list(idle), len(every))
        want = self.wanted(len(every))
        if self.enabled and len(chosen) < want and not self.short_noted:
            self.short_noted = True
            log(
                INFO,
                "client-side evaluation of round %d asks %d of the %d nodes that fraction_evaluate"
                " and min_evaluate_nodes want: only idle nodes are asked (the others are "
                "training, and a semi-asynchronous run does not stop them); later rounds may ask"
                " fewer too (logged once)",
                rnd,
                len(chosen),
                want,
            )
        messages = [self.message(n, rnd, arrays) for n in chosen]
        for message_id, node_id in dispatcher.push_plain(messages, [idle[n] for n in chosen]):
            self.sent(message_id, rnd, node_id)
            dispatcher.record(node_id, -1, "sent", rnd)  # job -1: an evaluation

    def take(self, message_id: str) -> tuple[int, MetricRecord] | None:
        """Take the (pulled or lost) reply to ``message_id``; return a completed round."""
        rnd = self.received(self.replies_in.pop(message_id, None), message_id)
        metrics = None if rnd is None else self.result(rnd)
        return None if rnd is None or metrics is None else (rnd, metrics)

    def result(self, rnd: int) -> MetricRecord | None:
        """Return the aggregated metrics of round ``rnd`` (its replies kept for a top-up)."""
        self.expected.pop(rnd, None)
        replies = self.replies.pop(rnd, [])
        self.last_done = (rnd, replies)
        self.asked_in = {r: n for r, n in self.asked_in.items() if r >= rnd}
        asked = {m.metadata.reply_to_message_id: node for m, node in replies}
        if self.aggregate is not None:
            return self.aggregate(rnd, [m for m, _ in replies])
        opts = self.options
        return aggregate_evaluate_replies(
            [m for m, _ in replies],
            asked,
            opts.weighted_by_key,
            opts.evaluate_metrics_aggr_fn,
            self.absurd_factor,
        )

    def top_up(
        self,
        rnd: int,
        nodes: Sequence[Node],
        arrays: ArrayRecord,
        dispatcher: Dispatcher,
        busy: set[int],
    ) -> int:
        """Ask more nodes to evaluate the final round ``rnd`` once training has stopped.

        The final round's evaluation went to the nodes idle at its aggregation; at the end of
        the run the others are free too (``busy``: nodes whose train message is still out).
        The round is completed to the nodes ``fraction_evaluate`` and ``min_evaluate_nodes``
        want, as FedAvg's last round asks them, and its metrics are aggregated over every
        reply (a round already aggregated is aggregated again with the new replies). Return
        the number of nodes asked.
        """
        asked = set(self.asked_in.get(rnd, ()))  # a copy: sent() adds to the round's set
        need = self.wanted(len(nodes)) - len(asked) if self.enabled else 0
        free = sorted(n.node_id for n in nodes if not n.gone and n.node_id not in busy | asked)
        if need <= 0 or not free:
            return 0
        if len(free) > need:
            rng = np.random.default_rng(rnd)  # positions, not ids (see :meth:`sample`)
            free = sorted(free[int(i)] for i in rng.choice(len(free), size=need, replace=False))
        if rnd not in self.expected and self.last_done is not None and self.last_done[0] == rnd:
            self.replies[rnd] = list(self.last_done[1])  # completed: aggregate again with more
            self.expected[rnd] = 0
        by_id = {n.node_id: n for n in nodes}
        messages = [self.message(n, rnd, arrays) for n in free]
        sent = dispatcher.push_plain(messages, [by_id[n] for n in free])
        for message_id, node_id in sent:
            self.sent(message_id, rnd, node_id)
            dispatcher.record(node_id, -1, "sent", rnd)
        log(
            INFO,
            "client-side evaluation of the final round %d: %d more node(s) asked now that "
            "training has stopped (%d of the %d that fraction_evaluate and min_evaluate_nodes "
            "want)",
            rnd,
            len(sent),
            len(asked) + len(sent),
            self.wanted(len(nodes)),
        )
        return len(sent)
