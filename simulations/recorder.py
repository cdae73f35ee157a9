"""A Grid wrapper that records every train slice, for client timelines and wasted compute.

:class:`RecordingGrid` delegates every call to the Grid it wraps (Flower's simulation grid, or
``strategies.inprocess.InProcessGrid``) and notes, per train message, its node and virtual
send time (:data:`flower_edge.wire.SEND_TIME`), and per reply the metrics the client reports
(virtual duration, samples processed, done, abandoned). It never changes a message, so any
strategy runs through it unchanged.

Accounting
----------
A node's *work segment* is the list of slices since it last started a job. A reply with
:data:`~flower_edge.wire.ABANDONED` = 1 marks the segment before it as abandoned; a reply
with :data:`~flower_edge.wire.DONE` = 1 (or a reply without that key: an unmodified Flower
client) closes the segment as a delivered update. Samples processed are counted per slice
(the difference of the job's cumulative :data:`~flower_edge.wire.SAMPLES_PROCESSED`).
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
from strategies.clock import Clock, WallClock

__all__ = ["RecordingGrid", "SliceRecord", "WorkLedger"]


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
    """

    node_id: int
    start: float
    end: float
    samples: int
    done: bool
    abandoned: bool


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
    abandoned_jobs: int = 0
    _job_samples: dict[int, int] = field(default_factory=dict)

    def add(self, node_id: int, start: float, metrics: Mapping[str, object] | None) -> None:
        """Account for one train reply of ``node_id`` to a message sent at ``start``.

        ``metrics`` is the reply's MetricRecord (``None`` when it has none).
        """
        reported: Mapping[str, object] = {} if metrics is None else metrics

        def get(key: str, default: object) -> object:
            return reported.get(key, default)

        seconds = _number(get(wire.VIRTUAL_SECONDS, 0.0))
        done = bool(_number(get(wire.DONE, 1)))
        abandoned = bool(_number(get(wire.ABANDONED, 0)))
        cumulative = int(_number(get(wire.SAMPLES_PROCESSED, get(wire.NUM_EXAMPLES, 0))))
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
        self.slices.append(SliceRecord(node_id, start, start + seconds, samples, done, abandoned))
        segment.append(index)
        if done:
            self.delivered_slices.update(segment)
            segment.clear()
            self._job_samples[node_id] = 0

    def samples(self, which: Iterable[int] | None = None) -> int:
        """Return the samples trained in the given slices (all slices by default)."""
        idx = range(len(self.slices)) if which is None else which
        return sum(self.slices[i].samples for i in idx)

    def wasted_fraction(self, rejected_slices: Iterable[int] = ()) -> float:
        """Return abandoned (plus ``rejected_slices``) samples over all samples trained."""
        total = self.samples()
        if total == 0:
            return 0.0
        wasted = self.abandoned_slices | set(rejected_slices)
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
        self, inner: Grid, clock: Clock | None = None, poll_interval: float = 0.02
    ) -> None:
        self.inner = inner
        self.clock: Clock = WallClock() if clock is None else clock
        self.poll_interval = poll_interval
        self.ledger = WorkLedger()
        self._sent: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

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
        """Return the wrapped grid's node ids."""
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Push through the wrapped grid, noting each train message's node and send time."""
        messages = list(messages)
        ids = list(self.inner.push_messages(messages))
        by_id = {m.metadata.message_id: m for m in messages}
        with self._lock:
            for msg_id in ids:
                msg = by_id.get(msg_id)
                if msg is None or msg.metadata.message_type != MessageType.TRAIN:
                    continue
                config = msg.content.config_records.get(wire.CONFIG)
                start = _number(config.get(wire.SEND_TIME, 0.0)) if config is not None else 0.0
                self._sent[msg_id] = (msg.metadata.dst_node_id, start)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Pull through the wrapped grid, recording each train reply."""
        replies = list(self.inner.pull_messages(message_ids))
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
