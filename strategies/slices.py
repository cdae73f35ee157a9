"""The slice budget sent with each train message, fixed or chosen from the measured overhead.

``LoopConfig.slice_budget="auto"`` (the default) keeps slices on everywhere, so that a busy
node hears of a newer global model at the next slice boundary and the abandon rule can act:

* on a wall clock, the budget follows the runtime's per-message overhead as measured on this
  run (:func:`flower_edge.slicing.message_overhead` over the last :data:`WINDOW` finished
  messages: the server's round trip minus the seconds the client reports training), through
  :func:`flower_edge.slicing.slice_budget_for_overhead` (10 times the overhead, at least
  1 s). Until :data:`MIN_SAMPLES` messages have come back it is :data:`INITIAL_BUDGET`.
* on a virtual clock, :data:`INITIAL_BUDGET` virtual seconds, fixed (results must not depend
  on the host's speed).

With a fixed soft per-message ``deadline`` (seconds), an automatic budget is at most half of
it, so that a slice and its overhead fit in the deadline; an ``"auto"`` deadline follows the
observed round trips, slices included (:mod:`strategies.deadlines`).

A number sets the budget (seconds; virtual seconds under a virtual clock; 0 = no slicing).
"""

from __future__ import annotations

import math
from collections import deque

from flower_edge.slicing import message_overhead, slice_budget_for_overhead
from strategies.config import LoopConfig

__all__ = ["INITIAL_BUDGET", "MIN_SAMPLES", "WINDOW", "SliceBudget"]

#: seconds per slice before the overhead is known (a SuperNode starting a ClientApp process
#: that imports torch costs seconds per message; 10 s keeps slices long enough for that)
INITIAL_BUDGET = 10.0
#: finished messages needed before the measured overhead replaces the initial budget
MIN_SAMPLES = 3
#: finished messages the overhead is measured over (the most recent)
WINDOW = 32


class SliceBudget:
    """The slice budget of the next train message.

    Parameters
    ----------
    loop : LoopConfig
        ``slice_budget``: a number, or ``"auto"``.
    virtual : bool
        Whether the run's clock is virtual (then ``"auto"`` is fixed).
    """

    def __init__(self, loop: LoopConfig, *, virtual: bool) -> None:
        self.auto = loop.slice_budget == "auto"
        self.fixed = INITIAL_BUDGET if self.auto else float(loop.slice_budget)
        self.adaptive = self.auto and not virtual
        fixed_deadline = loop.deadline if isinstance(loop.deadline, int | float) else None
        self.ceiling = math.inf if fixed_deadline is None else 0.5 * fixed_deadline
        self.round_trips: deque[float] = deque(maxlen=WINDOW)
        self.compute: deque[float] = deque(maxlen=WINDOW)
        self.job_seconds: dict[int, float] = {}  # job id -> its training seconds so far

    def observe(
        self, job_id: int, round_trip: float, train_seconds: float | None, *, restarted: bool
    ) -> None:
        """Record a reply: real seconds from send to reply and the job's training seconds.

        ``train_seconds`` is the job's total so far (the client's ``train-seconds``); the
        slice's own share is its increase since the job's last reply, or all of it when this
        message started (or restarted, ``restarted``) the job.
        """
        if not self.adaptive or train_seconds is None:
            return
        before = 0.0 if restarted else self.job_seconds.get(job_id, 0.0)
        self.job_seconds[job_id] = float(train_seconds)
        self.round_trips.append(max(0.0, float(round_trip)))
        self.compute.append(max(0.0, float(train_seconds) - before))

    def finished(self, job_id: int) -> None:
        """Forget a job that ended."""
        self.job_seconds.pop(job_id, None)

    def overhead(self) -> float | None:
        """Return the measured per-message overhead (``None`` before :data:`MIN_SAMPLES`)."""
        if len(self.round_trips) < MIN_SAMPLES:
            return None
        return message_overhead(list(self.round_trips), list(self.compute))

    def current(self) -> float:
        """Return the budget to send now."""
        if not self.auto:
            return self.fixed
        overhead = self.overhead() if self.adaptive else None
        budget = self.fixed if overhead is None else slice_budget_for_overhead(overhead)
        return min(budget, self.ceiling)
