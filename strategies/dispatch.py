"""Outgoing train messages: new jobs, message contents, pushes and the in-flight table.

:class:`Dispatcher` hands out job ids (unique across resumes: the k-th resume starts at
``k * JOB_EPOCH``), builds each train message (global version, job id, sample share, slice
budget, match ratio, send time, the latest values, and the global arrays when the node does
not have them yet), pushes them, and tracks every accepted message until its reply is pulled
(``inflight``) and processed (``open``). A message the grid refuses is logged; its node
waits for the next version. With a soft deadline (:mod:`strategies.deadlines`), every send
also queues a deadline event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from logging import INFO, WARNING

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies.abandon import AbandonPolicy
from strategies.clock import Clock
from strategies.config import LoopConfig
from strategies.deadlines import DeadlinePolicy
from strategies.events import DEADLINE, DeadlineEvent, EventQueue, Sent
from strategies.membership import Job, Node
from strategies.records import EventKind, ProfileRecord, TrainReply
from strategies.slices import SliceBudget

__all__ = ["JOB_EPOCH", "Dispatcher", "Recorder", "Values", "check_train_config"]

JOB_EPOCH = 1_000_000_000  # job ids of the k-th resume start at k * JOB_EPOCH


def check_train_config(train_config: ConfigRecord | None) -> None:
    """Raise ConfigError if ``train_config`` holds a key that the train messages set.

    Every train message carries the protocol's keys (:data:`flower_edge.wire.TRAIN_CONFIG_KEYS`)
    beside ``train_config``'s; a ``train_config`` entry of the same name would reach the
    ClientApp with the strategy's value instead of its own. ``server-round`` is set as
    Flower's FedAvg sets it, and is not checked.
    """
    taken = sorted(set(train_config or {}) & wire.TRAIN_CONFIG_KEYS)
    if taken:
        raise ConfigError(
            f"train_config holds {', '.join(repr(k) for k in taken)}: "
            f"{'a key' if len(taken) == 1 else 'keys'} of flower-edge's train messages, whose "
            "value the strategy sets (the ClientApp would get the strategy's value, not "
            "yours); rename it in train_config and in the ClientApp "
            "(flower_edge.wire.TRAIN_CONFIG_KEYS lists the protocol's keys)"
        )


#: ``record(node_id, job_id, kind, version)``: appends a JobEvent to the timeline
Recorder = Callable[[int, int, EventKind, int], None]
#: round, node ids and values of the last aggregation, as sent to the clients
Values = tuple[int, list[int], list[float]]


class Dispatcher:
    """Send train messages and track the ones awaiting a reply.

    Parameters
    ----------
    grid : Grid
        Flower's grid.
    clock : Clock
        The run's clock.
    loop : LoopConfig
        ``slice_budget`` and ``deadline``.
    queue : EventQueue
        Where deadline events go (and the source of send sequence numbers).
    timeout : float
        Real seconds after which an unanswered message is forgotten (its TTL).
    train_config : ConfigRecord
        Extra config of every train message.
    sends_values : bool
        Whether messages carry the latest values.
    profile_mode : str (default: "quick")
        Sent as :data:`wire.PROFILE_MODE` with a node's first message while its profile is
        requested (:attr:`Node.profile_pending`).
    profile_with_job : bool (default: False)
        Also send :data:`wire.PROFILE_WITH_JOB`: the client trains that first job and
        attaches its profile to the update (``ShareConfig.profile_with_job``).
    abandon : AbandonPolicy
        ``R`` and theta for each message (:mod:`strategies.abandon`); counts preemption
        points offered.
    record : Recorder
        Timeline callback.
    name : str
        Strategy name for the logs.
    record_keys : tuple of (str, str) (default: ("arrays", "config"))
        Keys of the ArrayRecord and the ConfigRecord in the messages (FedAvg's
        ``arrayrecord_key`` and ``configrecord_key``).
    """

    def __init__(
        self,
        grid: Grid,
        clock: Clock,
        loop: LoopConfig,
        queue: EventQueue,
        timeout: float,
        train_config: ConfigRecord,
        *,
        sends_values: bool,
        profile_mode: str = "quick",
        profile_with_job: bool = False,
        abandon: AbandonPolicy,
        record: Recorder,
        name: str,
        record_keys: tuple[str, str] = (wire.ARRAYS, wire.CONFIG),
    ) -> None:
        self.record_keys = record_keys
        self.grid = grid
        self.clock = clock
        self.loop = loop
        self.queue = queue
        self.timeout = timeout
        self.train_config = train_config
        self.sends_values = sends_values
        self.profile_mode = profile_mode
        self.profile_with_job = profile_with_job
        self.abandon = abandon
        self.slices = SliceBudget(loop, virtual=clock.is_virtual)
        self.deadlines = DeadlinePolicy(loop, virtual=clock.is_virtual, name=name)
        self.warned_virtual = False
        self.record = record
        self.name = name
        self.inflight: dict[str, Sent] = {}  # sent, reply not yet pulled
        self.open: dict[str, Sent] = {}  # sent, reply not yet processed
        self.jobs = 0
        self.job_base = 0

    def last_job_id(self) -> int:
        """Return the last job id handed out."""
        return self.job_base + self.jobs

    def resume_after(self, last_job_id: int) -> None:
        """Start job ids at the next multiple of :data:`JOB_EPOCH` above ``last_job_id``."""
        self.job_base = (last_job_id // JOB_EPOCH + 1) * JOB_EPOCH

    def start_jobs(
        self, nodes: Iterable[Node], version: int, arrays: ArrayRecord, values: Values
    ) -> None:
        """Send a new job, with the global ``arrays``, to every node ready for ``version``."""
        messages: list[tuple[Message, Node, Job, int]] = []
        for node in nodes:
            if not node.ready(version):
                continue
            self.jobs += 1
            job = Job(self.last_job_id(), node.share, self.clock.now(), version)
            node.job = job
            node.late = False
            message = self.message(node, job, version, arrays, values)
            messages.append((message, node, job, version))
        self.push(messages, version)

    def continue_job(
        self, node: Node, job: Job, version: int, arrays: ArrayRecord, values: Values
    ) -> None:
        """Send the next slice of ``job``, with ``arrays`` only if the node lacks ``version``."""
        newer = version > max(job.delivered)
        if version > job.base_version:  # the client takes the abandon decision at this slice
            self.abandon.offered()
        message = self.message(node, job, version, arrays if newer else None, values)
        self.push([(message, node, job, version if newer else -1)], version)

    def message(
        self, node: Node, job: Job, version: int, arrays: ArrayRecord | None, values: Values
    ) -> Message:
        """Build the train message of ``job`` (``arrays``: the global model, or None)."""
        cfg = ConfigRecord(dict(self.train_config))
        cfg[wire.SERVER_ROUND] = version + 1
        cfg[wire.GLOBAL_VERSION] = version
        cfg[wire.JOB_ID] = job.job_id
        if job.share > 0:  # 0 = unknown: the client uses its own default
            cfg[wire.SAMPLE_SHARE] = job.share
        cfg[wire.SLICE_BUDGET] = self.slices.current()
        cfg[wire.MATCH_RATIO] = float(node.ratio)
        if node.profile_pending and arrays is not None:
            # flower-edge clients answer with their profile only (or with the job's update
            # and the profile beside it); plain apps just train
            cfg[wire.PROFILE_MODE] = self.profile_mode
            if self.profile_with_job:
                cfg[wire.PROFILE_WITH_JOB] = True
        for key, value in self.abandon.fields(node.node_id).items():
            cfg[key] = value
        cfg[wire.SEND_TIME] = float(self.clock.now())
        if self.sends_values:
            rnd, ids, vals = values
            cfg[wire.VALUE_NODE_IDS] = list(ids)
            cfg[wire.VALUES] = list(vals)
            cfg[wire.VALUES_ROUND] = rnd
        content = RecordDict({self.record_keys[1]: cfg})
        if arrays is not None:
            content[self.record_keys[0]] = arrays
        return Message(
            content, node.node_id, MessageType.TRAIN, ttl=self.timeout, group_id=str(version + 1)
        )

    def observe(self, sent: Sent, reply: TrainReply | ProfileRecord | None) -> None:
        """Feed a pulled reply's round trip to the deadlines and the slice budget."""
        if isinstance(reply, TrainReply):
            round_trip = self.clock.real_now() - sent.real_send
            self.deadlines.observe(sent.node_id, round_trip)
            self.slices.observe(
                sent.job_id, round_trip, reply.train_seconds, restarted=reply.abandoned
            )

    def finished(self, job_id: int) -> None:
        """Forget a job that ended (abandon tally, slice seconds)."""
        self.abandon.finished(job_id)
        self.slices.finished(job_id)

    def push(self, messages: list[tuple[Message, Node, Job, int]], version: int) -> None:
        """Push ``(message, node, job, version carried or -1)``; track the accepted ones."""
        if not messages:
            return
        accepted = set(self.grid.push_messages([m for m, _, _, _ in messages]))
        now, real = self.clock.now(), self.clock.real_now()
        for msg, node, job, carried in messages:
            msg_id = msg.metadata.message_id
            if msg_id not in accepted:
                log(
                    WARNING,
                    "%s: grid refused a message to node %s; it waits for the next version",
                    self.name,
                    node.node_id,
                )
                self.record(node.node_id, job.job_id, "refused", version)
                node.job = None
                node.last_base = version
                continue
            if carried >= 0:
                job.delivered[carried] = now
            sent = Sent(msg_id, node.node_id, job.job_id, now, real, self.queue.next_seq())
            node.outstanding = msg_id
            self.inflight[msg_id] = sent
            self.open[msg_id] = sent
            deadline = self.deadlines.for_node(node.node_id)
            if deadline is not None:
                self.queue.push(now + deadline, DEADLINE, DeadlineEvent(sent, deadline))
            self.record(node.node_id, job.job_id, "sent", version)

    def push_plain(self, messages: list[Message], nodes: list[Node]) -> list[tuple[str, int]]:
        """Push messages of no job (evaluations) and track them; return (id, node) accepted.

        Each occupies its node (one message per node) until its reply is processed.
        """
        if not messages:
            return []
        accepted = set(self.grid.push_messages(messages))
        now, real = self.clock.now(), self.clock.real_now()
        out = []
        for msg, node in zip(messages, nodes, strict=True):
            msg_id = msg.metadata.message_id
            if msg_id in accepted:
                sent = Sent(msg_id, node.node_id, -1, now, real, self.queue.next_seq())
                node.outstanding = msg_id
                self.inflight[msg_id] = sent
                self.open[msg_id] = sent
                out.append((msg_id, node.node_id))
        return out

    def pull(self) -> list[Message]:
        """Pull the replies that have arrived (non-blocking)."""
        return list(self.grid.pull_messages(list(self.inflight))) if self.inflight else []

    def expire(self) -> list[Sent]:
        """Forget and return the messages unanswered for ``timeout`` real seconds."""
        real = self.clock.real_now()
        expired = [s for s in self.inflight.values() if real - s.real_send >= self.timeout]
        for sent in expired:
            del self.inflight[sent.message_id]
            self.open.pop(sent.message_id, None)
        return expired

    def event_time(self, sent: Sent, reply: TrainReply | ProfileRecord | None) -> float:
        """Return the event time of a reply (arrival, or send + virtual seconds)."""
        if not self.clock.is_virtual:
            return self.clock.now()
        seconds = reply.virtual_seconds if isinstance(reply, TrainReply) else None
        if seconds is None:  # a profile (or an evaluation) takes no virtual time
            if isinstance(reply, TrainReply) and not self.warned_virtual:
                self.warned_virtual = True
                log(
                    WARNING,
                    "%s: virtual clock but node %s sent no %s: its reply takes 0 virtual seconds",
                    self.name,
                    sent.node_id,
                    wire.VIRTUAL_SECONDS,
                )
            seconds = 0.0
        return sent.send_time + seconds

    def finish(self, poll: float) -> list[Message]:
        """Stop in-flight work at the end of a run; return the replies pulled meanwhile.

        No slice report is answered any more, so jobs in slices stop at their slice end; the
        last replies are awaited for about one round trip of their nodes (at most 60 s, none
        under a virtual clock). A whole job runs to its end on its node; its reply is dropped.
        """
        out = len(self.inflight)
        if not out:
            return []
        budget = self.slices.current()
        trips = self.deadlines.trips
        longest = max(max(trips.get(s.node_id, [0.0])) for s in self.inflight.values())
        virtual = self.clock.is_virtual
        grace = 0.0 if virtual or budget <= 0 else min(60.0, max(2 * budget, longest))
        started = self.clock.real_now()
        pulled = self.drain(grace, poll)
        log(
            INFO,
            "%s: %d %s out at the end; %s%d still out after waiting %.1f s of at most %.1f s (a "
            "whole job runs to its end on its node; its reply is dropped)",
            self.name,
            out,
            "message was" if out == 1 else "messages were",
            "jobs in slices stop at their slice end (no next slice is sent); "
            if budget > 0
            else "",
            len(self.inflight),
            self.clock.real_now() - started,
            grace,
        )
        return pulled

    def drain(self, grace: float, poll: float, wanted: set[str] | None = None) -> list[Message]:
        """Pull in-flight replies for up to ``grace`` real seconds, answering none.

        Return the replies pulled. A node whose slice report goes unanswered stops its job
        there (it gets no next slice). With ``wanted``, stop waiting once none of those
        message ids is still out.
        """
        end = self.clock.real_now() + grace
        pulled: list[Message] = []
        while self.inflight:
            for reply in self.pull():
                self.inflight.pop(reply.metadata.reply_to_message_id, None)
                pulled.append(reply)
            waiting = self.inflight if wanted is None else wanted & set(self.inflight)
            if not waiting or self.clock.real_now() >= end:
                break
            self.clock.sleep(max(min(poll, end - self.clock.real_now()), 1e-6))
        self.open.clear()
        return pulled

    def forget(self, sent: Sent) -> None:
        """Stop tracking ``sent`` (its node is gone): a later reply to it is rejected."""
        self.inflight.pop(sent.message_id, None)
        self.open.pop(sent.message_id, None)

    def oldest_real_send(self) -> float | None:
        """Return the real send time of the oldest message in flight (None if none)."""
        return min((s.real_send for s in self.inflight.values()), default=None)
