"""An in-process Flower Grid: fast, deterministic runs of a ClientApp without Ray or a SuperLink.

:class:`InProcessGrid` implements flwr's abstract :class:`~flwr.serverapp.Grid`, so any
strategy (:class:`~strategies.EdgeStrategy`, the baselines, Flower's own ``FedAvg``) runs on it
unchanged. Other test suites (clients, simulations, deployment faults, soak) use it too.

API
---
``InProcessGrid(app, num_nodes, *, node_ids=None, node_configs=None, run_config=None,
clock=None, latency=None, order=None, run_id=1, isolate=True)``

``app``
    A :class:`flwr.clientapp.ClientApp` or any callable ``(Message, Context) -> Message``.
    Per-node apps can be swapped with :meth:`InProcessGrid.set_app` (e.g. one unmodified
    Flower app among edge clients, or a misbehaving node).
``num_nodes`` / ``node_ids``
    Nodes ``1001..1000 + num_nodes`` unless explicit ``node_ids`` are given (Flower's own ids
    are large random integers; pass some to test that nothing assumes small ids; id 1 is the
    SuperLink's own).
``node_configs``
    Extra ``node_config`` entries per node id. Every node gets ``partition-id`` (its index)
    and ``num-partitions`` (the number of nodes), as Flower's simulation engine gives them.
``run_config``
    The ``run_config`` of every node's :class:`~flwr.app.Context`.
``clock`` / ``latency``
    A reply becomes visible to :meth:`pull_messages` at ``clock.real_now()`` of the push plus
    ``latency(node_id, message)`` seconds; a node serves its messages one at a time, in push
    order (as a SuperNode in deployment), so a second message waits behind the first. Share
    a :class:`~strategies.clock.ManualClock` with the strategy to make wall-clock runs
    instant and deterministic. Without a clock every reply is visible at once.
``order``
    Called with the replies one ``pull_messages`` call is about to return; returns them in
    the order (and subset: replies left out stay queued for the next pull) to return them.
    Use it to emulate Ray returning replies in any order.
``isolate`` (default: True)
    Deliver a deep copy of each message's content, so that a client cannot mutate the
    server's arrays (the wire would not let it).

The app runs when the message is pushed; an exception in it becomes an error reply
(``ErrorCode.CLIENT_APP_RAISED_EXCEPTION``), as in Flower's engines.

Fault injection: :meth:`kill` (unregistered; its queued replies are lost, later pushes are
refused), :meth:`lapse` (a SIGKILLed SuperNode as the SuperLink sees it once its heartbeat
lapsed: unregistered, and its messages, queued or new, are answered with Flower's
node-unavailable error), :meth:`silence` (stays registered, swallows messages),
:meth:`restart` (comes back with an empty ``context.state``; queued replies are lost).
:attr:`pushed` lists every message pushed, in order, and :attr:`contexts` each node's
Context, for assertions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from flwr.app import Context, Error, Message, RecordDict
from flwr.app.message.message import make_message
from flwr.app.user_config import UserConfig, UserConfigValue
from flwr.common.constant import HEARTBEAT_PATIENCE, SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from flower_edge import validate, wire
from flower_edge.errors import ConfigError
from strategies.clock import Clock

__all__ = ["NODE_UNAVAILABLE_REASON", "AppFn", "InProcessGrid", "LatencyFn", "OrderFn"]

AppFn = Callable[[Message, Context], Message]
LatencyFn = Callable[[int, Message], float]
OrderFn = Callable[[list[Message]], list[Message]]


def _set_task_identity(run_id: int) -> None:
    """Identify this process as the ServerApp of ``run_id`` (``Message()`` reads it)."""
    TaskIdentity.task_id = 1
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = SUPERLINK_NODE_ID


def _check_arguments(
    app: object,
    node_configs: object,
    clock: object,
    latency: object,
    order: object,
    run_id: object,
    isolate: object,
) -> None:
    """Raise ConfigError naming the first argument of :class:`InProcessGrid` of a wrong type."""
    if not callable(app):
        raise ConfigError(f"app must be a ClientApp or a callable, got {type(app).__name__}")
    if node_configs is not None and not isinstance(node_configs, Mapping):
        raise ConfigError(
            f"node_configs must map node ids to configs, got {type(node_configs).__name__}"
        )
    if clock is not None and not isinstance(clock, Clock):
        raise ConfigError(f"clock must be a strategies Clock, got {type(clock).__name__}")
    for name, fn in (("latency", latency), ("order", order)):
        if fn is not None and not callable(fn):
            raise ConfigError(f"{name} must be callable or None, got {type(fn).__name__}")
    validate.integer("run_id", run_id, low=0, high=2**64 - 1)
    validate.boolean("isolate", isolate)


#: the reason of the SuperLink's error reply for a node whose heartbeat lapsed (Flower's own)
NODE_UNAVAILABLE_REASON = (
    "Error: Node Unavailable — The destination node failed to report a heartbeat "
    f"within {HEARTBEAT_PATIENCE} × its expected interval."
)


@dataclass
class _Queued:
    ready_at: float
    seq: int
    reply: Message
    node_id: int


def _unavailable(msg: Message) -> Message:
    """Return the SuperLink's node-unavailable error reply to ``msg`` (from node 1)."""
    reply = Message(Error(ErrorCode.NODE_UNAVAILABLE, NODE_UNAVAILABLE_REASON), reply_to=msg)
    reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
    reply.metadata.__dict__["_message_id"] = f"re-{msg.metadata.message_id}"
    return reply


class InProcessGrid(Grid):
    """A Grid that runs a ClientApp per node in this process; see the module docstring."""

    def __init__(  # noqa: PLR0913
        self,
        app: AppFn,
        num_nodes: int | None = None,
        *,
        node_ids: Sequence[int] | None = None,
        node_configs: Mapping[int, Mapping[str, UserConfigValue]] | None = None,
        run_config: UserConfig | None = None,
        clock: Clock | None = None,
        latency: LatencyFn | None = None,
        order: OrderFn | None = None,
        run_id: int = 1,
        isolate: bool = True,
    ) -> None:
        _check_arguments(app, node_configs, clock, latency, order, run_id, isolate)
        if node_ids is None:
            if num_nodes is None:
                raise ConfigError("num_nodes must be an integer >= 1, got None")
            validate.integer("num_nodes", num_nodes, low=1)
            node_ids = list(range(1001, 1001 + num_nodes))
        elif num_nodes is not None and num_nodes != len(node_ids):
            raise ConfigError(f"num_nodes ({num_nodes}) != len(node_ids) ({len(node_ids)})")
        if len(set(node_ids)) != len(node_ids) or not node_ids:
            raise ConfigError("node_ids must be a non-empty list of distinct integers")
        for i, node in enumerate(node_ids):
            validate.integer(f"node_ids[{i}]", node, low=1, high=2**64 - 1)
        if latency is not None and clock is None:
            raise ConfigError("latency needs a clock (e.g. a ManualClock shared with the loop)")
        self._node_ids = [int(n) for n in node_ids]
        self._node_configs = {int(k): dict(v) for k, v in (node_configs or {}).items()}
        self._run_config: UserConfig = dict(run_config or {})
        self._clock = clock
        self._latency = latency
        self._order = order
        self._isolate = isolate
        self._run = Run.create_empty(run_id)
        _set_task_identity(run_id)
        self._default_app = app
        self._apps: dict[int, AppFn] = {}
        self.contexts: dict[int, Context] = {n: self._new_context(n) for n in self._node_ids}
        self._alive = set(self._node_ids)
        self._silent: set[int] = set()
        self._lapsed: set[int] = set()
        self._free_at: dict[int, float] = dict.fromkeys(self._node_ids, 0.0)
        self._replies: dict[str, _Queued] = {}  # instruction message id -> queued reply
        self._seq = 0
        self.pushed: list[Message] = []

    # ------------------------------------------------------------------ Grid API
    def set_run(self, run: Run) -> None:
        """Set the run this grid operates in."""
        self._run = run
        _set_task_identity(run.run_id)

    @property
    def run(self) -> Run:
        """Run information."""
        return self._run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Create a new message (prefer the ``Message`` constructor)."""
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        """Return the ids of the registered (not killed) nodes, in creation order."""
        return [n for n in self._node_ids if n in self._alive]

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Deliver messages; run each node's app; return the ids of the accepted messages.

        A message to an unknown or killed node is refused (no id returned), as the SuperLink
        refuses messages to unregistered nodes. A message to a lapsed node (:meth:`lapse`) is
        accepted and answered at once with Flower's node-unavailable error, as the SuperLink
        accepts messages to an offline node.
        """
        ids: list[str] = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if node not in self._alive and node not in self._lapsed:
                continue
            self._seq += 1
            msg_id = f"in-{self._seq:09d}"
            msg.metadata.__dict__["_message_id"] = msg_id
            self.pushed.append(msg)
            ids.append(msg_id)
            now = 0.0 if self._clock is None else self._clock.real_now()
            if node in self._lapsed:
                self._replies[msg_id] = _Queued(now, self._seq, _unavailable(msg), node)
                continue
            if node in self._silent:
                continue
            reply = self._execute(node, msg)
            start = max(now, self._free_at[node])
            ready = start + (0.0 if self._latency is None else self._latency(node, msg))
            self._free_at[node] = ready
            self._replies[msg_id] = _Queued(ready, self._seq, reply, node)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """Return (once) the replies to ``message_ids`` that are ready."""
        now = None if self._clock is None else self._clock.real_now()
        ready = [
            self._replies[m]
            for m in dict.fromkeys(message_ids)
            if m in self._replies and (now is None or self._replies[m].ready_at <= now)
        ]
        ready.sort(key=lambda q: (q.ready_at, q.seq))
        replies = [q.reply for q in ready]
        if self._order is not None:
            replies = list(self._order(replies))
        for reply in replies:
            self._replies.pop(reply.metadata.reply_to_message_id, None)
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> list[Message]:
        """Push ``messages`` and pull their replies until all are in or ``timeout`` passes.

        Waiting goes through the grid's clock (instant with a :class:`ManualClock`); without
        a clock every reply is ready at once.
        """
        pending = set(self.push_messages(messages))
        out: list[Message] = []
        start = None if self._clock is None else self._clock.real_now()
        while pending:
            got = self.pull_messages(pending)
            out.extend(got)
            pending -= {m.metadata.reply_to_message_id for m in got}
            if not pending or self._clock is None:
                break
            waiting = [self._replies[m].ready_at for m in pending if m in self._replies]
            now = self._clock.real_now()
            if not waiting or (timeout is not None and now - (start or 0.0) >= timeout):
                break
            step = min(waiting) - now
            if timeout is not None:
                step = min(step, (start or 0.0) + timeout - now)
            self._clock.sleep(max(step, 1e-9))
        return out

    # ------------------------------------------------------------------ control
    def set_app(self, node_id: int, app: AppFn) -> None:
        """Run ``app`` on ``node_id`` from now on (other nodes keep theirs)."""
        self._check_node(node_id)
        self._apps[node_id] = app

    def kill(self, node_id: int) -> None:
        """Unregister ``node_id``: its queued replies are lost and new messages refused."""
        self._check_node(node_id)
        self._alive.discard(node_id)
        self._lapsed.discard(node_id)
        self._drop_queued(node_id)

    def lapse(self, node_id: int) -> None:
        """Turn ``node_id`` into a killed SuperNode as the SuperLink sees it, heartbeat lapsed.

        It leaves :meth:`get_node_ids`; each reply still queued for it, and each later message
        to it (accepted, as the SuperLink accepts messages to an offline node), is answered
        at once with Flower's node-unavailable error (``ErrorCode.NODE_UNAVAILABLE``, from the
        SuperLink's node id). :meth:`restart` brings it back.
        """
        self._check_node(node_id)
        self._alive.discard(node_id)
        self._lapsed.add(node_id)
        now = 0.0 if self._clock is None else self._clock.real_now()
        for msg_id, queued in self._replies.items():
            if queued.node_id == node_id:
                instruction = next(m for m in self.pushed if m.metadata.message_id == msg_id)
                queued.reply = _unavailable(instruction)
                queued.ready_at = min(queued.ready_at, now)

    def silence(self, node_id: int, silent: bool = True) -> None:
        """Keep ``node_id`` registered but swallow (``silent=True``) or serve its messages."""
        self._check_node(node_id)
        if silent:
            self._silent.add(node_id)
        else:
            self._silent.discard(node_id)

    def restart(self, node_id: int) -> None:
        """Bring ``node_id`` back (if killed) with an empty state; queued replies are lost."""
        self._check_node(node_id)
        self._drop_queued(node_id)
        self._alive.add(node_id)
        self._lapsed.discard(node_id)
        self._silent.discard(node_id)
        self.contexts[node_id] = self._new_context(node_id)

    def queued(self) -> int:
        """Return how many replies are waiting to be pulled."""
        return len(self._replies)

    # ------------------------------------------------------------------ internals
    def _check_node(self, node_id: int) -> None:
        if node_id not in self.contexts:
            raise ConfigError(f"node_id {node_id} is not one of this grid's nodes")

    def _drop_queued(self, node_id: int) -> None:
        for msg_id in [m for m, q in self._replies.items() if q.node_id == node_id]:
            del self._replies[msg_id]

    def _new_context(self, node_id: int) -> Context:
        index = self._node_ids.index(node_id)
        node_config: UserConfig = {
            wire.PARTITION_ID: index,
            wire.NUM_PARTITIONS: len(self._node_ids),
        }
        node_config.update(self._node_configs.get(node_id, {}))
        return Context(
            run_id=self._run.run_id,
            node_id=node_id,
            node_config=node_config,
            state=RecordDict(),
            run_config=dict(self._run_config),
        )

    def _execute(self, node_id: int, msg: Message) -> Message:
        delivered = msg
        if self._isolate:
            delivered = make_message(msg.metadata, copy.deepcopy(msg.content))
        app = self._apps.get(node_id, self._default_app)
        try:
            reply = app(delivered, self.contexts[node_id])
        except Exception as exc:  # noqa: BLE001  (a client's crash becomes an error reply)
            reason = f"{type(exc).__name__}: {exc}"
            reply = Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason), reply_to=msg)
        reply.metadata.__dict__["_message_id"] = f"re-{msg.metadata.message_id}"
        return reply
