"""Liveness of a run: messages that time out, soft deadlines, waiting, and stalls.

Functions over a :class:`~strategies.loop.EventLoop`:

- :func:`expire`: messages without a reply within ``start``'s ``timeout`` (real seconds) are
  forgotten and count as a miss of their node (:meth:`Membership.missed`);
- :func:`on_deadline`: a node whose message is still open at its soft deadline is marked
  late (dropped from the round, never waited on); under a wall clock, a node no longer
  registered then is forgotten there and then;
- :func:`unavailable`: a reply that is Flower's node-unavailable error forgets its message and
  makes its node gone at once (:meth:`Membership.unavailable`): the SuperLink accepts
  messages to that node and answers each with the same error, so a node only waiting for the
  next version would get a job, wasted, with each version until membership is re-read;
- :func:`wait`: sleep until the next event may be due, re-reading membership (wall clock);
- :func:`stalled`: whether no event can happen any more;
- :func:`unblock`: whether the run can go on. At a stall, or when every train message still
  out is from a node past its soft deadline while no other node can start a job, the
  buffered updates are aggregated as they are (fewer than the strategy's rule wants, but no
  more can come in time: e.g. the other nodes' replies were rejected and they wait for a
  newer global model), so that accepted updates are not lost and the run goes on. A stall
  with an empty buffer gives every node whose last reply was rejected (a client error, a
  malformed update) a new job on the same global model, at most :data:`MAX_RETRIES` times in
  a row per node, as FedAvg asks every node again in its next round after failures; past
  that, the run ends with an ERROR that names the rejections.
"""

from __future__ import annotations

from logging import ERROR, INFO, WARNING
from typing import TYPE_CHECKING

from flwr.common.logger import log

from strategies.events import DeadlineEvent, Sent
from strategies.membership import Node

if TYPE_CHECKING:
    from strategies.loop import EventLoop

__all__ = [
    "MAX_RETRIES",
    "expire",
    "forgotten",
    "on_deadline",
    "only_late_out",
    "stalled",
    "unavailable",
    "unblock",
    "wait",
]

#: jobs a node whose replies are rejected is given again on the same global model, in a row,
#: when nothing else can move the run (a stall with an empty buffer)
MAX_RETRIES = 3


def expire(loop: EventLoop) -> None:
    """Forget messages unanswered for ``timeout`` real seconds; count the misses."""
    expired = loop.dispatcher.expire()
    if not expired:
        return
    registered = loop.membership.registered_ids()
    for sent in expired:
        node = loop.nodes[sent.node_id]
        log(
            WARNING,
            "%s: node %s sent no reply within %.1f s: message forgotten",
            loop.name,
            node.node_id,
            loop.timeout,
        )
        forgotten(loop, sent, node, registered)
    loop.start_idle_jobs()


def stalled(loop: EventLoop) -> bool:
    """Return whether no event can happen any more.

    Soft deadlines of messages already answered do not count: they fire to no effect, and
    waiting for them (10 s and more) only delayed the aggregation of a buffer that no other
    update could complete, e.g. after a node's ClientApp raised.
    """
    if loop.inflight or loop.queue.live(loop.dispatcher.open):
        return False
    if not loop.clock.is_virtual:
        loop.membership.refresh(force=True)
        loop.start_idle_jobs()
        if loop.inflight:
            return False
    return loop.membership.all_waiting(loop.version)


def only_late_out(loop: EventLoop) -> bool:
    """Return whether every train message out is from a late node and no job can start."""
    out = [s for s in loop.dispatcher.inflight.values() if s.job_id >= 0]
    return (
        bool(out)
        and all(loop.nodes[s.node_id].late for s in out)
        and loop.membership.all_waiting(loop.version)
    )


def unblock(loop: EventLoop) -> bool:
    """Return whether the run can go on; aggregate the buffer when only that lets it.

    No reply can arrive (a stall), or none but from nodes past their soft deadline, and no
    job can start: the rule's "enough updates" cannot be reached on this version in time. The
    buffered updates are aggregated as they are (logged) at the current time, the new version
    lets every waiting node start a job, and the run goes on. A stall with an empty buffer
    cannot go on.
    """
    stuck = stalled(loop)
    if stuck and not loop.buffer:
        return retry_rejected(loop)
    if not loop.buffer or not (stuck or only_late_out(loop)):
        return not stuck
    log(
        WARNING,
        "%s: %d buffered update(s) and no other can arrive in time (the other nodes wait for "
        "a newer global model, e.g. after a rejected reply, or are past their deadline): "
        "aggregating them now, fewer than the rule wants, so that the run goes on",
        loop.name,
        len(loop.buffer),
    )
    loop.aggregate_now(loop.clock.now())
    loop.start_idle_jobs()
    return True


def retry_rejected(loop: EventLoop) -> bool:
    """Give the nodes whose last reply was rejected a new job on the current global model.

    Called at a stall with an empty buffer: no update can arrive, so no new version can free
    the nodes that wait for one. Each node is retried at most :data:`MAX_RETRIES` times in a
    row (an accepted update resets the count). Returns whether a job went out; when none can,
    logs an ERROR naming the rejections (the run then ends as stalled).
    """
    waiting = [n for n in loop.nodes.values() if not n.gone and n.outstanding is None]
    rejected = [n for n in waiting if n.rejected is not None]
    chosen = [n for n in rejected if n.retries < MAX_RETRIES]
    if not chosen:
        if rejected:
            reasons = "; ".join(f"node {n.node_id}: {n.rejected}" for n in rejected[:5])
            log(
                ERROR,
                "%s: no update can arrive: the last reply of every waiting node was rejected, "
                "%d time(s) in a row (%s)",
                loop.name,
                MAX_RETRIES + 1,
                reasons,
            )
        return False
    for node in chosen:
        node.retries += 1
        node.last_base = loop.version - 1  # ready again for the current version
    log(
        WARNING,
        "%s: no update can arrive on global version %d (the replies were rejected): asking "
        "node(s) %s again on the same model (retry %d of %d)",
        loop.name,
        loop.version,
        ", ".join(str(n.node_id) for n in chosen),
        max(n.retries for n in chosen),
        MAX_RETRIES,
    )
    loop.start_idle_jobs()
    return bool(loop.inflight)


def wait(loop: EventLoop) -> None:
    """Sleep until the next event may be due (bounded by the poll interval)."""
    # membership changes would break virtual determinism
    if not loop.clock.is_virtual and loop.membership.refresh():
        loop.start_idle_jobs()
    step = loop.strategy.loop.poll_interval
    if not loop.clock.is_virtual and len(loop.queue):
        step = min(step, max(loop.queue.head_time() - loop.clock.now(), 0.0))
    oldest = loop.dispatcher.oldest_real_send()
    if oldest is not None:
        step = min(step, max(oldest + loop.timeout - loop.clock.real_now(), 0.0))
    loop.clock.sleep(max(step, 1e-6))


# ================================================================== handlers


def on_deadline(loop: EventLoop, event: DeadlineEvent) -> None:
    """Mark a node whose message is still open at its deadline as late (gone: forget it)."""
    sent = event.sent
    if sent.message_id not in loop.dispatcher.open:
        return
    node = loop.nodes[sent.node_id]
    node.late = True
    log(
        INFO,
        "%s: node %s missed its %.1f s deadline: dropped from the round",
        loop.name,
        node.node_id,
        event.seconds,
    )
    loop.record_event(node.node_id, sent.job_id, "late", loop.version)
    registered = set() if loop.clock.is_virtual else loop.membership.registered_ids()
    if not loop.clock.is_virtual and node.node_id not in registered:
        loop.dispatcher.forget(sent)  # it left: no need to wait for the timeout
        forgotten(loop, sent, node, registered)


def unavailable(loop: EventLoop, sent: Sent, node: Node) -> None:
    """Forget ``sent``, answered with Flower's node-unavailable error; its node is gone.

    The node gets no job until the grid lists it again (:meth:`Membership.refresh`), whatever
    it lists now: Flower's answer says that the node is not there.
    """
    log(
        WARNING,
        "%s: node %s is unavailable (Flower's node-unavailable error for its job %s): no jobs "
        "until the grid lists it again",
        loop.name,
        node.node_id,
        sent.job_id,
    )
    detail = "node unavailable (Flower's error reply)"
    loop.record_event(node.node_id, sent.job_id, "forgotten", loop.version, detail=detail)
    loop.membership.unavailable(node)
    loop.profile_answer(node, sent.job_id, None, "no reply to its first message")
    if loop.client_eval.owns(sent.message_id):
        loop.on_evaluated(sent.message_id)


def forgotten(loop: EventLoop, sent: Sent, node: Node, registered: set[int]) -> None:
    """Count a message that will get no reply as a miss of its node."""
    loop.record_event(node.node_id, sent.job_id, "forgotten", loop.version)
    loop.membership.missed(node, registered)
    loop.profile_answer(node, sent.job_id, None, "no reply to its first message")
    if loop.client_eval.owns(sent.message_id):
        loop.on_evaluated(sent.message_id)
