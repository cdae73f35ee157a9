"""Events of the strategy loop and the queue that orders them.

Every reply to a train message, and every soft deadline, becomes an event with an event time.
:class:`EventQueue` keeps them in a heap keyed by ``(time, order, send seq, push seq)``:
event time first, replies (order 0) before deadlines (order 1) at the same time, then the
send order of the message the event belongs to. Sends happen in event order, so a message
sent at ``t`` never overtakes an older event.

The processable rule (:meth:`EventQueue.processable`): under a wall clock the head is due once
its time has passed. Under a virtual clock an event at ``t`` (of a message with send seq
``q``) is safe once no outstanding message can still produce an earlier-keyed event, i.e.
every in-flight message ``s`` has ``(s.send_time + lookahead, s.seq) > (t, q)``. The history
is then the same whatever the host's speed and the order the engine returns replies in.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Container, Iterable
from dataclasses import dataclass
from typing import Final

from strategies.records import ProfileRecord, TrainReply

__all__ = ["DEADLINE", "REPLY", "DeadlineEvent", "Event", "EventQueue", "ReplyEvent", "Sent"]

#: tie-break order of events at the same time: replies first, then deadlines
REPLY: Final = 0
DEADLINE: Final = 1


@dataclass(frozen=True)
class Sent:
    """A train message the grid accepted.

    Attributes
    ----------
    message_id : str
        Flower's message id.
    node_id, job_id : int
        Destination node and the job the message belongs to.
    send_time : float
        Clock time of the send (virtual under a virtual clock).
    real_send : float
        Real (monotonic) time of the send, for the message timeout.
    seq : int
        Send order (from :meth:`EventQueue.next_seq`).
    """

    message_id: str
    node_id: int
    job_id: int
    send_time: float
    real_send: float
    seq: int


@dataclass(frozen=True)
class ReplyEvent:
    """A reply pulled from the grid: parsed (``reply``) or rejected (``reason``).

    ``reply`` is an update or a slice report (:class:`TrainReply`), or a profile
    (:class:`ProfileRecord`) when the message asked for one. ``unavailable``: the reply is
    Flower's node-unavailable error (:func:`~strategies.records.is_node_unavailable`).
    """

    sent: Sent
    reply: TrainReply | ProfileRecord | None
    reason: str | None
    unavailable: bool = False


@dataclass(frozen=True)
class DeadlineEvent:
    """The soft deadline of a sent message, ``seconds`` after its send."""

    sent: Sent
    seconds: float


Event = ReplyEvent | DeadlineEvent


class EventQueue:
    """A heap of events ordered by ``(time, order, send seq, push seq)``."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, Event]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        """Return the number of queued events."""
        return len(self._heap)

    def next_seq(self) -> int:
        """Return the next sequence number (send order of messages, tie-break of pushes)."""
        return next(self._seq)

    def push(self, when: float, order: int, event: Event) -> None:
        """Queue ``event`` at time ``when`` (``order``: :data:`REPLY` or :data:`DEADLINE`)."""
        heapq.heappush(self._heap, (when, order, event.sent.seq, self.next_seq(), event))

    def live(self, open_ids: Container[str]) -> bool:
        """Return whether an event can still matter.

        That is a reply, or the deadline of a message in ``open_ids`` (its reply not
        processed yet): a deadline of an answered message does nothing when it fires.

        Parameters
        ----------
        open_ids : Container[str]
            Message ids sent and not answered yet (:attr:`Dispatcher.open`).
        """
        return any(
            isinstance(event, ReplyEvent) or event.sent.message_id in open_ids
            for *_, event in self._heap
        )

    def head_time(self) -> float:
        """Return the time of the earliest event (the queue must not be empty)."""
        return self._heap[0][0]

    def pop(self) -> tuple[float, Event]:
        """Remove and return the earliest event with its time."""
        when, _, _, _, event = heapq.heappop(self._heap)
        return when, event

    def processable(
        self, inflight: Iterable[Sent], *, virtual: bool, now: float, lookahead: float
    ) -> bool:
        """Return whether the earliest event may be processed now (see the module notes)."""
        if not self._heap:
            return False
        when, _, seq, _, _ = self._heap[0]
        if not virtual:
            return when <= now
        return all((s.send_time + lookahead, s.seq) > (when, seq) for s in inflight)
