"""The event loop shared by EdgeStrategy and the FedBuff / FedAsync baselines.

:class:`EventLoop` is one ``start()`` call of a :class:`~strategies.base.SemiAsyncStrategy`:
its own loop over ``grid.push_messages`` / ``grid.pull_messages``, the handlers of replies
and deadlines, and aggregation. Side concerns live beside it: the event queue
(:mod:`strategies.events`), the nodes (:mod:`strategies.membership`), sample shares
(:mod:`strategies.shares`), server-side evaluation and values (:mod:`strategies.evaluation`),
the stop rule (:mod:`strategies.convergence`) and checkpoints (:mod:`strategies.checkpoint`).

Events and clocks
-----------------
Every reply becomes an event. Under a wall clock (deployment) its time is the reply's arrival
on the server's clock; under a :class:`~strategies.clock.VirtualClock` it is the message's
virtual send time plus the reply's ``VIRTUAL_SECONDS``, processed in the order and by the
lookahead rule of :mod:`strategies.events`, so that the history does not depend on the host's
speed. Soft deadlines are events too (virtual under a virtual clock).

Rules
-----
- A busy node never gets a second train message: one message per node is outstanding.
- A node that finishes an update, or whose reply is rejected, waits for the next global
  version before it gets a new job (an idle node whose last base is older gets one at once).
- A progress reply (slice, ``DONE = 0``) is answered at once with the same job id, the
  newest global's arrays if they are newer than anything sent to the node in this job, and the
  latest values.
- A node that misses its soft deadline is dropped from the round (marked late, not waited on).
  Its late reply is accepted once, with its decayed weight, unless ``accept_late`` is false
  or it is beyond the staleness bound.
- A message with no reply within ``timeout`` real seconds (``start``'s argument, also its
  TTL) is forgotten: a later reply to it is rejected as consumed, and the node gets a fresh job
  with the full model (this is also how a restarted node rejoins). After ``max_misses``
  forgotten messages in a row a registered node is dropped until it registers again.
- A reply that is Flower's node-unavailable error (the SuperLink's answer for a SuperNode
  whose heartbeat lapsed, e.g. killed) forgets its message and makes the node gone at once,
  as if it had left: no job until the grid lists it again. Other error replies (a ClientApp
  that raised) are rejected replies.
- Wall clock only: membership is re-read every ``max(1, 20 * poll_interval)`` s while waiting;
  nodes that left get no jobs, nodes that register (again) get jobs, new nodes join with the
  median share.
- The loop stops at the round budget, a convergence criterion, the time budget, or when no
  event can happen any more (every node gone or stuck), logging why.
"""

from __future__ import annotations

from logging import DEBUG, INFO, WARNING
from typing import TYPE_CHECKING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from flower_edge.arrays import NDArray
from flower_edge.server_opt import ModelAverage, average_decay
from strategies.abandon import AbandonPolicy
from strategies.checkpoint import open_store
from strategies.client_eval import ClientEvaluation
from strategies.convergence import ConvergenceStop
from strategies.dispatch import Dispatcher
from strategies.evaluation import (
    EvaluateFn,
    ServerEvaluation,
    Step,
    check_metric_keys,
    evaluate_served,
    to_record,
)
from strategies.events import REPLY, DeadlineEvent, EventQueue, ReplyEvent, Sent
from strategies.intake import accept_finished, parse_train_reply, screen_buffer, train_metrics
from strategies.liveness import expire, on_deadline, unavailable, unblock, wait
from strategies.membership import Job, Membership, Node
from strategies.records import (
    UNASKED_PROFILE,
    AggregationRecord,
    Combined,
    EventKind,
    JobEvent,
    ProfileRecord,
    TrainReply,
    Update,
    is_node_unavailable,
)
from strategies.resume import (
    resume_from_checkpoint,
    save_buffered_update,
    save_checkpoint,
    save_client_evaluations,
)
from strategies.shares import SharePlanner, profile_beside

if TYPE_CHECKING:
    from strategies.base import SemiAsyncStrategy

__all__ = ["STALLED", "Combined", "EventLoop", "Update"]

#: the stop reason of a run whose nodes are all gone: it is not marked finished, so that a
#: later start in the same checkpoint folder resumes it once they are back
STALLED = "stalled: no reply can arrive and no job can start"
#: how many times the same rejection of a node is logged as a WARNING (then at DEBUG)
REJECTIONS_LOGGED = 3


class EventLoop:
    """The state of one ``start()`` call: event pump, handlers and aggregation.

    The arguments are ``strategy`` and those of
    :meth:`~strategies.base.SemiAsyncStrategy.start` (``initial`` = ``initial_arrays``).
    """

    def __init__(
        self,
        strategy: SemiAsyncStrategy,
        grid: Grid,
        initial: ArrayRecord,
        num_rounds: int,
        timeout: float,
        train_config: ConfigRecord | None,
        evaluate_fn: EvaluateFn | None,
        evaluate_config: ConfigRecord | None = None,
    ) -> None:
        self.strategy = strategy
        self.name = strategy.name
        self.grid = grid
        self.clock = strategy.clock
        # times in the history count from start(): the share planner's operator analysis
        # below (p_c, seconds on a wall clock) is part of the run's time
        self.start_time = self.clock.now()
        self.timeout = timeout
        self.keys = tuple(initial.keys())
        self.global_arrays = [np.asarray(initial[k].numpy()) for k in self.keys]
        self.global_record = initial
        self.version = 0
        self.versions: dict[int, list[NDArray]] = {0: self.global_arrays}
        self.membership = Membership(grid, self.clock, strategy.loop, self.name)
        self.nodes: dict[int, Node] = self.membership.nodes
        self.planner = SharePlanner(
            grid, self.clock, strategy.shares, strategy.loop.poll_interval, self.name
        )
        self.planner.check_model()  # p_c of the served model, before any message
        self.evaluation = ServerEvaluation(
            evaluate_fn,
            self.keys,
            strategy.valuation,
            enabled=strategy.values_enabled(),
            name=self.name,
        )
        #: the metric the convergence stop reads (StopConfig.metric_key, or the valuation's)
        self.stop_key, stop_direction = strategy.stop.key_and_direction(strategy.valuation)
        self.stopper = ConvergenceStop(
            strategy.stop,
            higher_is_better=stop_direction,
            num_rounds=num_rounds,
            time_budget=strategy.loop.time_budget,
        )
        self.queue = EventQueue()
        self.rejections: dict[tuple[str, str], int] = {}  # see log_rejection
        self.client_eval = ClientEvaluation(
            strategy.fraction_evaluate,
            strategy.min_evaluate_nodes,
            ConfigRecord() if evaluate_config is None else evaluate_config,
            timeout,
            strategy.fedavg,
            strategy.shares.absurd_factor,
        )
        self.abandon = AbandonPolicy(strategy.abandon, enabled=strategy.sends_values())
        self.dispatcher = Dispatcher(
            grid,
            self.clock,
            strategy.loop,
            self.queue,
            timeout,
            ConfigRecord() if train_config is None else train_config,
            sends_values=strategy.sends_values(),
            profile_mode=strategy.shares.profile_mode,
            profile_with_job=strategy.shares.with_job(virtual=self.clock.is_virtual),
            abandon=self.abandon,
            record=self.record_event,
            name=self.name,
            record_keys=(strategy.arrayrecord_key, strategy.configrecord_key),
        )
        self.inflight: dict[str, Sent] = self.dispatcher.inflight  # reply not yet pulled
        self.buffer: list[Update] = []
        self.reported: dict[int, int] = {}  # latest accepted num-examples per node
        self.noted_extra: set[int] = set()  # nodes whose replies' unread records were logged
        self.average: ModelAverage | None = None  # set once the federation's size is known
        self.served: list[NDArray] | None = None  # the average, when there is one
        self.serving_global = False  # serve_better chose the global model at the last step
        self.result = Result(arrays=initial)
        self.abandoned_total = 0
        folder = strategy.checkpoint_dir
        self.store = None if folder is None else open_store(folder)

    # ================================================================== top level
    def execute(self) -> Result:
        """Run until a stop rule applies; return Flower's Result."""
        node_ids = self._register()
        resumed = resume_from_checkpoint(self, node_ids)
        resumed_at = self.version
        if not resumed:
            metrics = self.evaluation.evaluate(0, self.global_arrays)
            self.evaluation.log_like_flower(metrics, initial=True)
            if metrics is not None:
                check_metric_keys(self, metrics)  # before any send
                self.result.evaluate_metrics_serverapp[0] = metrics
            self.planner.begin(node_ids, self.nodes)
            self.abandon.refresh_from(self.nodes.values(), self.evaluation)
        elif self.buffer and self.strategy.aggregation_due(len(self.buffer)) and not self.done:
            # killed while checkpointing the aggregation these updates triggered: redo it
            self.aggregate_now(max(u.received_at for u in self.buffer))
        if not self.done:  # num_rounds = 0, or a resume at the round budget: no jobs
            self.start_idle_jobs()
        while not self.done:
            if not self._pump():
                if not unblock(self):
                    self.stopper.stop(STALLED, "stalled")
                    log(WARNING, "%s: stopping, %s", self.name, self.stopper.reason)
                    break
                wait(self)
        reason = self.stopper.reason or "round budget"
        log(
            INFO,
            "%s finished after %d aggregations (%s), %.3f s after the start%s",
            self.name,
            self.version,
            reason,
            self.clock.now() - self.start_time,
            f" of the first run (this one resumed at round {resumed_at})" if resumed else "",
        )
        if self.store is not None and reason != STALLED:  # a later start is a new run
            self.store.mark_finished(self.version, reason, self.stopper.num_rounds)
        _wind_down(self, top_up=reason != STALLED)
        self.result.arrays = to_record(self.keys, self.served or self.global_arrays)
        return self.result

    @property
    def done(self) -> bool:
        """Whether a stop rule applies now."""
        return self.stopper.finished(self.version, self.clock.now() - self.start_time)

    def _register(self) -> list[int]:
        """Wait for the nodes, check that K and the share cap fit them, admit them."""
        ids = self.membership.wait_for(self.strategy.min_nodes(), self.strategy.too_few_hint())
        self.strategy.check_node_count(len(ids))
        per_aggregation = self.strategy.updates_per_aggregation()
        self.planner.size_for(len(ids), per_aggregation)
        self.membership.admit(ids)
        self.stopper.size_for(len(ids), per_aggregation)
        passes = self.strategy.average_passes
        if passes is not None:  # the served model: the global models' moving average
            self.average = ModelAverage(average_decay(passes, len(ids), per_aggregation))
        return ids

    # ================================================================== sending
    def start_idle_jobs(self) -> None:
        """Send a new job, with the full model, to every node ready for the current version."""
        nodes = [n for n in self.nodes.values() if not self.planner.holds(n)]
        self.dispatcher.start_jobs(
            nodes, self.version, self.global_record, self.evaluation.last_values
        )

    # ================================================================== receiving
    def _pump(self) -> bool:
        """Pull replies, expire old messages, process every processable event."""
        got = self.dispatcher.pull()
        for msg in got:
            self._receive(msg)
        expire(self)
        if self.planner.check_deadline(self.nodes):
            self._shares_planned()
        handled = 0
        while not self.done and self.queue.processable(
            self.inflight.values(),
            virtual=self.clock.is_virtual,
            now=self.clock.now(),
            lookahead=self.strategy.loop.lookahead,
        ):
            when, event = self.queue.pop()
            self.clock.advance_to(when)
            if isinstance(event, DeadlineEvent):
                on_deadline(self, event)
            else:
                self._on_reply(event, when)
            if not self.done:  # no new work after the last aggregation
                self.start_idle_jobs()
            handled += 1
        return bool(got) or handled > 0

    def _receive(self, msg: Message) -> None:
        """Parse a pulled reply and queue it as an event at its event time."""
        reply_to = msg.metadata.reply_to_message_id
        sent = self.inflight.pop(reply_to, None)
        if sent is None:
            src = int(msg.metadata.src_node_id)
            log(
                WARNING,
                "%s: rejected reply from node %s: reply to an unknown or already consumed message",
                self.name,
                src,
            )
            self.record_event(
                src, -1, "rejected", self.version, detail="unknown or consumed message"
            )
            return
        gone = is_node_unavailable(msg)  # the node is gone, not its ClientApp's reply
        if self.client_eval.owns(reply_to):  # an evaluation: it only frees its node
            self.client_eval.replies_in[reply_to] = msg
            event = ReplyEvent(sent, None, None, unavailable=gone)
            self.queue.push(self.dispatcher.event_time(sent, None), REPLY, event)
            return
        reply, reason = parse_train_reply(self, msg, sent.node_id)
        self.dispatcher.observe(sent, reply)  # per-message overhead, for the slice budget
        when = self.dispatcher.event_time(sent, reply)
        self.queue.push(when, REPLY, ReplyEvent(sent, reply, reason, unavailable=gone))

    def reject(self, node: Node, job_id: int, reason: str) -> None:
        """Log a rejected reply; the node waits for the next version."""
        log_rejection(self.rejections, self.name, f"reply of node {node.node_id}", job_id, reason)
        self.record_event(node.node_id, job_id, "rejected", self.version, detail=reason)
        node.free(self.version, rejected=reason)

    def record_rejection(self, node_id: int, job_id: int, reason: str) -> None:
        """Log and record a rejected update of a node that is busy with another job."""
        log_rejection(self.rejections, self.name, f"update of node {node_id}", job_id, reason)
        self.record_event(node_id, job_id, "rejected", self.version, detail=reason)

    def _on_reply(self, event: ReplyEvent, when: float) -> None:
        """Handle a reply at its event time ``when``."""
        sent = event.sent
        self.dispatcher.open.pop(sent.message_id, None)
        node = self.nodes[sent.node_id]
        node.outstanding = None
        if event.unavailable:  # no job until the grid lists the node again
            unavailable(self, sent, node)
            return
        node.misses = 0
        if self.client_eval.owns(sent.message_id):
            self.on_evaluated(sent.message_id)
            return
        job = node.job
        if isinstance(event.reply, ProfileRecord) and job is not None:
            if not node.profile_pending and node.node_id not in self.planner.late:
                self.reject(node, job.job_id, UNASKED_PROFILE)  # else a new job at once
                return
            node.job = None  # a profile ends the job it was asked with
            self.profile_answer(node, job.job_id, event.reply, "")
            return
        beside = profile_beside(event.reply, event.reason)  # the profile sent with a job
        self.profile_answer(node, sent.job_id, *beside, with_job=True)
        if job is None or job.job_id != sent.job_id:
            self.reject(node, sent.job_id, "reply for a job that is no longer running")
            return
        if event.reason is not None or not isinstance(event.reply, TrainReply):
            self.reject(node, job.job_id, event.reason or "unparsable reply")
            return
        reply = event.reply
        reason = job.mismatch(reply)
        if reason is not None:
            self.reject(node, job.job_id, reason)
            return
        if reply.availability is not None:  # theta's scores as the client computes them
            node.availability = reply.availability
        if not reply.done:
            self._on_progress(node, job, reply)
        else:
            self._on_finished(node, job, reply, when)

    def on_evaluated(self, message_id: str) -> None:
        """Take an evaluate reply (or its loss); store the round's metrics once all are in."""
        done = self.client_eval.take(message_id)
        if done is not None:
            self.result.evaluate_metrics_clientapp[done[0]] = done[1]

    def profile_answer(
        self, node: Node, job: int, profile: ProfileRecord | None, why: str, with_job: bool = False
    ) -> None:
        """Pass a node's answer to its profile request on to the share planner."""
        if node.profile_pending and profile is not None:
            self.record_event(node.node_id, job, "profiled", self.version)
        if self.planner.answered(node, self.nodes, profile, why, with_job=with_job):
            self._shares_planned()

    def _shares_planned(self) -> None:
        """Refresh what depends on the initial shares (the abandon rule's R and theta)."""
        self.abandon.refresh_from(self.nodes.values(), self.evaluation)

    def _on_progress(self, node: Node, job: Job, reply: TrainReply) -> None:
        """Answer a slice report with the next slice (and the newest global if newer)."""
        base = int(reply.base_version or 0)
        node.late = False  # lateness is per message: the next slice has its own deadline
        self.note_abandon(node, job, reply, base)
        job.base_version = base
        self.record_event(node.node_id, job.job_id, "progress", base, reply.samples_processed or 0)
        self.dispatcher.continue_job(
            node, job, self.version, self.global_record, self.evaluation.last_values
        )

    def _on_finished(self, node: Node, job: Job, reply: TrainReply, when: float) -> None:
        """Accept a finished update into the buffer; aggregate if that is due."""
        update = accept_finished(self, node, job, reply, when)
        if update is None:
            return
        self.buffer.append(update)
        self.record_event(
            node.node_id, job.job_id, "finished", update.base_version, reply.samples_processed or 0
        )
        self.dispatcher.finished(job.job_id)
        node.free(update.base_version)
        save_buffered_update(self, update)  # before the aggregation it may trigger
        if self.strategy.aggregation_due(len(self.buffer)):
            screen_buffer(self)  # absurd num-examples of unmodified apps, first updates too
        if self.strategy.aggregation_due(len(self.buffer)):
            self.aggregate_now(when)

    # ================================================================== aggregation
    def aggregate_now(self, when: float) -> None:
        """Combine the buffer into a new global version; value, log, rebalance, checkpoint."""
        updates, self.buffer = self.buffer, []
        bases = {
            u.base_version: self.versions[u.base_version]
            for u in updates
            if u.base_version in self.versions
        }
        combined = self.strategy.combine(self.global_arrays, updates, self.version, bases)
        self.version += 1
        rnd = self.version
        step = Step.of(self.evaluation, combined, rnd, self.global_arrays)  # drop_worst, search
        arrays, weights, dropped = step.arrays, step.weights, step.dropped
        self.global_arrays = [np.asarray(a) for a in arrays]
        self.global_record = to_record(self.keys, self.global_arrays)
        self.versions[rnd] = self.global_arrays
        self._prune_versions()
        metrics, own = evaluate_served(self, rnd, step)
        valued = self.evaluation.valuate(
            rnd, combined.total, len(updates), own, step.without, step.error
        )
        record = AggregationRecord.build(
            rnd, when - self.start_time, updates, weights, valued, metrics
        )
        values = valued[1]
        self.strategy.history.append(record)
        self.client_eval.start_round(rnd, self.nodes.values(), self.global_record, self.dispatcher)
        self.evaluation.record_values(record)
        self.abandon.refresh_from(self.nodes.values(), self.evaluation)
        self.result.train_metrics_clientapp[rnd] = _round_metrics(self, record, updates, step)
        if metrics is not None:
            self.result.evaluate_metrics_serverapp[rnd] = metrics
        metric = self.evaluation.metric(metrics)
        log(
            INFO,
            "[%s round %d] t=%.3f participants=%s staleness=%s weights=%s values=%s "
            "metric=%s%s%s%s",
            self.name,
            rnd,
            record.time,
            list(record.participants),
            list(record.staleness),
            [round(w, 4) for w in record.weights],
            [round(v, 4) for v in values],
            metric,
            "" if dropped is None else f" dropped=node {updates[dropped].node_id} (drop_worst)",
            "" if step.scale == 1.0 else f" step=x{step.scale:g} (step_search)",
            " served=global (serve_better)" if self.serving_global else "",
        )
        self.evaluation.log_like_flower(metrics)
        self.planner.rebalance(self.nodes.values())
        self.stopper.observe(self.evaluation.metric(metrics, self.stop_key))
        save_checkpoint(self, record)

    def note_abandon(self, node: Node, job: Job, reply: TrainReply, base: int) -> None:
        """Count a reply's slice in the abandon tally; record the abandon if it is one."""
        self.abandon.progress(job.job_id, job.share, reply.samples_processed or 0, reply.abandoned)
        if reply.abandoned:
            job.abandoned += 1
            self.abandoned_total += 1
            self.record_event(
                node.node_id, job.job_id, "abandoned", base, reply.samples_processed or 0
            )

    def _prune_versions(self) -> None:
        """Drop global versions that no job, buffered update or node still needs."""
        keep = {self.version}
        keep.update(n.job.base_version for n in self.nodes.values() if n.job is not None)
        keep.update(v for n in self.nodes.values() if n.job is not None for v in n.job.delivered)
        keep.update(u.base_version for u in self.buffer)
        for v in [v for v in self.versions if v not in keep]:
            del self.versions[v]

    def record_event(
        self,
        node_id: int,
        job_id: int,
        kind: EventKind,
        version: int,
        samples: int = 0,
        detail: str = "",
    ) -> None:
        """Append a :class:`JobEvent` to the strategy's timeline."""
        self.strategy.events.append(
            JobEvent(
                self.clock.now() - self.start_time, node_id, job_id, kind, version, samples, detail
            )
        )


def _wind_down(loop: EventLoop, *, top_up: bool) -> None:
    """Stop in-flight work; complete and collect the last client-side evaluations."""
    pulled = loop.dispatcher.finish(loop.strategy.loop.poll_interval)
    if top_up and loop.version > 0:  # the final round to the nodes it wants, now all free
        busy = {s.node_id for s in loop.dispatcher.inflight.values()}
        nodes = list(loop.nodes.values())
        loop.client_eval.top_up(loop.version, nodes, loop.global_record, loop.dispatcher, busy)
    wanted = set(loop.client_eval.rounds)  # the last evaluations: worth a short wait
    pulled += loop.dispatcher.drain(min(60.0, loop.timeout), 0.01, wanted)
    for msg in pulled:
        if loop.client_eval.owns(msg.metadata.reply_to_message_id):
            loop.client_eval.replies_in[msg.metadata.reply_to_message_id] = msg
    for message_id in list(loop.client_eval.rounds):  # lost ones count as no reply
        loop.on_evaluated(message_id)
    save_client_evaluations(loop)


def _round_metrics(
    loop: EventLoop, record: AggregationRecord, updates: list[Update], step: Step
) -> MetricRecord:
    """Return an aggregation's train metrics: the record's, the abandon tally, the choices."""
    out = train_metrics(record, updates, loop.abandoned_total, loop.strategy.fedavg)
    out.update(loop.abandon.metrics())
    if loop.evaluation.drops:
        out["dropped-updates"] = int(step.dropped is not None)
    if loop.evaluation.searches:
        out["step-scale"] = step.scale
    if loop.average is not None and loop.strategy.serve_better:
        out["served-global"] = int(loop.serving_global)
    return out


def log_rejection(
    seen: dict[tuple[str, str], int], name: str, what: str, job_id: int, reason: str
) -> None:
    """Log a rejection: a WARNING the first :data:`REJECTIONS_LOGGED` times, then DEBUG.

    ``seen`` counts the rejections logged so far per (``what``, ``reason``), ``what`` naming
    the node (``"reply of node 7"``). A node whose ClientApp never trains (it replies without
    an example count, say) would otherwise repeat the same WARNING at every job of the run;
    every rejection is still recorded as an event.
    """
    count = seen[(what, reason)] = seen.get((what, reason), 0) + 1
    more = ""
    if count == REJECTIONS_LOGGED:
        more = " (the same rejection of this node is logged at DEBUG from now on)"
    level = WARNING if count <= REJECTIONS_LOGGED else DEBUG
    log(level, "%s: rejected %s (job %s): %s%s", name, what, job_id, reason, more)
