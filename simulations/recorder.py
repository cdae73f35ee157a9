"""A Grid wrapper that records every train slice, for client timelines and wasted compute.

:class:`RecordingGrid` delegates every call to the Grid it wraps (Flower's simulation grid, or
``strategies.inprocess.InProcessGrid``) and notes, per train message, its node and virtual
send time (:data:`flower_edge.wire.SEND_TIME`), and per reply the metrics the client reports
(virtual duration, samples processed, done, abandoned). It never changes a message's content, so
any strategy runs through it unchanged.

Stable node ids (``stable_ids=True``, simulations): Flower's simulation engine gives its
SuperNodes random 64-bit ids, different in every run, and a strategy that sorts or numbers
nodes by id (job ids, tie breaks) would then make different choices in every run. Before
the first call, the grid asks every node its partition id (a ``query.partition`` message,
answered by the simulation ClientApp) and from then on shows the strategy the id
``partition id + 1`` of each node, translating destinations on the way out and sources on
the way back. The history of a seed is then the same in every run and on every engine.

Accounting
----------
A node's *work segment* is the list of slices since it last started a job. A reply with
:data:`~flower_edge.wire.ABANDONED` = 1 marks the segment before it as abandoned; a reply
with :data:`~flower_edge.wire.DONE` = 1 (or a reply without that key: an unmodified Flower
client) closes the segment as a delivered update. Samples processed are counted per slice
(the difference of the job's cumulative :data:`~flower_edge.wire.SAMPLES_PROCESSED`).
A delivered update is filed under its node and :data:`~flower_edge.wire.JOB_ID`, so that the
slices of an update the server did not use (rejected, left out by ``drop_worst``, never
aggregated) can be counted as wasted too (:meth:`WorkLedger.wasted_fraction`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from flwr.app import Message, RecordDict
from flwr.common import MessageType
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from flower_edge import wire
from flower_edge.errors import ConfigError, FlowerEdgeError
from strategies.clock import Clock, WallClock

__all__ = [
    "PARTITION_ACTION",
    "PARTITION_MESSAGE_TYPE",
    "RecordingGrid",
    "SliceRecord",
    "WorkLedger",
]

#: action of the simulation ClientApp's partition query (``@app.query(PARTITION_ACTION)``)
PARTITION_ACTION = "partition"
PARTITION_MESSAGE_TYPE = f"query.{PARTITION_ACTION}"


@dataclass(frozen=True)
class SliceRecord:
    """One train slice as the server saw it.

    Parameters
    ----------
    node_id : int
        Flower node id.
    start, end : float
        Virtual send time and virtual arrival time of the reply.
    samples : int
        Samples trained in this slice.
    done : bool
        Whether the reply carried a finished update.
    abandoned : bool
        Whether the client abandoned its stale job at the start of this slice.
    job_id : int, optional
        The job the reply names (:data:`~flower_edge.wire.JOB_ID`; ``None`` for an unmodified
        Flower client).
    """

    node_id: int
    start: float
    end: float
    samples: int
    done: bool
    abandoned: bool
    job_id: int | None = None


@dataclass
class WorkLedger:
    """Running account of train slices per node (see the module docstring)."""

    slices: list[SliceRecord] = field(default_factory=list)
    #: slice indices of each node's open work segment
    open_segment: dict[int, list[int]] = field(default_factory=dict)
    #: slice indices whose work was thrown away by the abandon rule
    abandoned_slices: set[int] = field(default_factory=set)
    #: slice indices of delivered updates (finished jobs)
    delivered_slices: set[int] = field(default_factory=set)
    #: (node id, job id) -> slice indices of that job's delivered update
    delivered_jobs: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    #: slice index -> virtual arrival time of the update its job delivered
    delivered_at: dict[int, float] = field(default_factory=dict)
    abandoned_jobs: int = 0
    #: node id -> partition id, when replies report it (simulations)
    partitions: dict[int, int] = field(default_factory=dict)
    _job_samples: dict[int, int] = field(default_factory=dict)

    def add(self, node_id: int, start: float, metrics: Mapping[str, object] | None) -> None:
        """Account for one train reply of ``node_id`` to a message sent at ``start``.

        ``metrics`` is the reply's MetricRecord (``None`` when it has none).
        """
        reported: Mapping[str, object] = {} if metrics is None else metrics

        def get(key: str, default: object) -> object:
            return reported.get(key, default)

        seconds = _number(get(wire.VIRTUAL_SECONDS, 0.0))
        partition = get(wire.PARTITION_ID, None)
        if isinstance(partition, int) and not isinstance(partition, bool):
            self.partitions[node_id] = partition
        done = bool(_number(get(wire.DONE, 1)))
        abandoned = bool(_number(get(wire.ABANDONED, 0)))
        cumulative = int(_number(get(wire.SAMPLES_PROCESSED, get(wire.NUM_EXAMPLES, 0))))
        job = get(wire.JOB_ID, None)
        job_id = job if isinstance(job, int) and not isinstance(job, bool) else None
        segment = self.open_segment.setdefault(node_id, [])
        if abandoned and segment:
            self.abandoned_slices.update(segment)
            self.abandoned_jobs += 1
            segment.clear()
            self._job_samples[node_id] = 0
        before = self._job_samples.get(node_id, 0)
        samples = max(cumulative - before, 0) if cumulative >= before else cumulative
        self._job_samples[node_id] = cumulative
        index = len(self.slices)
        self.slices.append(
            SliceRecord(node_id, start, start + seconds, samples, done, abandoned, job_id)
        )
        segment.append(index)
        if done:
            self.delivered_slices.update(segment)
            self.delivered_at.update(dict.fromkeys(segment, start + seconds))
            if job_id is not None:
                self.delivered_jobs[(node_id, job_id)] = list(segment)
            segment.clear()
            self._job_samples[node_id] = 0

    def samples(self, which: Iterable[int] | None = None) -> int:
        """Return the samples trained in the given slices (all slices by default)."""
        idx = range(len(self.slices)) if which is None else which
        return sum(self.slices[i].samples for i in idx)

    def slices_of(self, jobs: Iterable[tuple[int, int]]) -> set[int]:
        """Return the slice indices of the delivered updates of ``jobs`` ((node, job) pairs).

        A job whose update never arrived (or arrived without a job id) has none.
        """
        return {i for key in jobs for i in self.delivered_jobs.get(key, ())}

    def in_flight(self, end: float, wasted: Iterable[int] = ()) -> set[int]:
        """Return the slice indices of work still in flight at virtual time ``end``.

        A slice is in flight when its job was neither abandoned nor in ``wasted`` and had not
        delivered its update by ``end``: the update arrived later (a reply the grid pulled
        after the run's last aggregation) or never.
        """
        out = self.abandoned_slices | set(wasted)
        limit = end + 1e-9 * max(1.0, abs(end))  # the same sums, in another order
        return {
            i
            for i in range(len(self.slices))
            if i not in out and self.delivered_at.get(i, math.inf) > limit
        }

    def wasted_fraction(self, unused_slices: Iterable[int] = (), end: float | None = None) -> float:
        """Return the wasted share of the samples trained.

        Wasted: the abandoned slices, plus ``unused_slices`` (the slices of delivered
        updates that no aggregation used: rejected, left out, never aggregated). With
        ``end`` (the run's last virtual time), work still in flight then
        (:meth:`in_flight`) counts neither way: it is left out of the total too.
        """
        wasted = self.abandoned_slices | set(unused_slices)
        flying = set() if end is None else self.in_flight(end, wasted)
        total = self.samples() - self.samples(flying)
        if total <= 0:
            return 0.0
        return self.samples(wasted) / total


def _number(value: object) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return 0.0


class RecordingGrid(Grid):
    """Delegate to ``inner`` and record train slices in :attr:`ledger`.

    Parameters
    ----------
    inner : Grid
        The Grid to wrap.
    clock : Clock, optional
        Used by :meth:`send_and_receive` to wait between pulls (default: wall clock).
    poll_interval : float (default: 0.02)
        Real seconds between pulls in :meth:`send_and_receive`.
    """

    def __init__(
        self,
        inner: Grid,
        clock: Clock | None = None,
        poll_interval: float = 0.02,
        *,
        stable_ids: bool = False,
        num_nodes: int | None = None,
        discover_timeout: float = 300.0,
    ) -> None:
        if stable_ids and (num_nodes is None or num_nodes < 1):
            raise ConfigError(f"stable_ids needs num_nodes >= 1, got {num_nodes!r}")
        self.inner = inner
        self.clock: Clock = WallClock() if clock is None else clock
        self.poll_interval = poll_interval
        self.ledger = WorkLedger()
        self.stable_ids = stable_ids
        self.num_nodes = num_nodes
        self.discover_timeout = discover_timeout
        self._to_real: dict[int, int] | None = None
        self._to_stable: dict[int, int] = {}
        self._sent: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ stable ids
    def _discover(self) -> dict[int, int]:
        """Ask every node its partition id; return stable id -> real node id."""
        if self._to_real is not None:
            return self._to_real
        from flwr.app import ConfigRecord

        assert self.num_nodes is not None
        deadline = self.clock.real_now() + self.discover_timeout
        while len(ids := sorted(int(n) for n in self.inner.get_node_ids())) < self.num_nodes:
            if self.clock.real_now() >= deadline:
                raise FlowerEdgeError(
                    f"only {len(ids)} of {self.num_nodes} nodes registered within "
                    f"{self.discover_timeout:.0f} s"
                )
            self.clock.sleep(self.poll_interval)
        queries = [
            Message(RecordDict({wire.CONFIG: ConfigRecord()}), n, PARTITION_MESSAGE_TYPE)
            for n in ids
        ]
        pending = set(self.inner.push_messages(queries))
        mapping: dict[int, int] = {}
        while pending and self.clock.real_now() < deadline:
            got = list(self.inner.pull_messages(pending))
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            for reply in got:
                real = int(reply.metadata.src_node_id)
                metrics = (
                    reply.content.metric_records.get(wire.METRICS)
                    if not reply.has_error()
                    else None
                )
                pid = None if metrics is None else metrics.get(wire.PARTITION_ID)
                if not isinstance(pid, int):
                    # the ClientApp's own error, when it sent one, is the cause to show (found
                    # by a new-user probe: a worker that could not run the app said only this)
                    why = (
                        f": its ClientApp failed: {reply.error.reason}" if reply.has_error() else ""
                    )
                    raise FlowerEdgeError(f"node {real} did not report its partition id{why}")
                mapping[pid + 1] = real
            if pending and not got:
                self.clock.sleep(self.poll_interval)
        if pending or len(mapping) != len(ids):
            raise FlowerEdgeError(
                f"{len(pending)} of {len(ids)} nodes did not report their partition id in time, "
                "or two reported the same"
            )
        self._to_real = mapping
        self._to_stable = {real: stable for stable, real in mapping.items()}
        return mapping

    # ------------------------------------------------------------ delegation
    def set_run(self, run: Run) -> None:
        """Set the run of the wrapped grid."""
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        """Run of the wrapped grid."""
        return self.inner.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Create a message (prefer the ``Message`` constructor)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        """Return the wrapped grid's node ids (stable ids when enabled)."""
        if not self.stable_ids:
            return self.inner.get_node_ids()
        mapping = self._discover()
        alive = {int(n) for n in self.inner.get_node_ids()}
        return [stable for stable, real in sorted(mapping.items()) if real in alive]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push through the wrapped grid, noting each train message's node and send time."""
        messages = list(messages)
        if self.stable_ids:
            ids = self._push_translated(messages)
        else:
            ids = list(self.inner.push_messages(messages))
        by_id = {m.metadata.message_id: m for m in messages}
        with self._lock:
            for msg_id in ids:
                msg_or_none = by_id.get(msg_id)
                if msg_or_none is None or msg_or_none.metadata.message_type != MessageType.TRAIN:
                    continue
                msg = msg_or_none
                config = msg.content.config_records.get(wire.CONFIG)
                start = _number(config.get(wire.SEND_TIME, 0.0)) if config is not None else 0.0
                self._sent[msg_id] = (msg.metadata.dst_node_id, start)
        return ids

    def _push_translated(self, messages: list[Message]) -> list[str]:
        """Push copies addressed to the real node ids; give the originals the copies' ids.

        The wrapped grid may keep the pushed objects (Flower's in-memory link state does),
        so the originals, addressed to stable ids, are never pushed themselves.
        """
        mapping = self._discover()
        copies = [
            Message(
                m.content,
                mapping.get(m.metadata.dst_node_id, 0),  # unknown: node 0, which is refused
                m.metadata.message_type,
                ttl=m.metadata.ttl,
                group_id=m.metadata.group_id,
            )
            for m in messages
        ]
        ids = list(self.inner.push_messages(copies))
        for original, copy in zip(messages, copies, strict=True):
            # Metadata has no setter for the id; the grid set the copy's the same way
            original.metadata.__dict__["_message_id"] = copy.metadata.message_id
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull through the wrapped grid, recording each train reply."""
        replies = list(self.inner.pull_messages(message_ids))
        if self.stable_ids:
            for reply in replies:  # Metadata has no setter for the source; set the field
                src = int(reply.metadata.src_node_id)
                reply.metadata.__dict__["_src_node_id"] = self._to_stable.get(src, src)
        with self._lock:
            for reply in replies:
                sent = self._sent.pop(reply.metadata.reply_to_message_id, None)
                if sent is None or reply.has_error():
                    continue
                metrics = reply.content.metric_records.get(wire.METRICS)
                self.ledger.add(sent[0], sent[1], metrics)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push ``messages``, then pull until every reply is in or ``timeout`` passes."""
        pending = set(self.push_messages(messages))
        # timeout=None waits for every reply, but never forever (explicit deadlines only)
        deadline = self.clock.real_now() + (_FOREVER if timeout is None else timeout)
        out: list[Message] = []
        while pending:
            got = list(self.pull_messages(pending))
            out.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending:
                break
            if self.clock.real_now() >= deadline:
                break
            if not got:
                self.clock.sleep(self.poll_interval)
        return out


#: the wait of ``timeout=None``: one day of real time
_FOREVER = 24 * 3600.0
