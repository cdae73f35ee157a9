"""Soft per-message deadlines: fixed, or derived from the round trips observed on the run.

``LoopConfig.deadline="auto"`` (the default) gives each message to a node the deadline
``max(deadline_floor, deadline_factor * longest recent round trip of that node)``, or, for a
node without one yet, of every node's; before any round trip is known there is none (the
first message may include the node's profiling). A dead node is then noticed within a few
of its usual message times (tens of seconds), not only through Flower's heartbeat. Under a
virtual clock ``"auto"`` sets no deadline (the server sees every event; results must not
change with it). A number is a fixed deadline; ``None``, none.
"""

from __future__ import annotations

from collections import deque
from logging import INFO

from flwr.common.logger import log

from strategies.config import LoopConfig

__all__ = ["WINDOW", "DeadlinePolicy"]

#: round trips kept per node
WINDOW = 8


class DeadlinePolicy:
    """The soft deadline of each message.

    Parameters
    ----------
    loop : LoopConfig
        ``deadline``, ``deadline_factor``, ``deadline_floor``.
    virtual : bool
        Whether the run's clock is virtual.
    name : str
        Strategy name for the logs.
    """

    def __init__(self, loop: LoopConfig, *, virtual: bool, name: str) -> None:
        self.loop = loop
        self.auto = loop.deadline == "auto" and not virtual
        self.name = name
        self.trips: dict[int, deque[float]] = {}
        self.logged: dict[int, float] = {}

    def observe(self, node_id: int, seconds: float) -> None:
        """Record a message round trip of ``node_id`` (send to reply pulled, seconds)."""
        if seconds >= 0:  # kept in any mode (the end of a run reads them too)
            self.trips.setdefault(node_id, deque(maxlen=WINDOW)).append(seconds)

    def for_node(self, node_id: int) -> float | None:
        """Return the deadline, in clock seconds after the send, of a message to ``node_id``."""
        if not self.auto:
            fixed = self.loop.deadline
            return None if fixed is None or fixed == "auto" else float(fixed)
        own = self.trips.get(node_id)
        if own:
            longest = max(own)
        else:
            every = [t for trips in self.trips.values() for t in trips]
            if not every:
                return None
            longest = max(every)
        deadline = max(self.loop.deadline_floor, self.loop.deadline_factor * longest)
        previous = self.logged.get(node_id)
        if previous is None or abs(deadline - previous) > 0.25 * previous:
            self.logged[node_id] = deadline
            log(
                INFO,
                "%s: node %s deadline %.1f s (%.3g x its longest recent round trip, floor %s s)",
                self.name,
                node_id,
                deadline,
                self.loop.deadline_factor,
                self.loop.deadline_floor,
            )
        return deadline
