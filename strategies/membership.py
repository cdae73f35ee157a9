"""The nodes of a run: registration wait, joining, leaving, expiry and missed messages.

A node is one SuperNode as the loop sees it (:class:`Node`), with at most one job
(:class:`Job`) and at most one outstanding train message. :class:`Membership` owns the
``node id -> Node`` table and every rule about who may get work:

- before the first round, wait (with a deadline) until enough nodes have registered;
- a message forgotten after ``start``'s ``timeout`` is a miss; after ``max_misses`` misses in a
  row, or when the node is no longer registered, the node is gone until it registers again;
- a reply that is Flower's node-unavailable error makes the node gone (as unregistered) until
  the grid lists it again;
- wall clock only: membership is re-read every ``max(1, 20 * poll_interval)`` s while the loop
  waits; nodes that registered after the start join with the median share, nodes that left
  get no jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from logging import INFO, WARNING

from flwr.common.logger import log
from flwr.serverapp import Grid

from flower_edge.errors import ConfigError
from strategies.clock import Clock
from strategies.config import LoopConfig
from strategies.records import TrainReply

__all__ = ["SIMULATION_SETTLE", "Job", "Membership", "Node"]

#: seconds to wait for more nodes once the first has registered under Flower's simulation
#: engine, which registers the whole federation at once
SIMULATION_SETTLE = 3.0


@dataclass
class Job:
    """One training job of a node, from its first train message to its finished update.

    Attributes
    ----------
    job_id : int
        Unique within the run (and across resumes).
    share : int
        Sample share of the job (0 = the client's own default).
    started_at : float
        Clock time of the first train message.
    base_version : int
        Global version the job currently trains from (moves on when the node abandons).
    delivered : dict[int, float]
        Global version -> clock time it was sent to the node in this job.
    abandoned : int
        Times the node abandoned stale work and restarted within this job.
    """

    job_id: int
    share: int
    started_at: float
    base_version: int
    delivered: dict[int, float] = field(default_factory=dict)
    abandoned: int = 0

    def mismatch(self, reply: TrainReply) -> str | None:
        """Return why ``reply`` does not belong to this job (``None`` if it does)."""
        if reply.job_id is not None and reply.job_id != self.job_id:
            return f"job id {reply.job_id} but the message was for job {self.job_id}"
        if reply.base_version is not None and reply.base_version not in self.delivered:
            return (
                f"base version {reply.base_version} was never sent to this node "
                f"(sent: {sorted(self.delivered)})"
            )
        return None


@dataclass
class Node:
    """A node as the loop sees it.

    Attributes
    ----------
    node_id : int
        Flower's node id.
    share : int
        Current sample share (0 = unknown: the client uses its own default).
    ratio : float
        Match ratio from its profile (0 when not profiled).
    profiled : bool
        Whether its share comes from its profile.
    job : Job, optional
        The running job.
    outstanding : str, optional
        Id of the train message awaiting a reply (at most one per node).
    last_base : int
        Base version of its last finished (or refused) job; it waits for a newer version.
    late : bool
        Its current message missed its soft deadline.
    gone : bool
        It gets no jobs (left, or too many misses) until it registers again.
    registered : bool
        Whether the grid lists it.
    misses : int
        Forgotten messages in a row.
    observations : list[tuple[float, float]]
        Recent ``(share, seconds)`` pairs of whole jobs, for its time model.
    profile_pending : bool
        Its next (first) train message asks for its profile, or that request is unanswered.
    rejected : str or None
        Why its last reply was rejected (``None`` once an update of it is accepted).
    retries : int
        Jobs it was given again on the same global version after a stall
        (:func:`strategies.liveness.unblock`), reset when an update of it is accepted.
    availability : float
        Its availability in ``[0, 1]`` as its last reply reported it (1.0 until one does):
        the factor that scales its ``R`` in the scores the server derives theta from.
    planned_out : bool
        The share plan gives it 0 samples out of a positive total (a match ratio of 0 under
        the seed's rule, or a rebalancing that moved all its work away): it gets no job.
    """

    node_id: int
    share: int = 0
    ratio: float = 0.0
    profiled: bool = False
    job: Job | None = None
    outstanding: str | None = None
    last_base: int = -1
    late: bool = False
    gone: bool = False
    registered: bool = True
    misses: int = 0
    observations: list[tuple[float, float]] = field(default_factory=list)
    profile_pending: bool = False
    rejected: str | None = None
    retries: int = 0
    availability: float = 1.0
    planned_out: bool = False

    def free(self, base: int, rejected: str | None = None) -> None:
        """End the node's job: an update on ``base`` accepted, or its reply ``rejected``."""
        self.job = None
        self.last_base = base
        self.rejected = rejected
        if rejected is None:
            self.late = False
            self.retries = 0

    def ready(self, version: int) -> bool:
        """Return whether the node may get a new job for global ``version``."""
        return (
            self.outstanding is None
            and not self.gone
            and not self.planned_out
            and self.last_base < version
        )


class Membership:
    """The node table of one run and the rules for joining, leaving and expiry.

    Parameters
    ----------
    grid : Grid
        Flower's grid (its ``get_node_ids`` is the registration list).
    clock : Clock
        The run's clock (real time for waits and refreshes).
    loop : LoopConfig
        ``registration_timeout``, ``poll_interval``, ``max_misses``.
    name : str
        Strategy name for the logs.
    """

    def __init__(self, grid: Grid, clock: Clock, loop: LoopConfig, name: str) -> None:
        self.grid = grid
        self.clock = clock
        self.loop = loop
        self.name = name
        self.nodes: dict[int, Node] = {}
        self.next_refresh = 0.0

    def registered_ids(self) -> set[int]:
        """Return the ids the grid lists now."""
        return {int(n) for n in self.grid.get_node_ids()}

    def wait_for(self, need: int, hint: str = "") -> list[int]:
        """Wait until ``need`` nodes have registered; raise ConfigError after the timeout.

        Under Flower's simulation engine (its in-memory grid) every node of the federation
        registers at once, so a federation that is too small is known within
        :data:`SIMULATION_SETTLE` seconds of the first node: the error comes then, not after
        ``registration_timeout``. ``hint`` (how to fix it) ends the error's message.
        """
        simulated = type(self.grid).__name__ == "InMemoryGrid"
        deadline = self.clock.real_now() + self.loop.registration_timeout
        first_seen: float | None = None
        while True:
            ids = sorted(self.registered_ids())
            now = self.clock.real_now()
            if len(ids) >= need or now >= deadline:
                break
            if simulated and ids:
                first_seen = now if first_seen is None else first_seen
                if now - first_seen >= SIMULATION_SETTLE:
                    raise ConfigError(
                        f"the simulated federation has {len(ids)} nodes; this strategy needs "
                        f"at least {need} (min_nodes; default: the fewest that can trigger an "
                        f"aggregation){hint}"
                    )
            self.clock.sleep(min(self.loop.poll_interval, deadline - now))
        if len(ids) < need:
            raise ConfigError(
                f"only {len(ids)} node{'' if len(ids) == 1 else 's'} registered within "
                f"{self.loop.registration_timeout} s;"
                f" need at least {need} (min_nodes; default: the fewest that can trigger an "
                f"aggregation){hint}"
            )
        log(INFO, "%s: %d node%s registered", self.name, len(ids), "" if len(ids) == 1 else "s")
        return ids

    def admit(self, ids: list[int]) -> None:
        """Add a fresh node for each id."""
        for node_id in ids:
            self.nodes[node_id] = Node(node_id)

    def missed(self, node: Node, registered: set[int]) -> None:
        """Count a forgotten message of ``node``; mark it gone if it left or missed too often."""
        node.outstanding = None
        node.job = None
        node.last_base = -1
        node.misses += 1
        node.registered = node.node_id in registered
        node.gone = not node.registered or node.misses >= self.loop.max_misses
        if not node.registered:
            log(
                INFO,
                "%s: node %s is not registered: no jobs until it is back",
                self.name,
                node.node_id,
            )
        elif node.gone:
            log(
                WARNING,
                "%s: node %s dropped (%d missed messages in a row) until it registers again",
                self.name,
                node.node_id,
                node.misses,
            )

    def unavailable(self, node: Node) -> None:
        """Mark ``node`` gone, as unregistered: Flower answered its message "node unavailable".

        Its job ends; the next :meth:`refresh` that finds it in the grid's list brings it back
        ("back", a fresh job with the full model), as a node that left and registered again.
        Under a virtual clock membership is not re-read: it stays gone.
        """
        node.outstanding = None
        node.job = None
        node.last_base = -1
        node.registered = False
        node.gone = True

    def refresh(self, *, force: bool = False) -> bool:
        """Re-read the registration list, at most every ``max(1, 20 * poll_interval)`` s.

        ``force`` re-reads it now. Nodes that registered after the start join with the median
        share; nodes that left are gone; a node that registered again starts afresh. Return
        whether it re-read.
        """
        real = self.clock.real_now()
        if not force and real < self.next_refresh:
            return False
        self.next_refresh = real + max(1.0, 20 * self.loop.poll_interval)
        registered = self.registered_ids()
        shares = sorted(n.share for n in self.nodes.values() if not n.gone)
        typical = shares[len(shares) // 2] if shares else 0
        for node_id in sorted(registered - set(self.nodes)):
            self.nodes[node_id] = Node(node_id, share=typical)
            if typical:
                log(INFO, "%s: node %s joined: share %d (the median)", self.name, node_id, typical)
            else:
                log(INFO, "%s: node %s joined (its own default share)", self.name, node_id)
        for node in self.nodes.values():
            now = node.node_id in registered
            if now and not node.registered:
                node.misses = 0  # it registered again (restarted): a fresh start
                log(INFO, "%s: node %s is back", self.name, node.node_id)
            elif node.registered and not now:
                log(INFO, "%s: node %s left", self.name, node.node_id)
            node.registered = now
            node.gone = not now or node.misses >= self.loop.max_misses
        return True

    def all_waiting(self, version: int) -> bool:
        """Return whether no node can get a job for ``version`` (gone, busy or done)."""
        return all(not n.ready(version) for n in self.nodes.values())
