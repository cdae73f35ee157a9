"""When a run stops: the round and time budgets, a target metric, a plateau of the metric.

:class:`ConvergenceStop` is asked after every event whether the run is finished and is shown
the test metric after every aggregation. The first reason that applies is kept (and logged by
the loop), in words (:attr:`ConvergenceStop.reason`) and as a :data:`StopKind`
(:attr:`ConvergenceStop.kind`); the loop may also stop it for its own reasons (nothing can
happen any more: ``"stalled"``).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Literal

from strategies.config import StopConfig

__all__ = ["ConvergenceStop", "StopKind"]

#: why a run ended: its round budget, its time budget, the target metric, a plateau of the
#: metric (the convergence stop), or nothing could happen any more (no node left)
StopKind = Literal["rounds", "time", "target", "convergence", "stalled"]


class ConvergenceStop:
    """The stop rule of one run.

    Parameters
    ----------
    config : StopConfig
        Target and plateau (patience, min_delta, and the window of metrics whose mean is
        compared, :meth:`StopConfig.effective_window`).
    higher_is_better : bool
        Direction of the metric.
    num_rounds : int
        The round budget (aggregations).
    time_budget : float, optional
        Clock seconds since the start after which the run stops.
    """

    def __init__(
        self,
        config: StopConfig,
        *,
        higher_is_better: bool,
        num_rounds: int,
        time_budget: float | None,
    ) -> None:
        self.config = config
        self.sign = 1.0 if higher_is_better else -1.0
        self.num_rounds = num_rounds
        self.time_budget = time_budget
        self.best: float | None = None
        self.since_best = 0
        self.reason = ""
        self.kind: StopKind | None = None
        self.patience = config.patience
        self.recent: deque[float] = deque(maxlen=1)

    def size_for(self, nodes: int, per_aggregation: int) -> None:
        """Scale the plateau patience and window to a federation (``StopConfig``'s passes)."""
        self.patience = self.config.effective_patience(nodes, per_aggregation)
        window = self.config.effective_window(nodes, per_aggregation)
        self.recent = deque(self.recent, maxlen=window)

    def restore(self, best: float | None, since_best: int, recent: tuple[float, ...]) -> None:
        """Take the plateau state of a checkpoint (:class:`~strategies.checkpoint.RunState`)."""
        self.best = best
        self.since_best = since_best
        self.recent = deque(recent, maxlen=self.recent.maxlen)

    def stop(self, reason: str, kind: StopKind) -> None:
        """Stop the run for ``reason``, of ``kind`` (unless it already stopped)."""
        if not self.reason:
            self.reason = reason
            self.kind = kind

    def finished(self, version: int, elapsed: float) -> bool:
        """Return whether the run is over after ``version`` aggregations and ``elapsed`` s."""
        if self.reason:
            return True
        if version >= self.num_rounds:
            self.stop("round budget", "rounds")
            return True
        if self.time_budget is not None and elapsed >= self.time_budget:
            self.stop("time budget", "time")
            return True
        return False

    def observe(self, metric: float | None) -> None:
        """Take the test metric of a new global model (``None``: not evaluated).

        A NaN metric counts as no improvement; it never becomes the best (a NaN best would
        compare unequal to every later metric and call a plateau on an improving run).
        """
        if metric is None:
            return
        stop = self.config
        if stop.target is not None and self.sign * (metric - stop.target) >= 0:
            self.stop(f"target {stop.target} reached ({metric})", "target")
            return
        if math.isnan(metric):  # not an improvement, and never the best (it would stay best)
            if self.best is not None:
                self._no_improvement()
            return
        self.recent.append(metric)
        if len(self.recent) < (self.recent.maxlen or 1):
            return  # the window is not full yet: no best, no plateau
        smoothed = sum(self.recent) / len(self.recent)
        if math.isnan(smoothed):  # +inf and -inf in one window
            if self.best is not None:
                self._no_improvement()
            return
        if self.best is None or self.sign * (smoothed - self.best) > stop.min_delta:
            self.best = smoothed
            self.since_best = 0
        else:
            self._no_improvement()

    def _no_improvement(self) -> None:
        """Count an aggregation without a new best; stop once the patience is used up."""
        stop = self.config
        self.since_best += 1
        if self.patience is not None and self.since_best >= self.patience:
            size = len(self.recent)
            over = "" if size == 1 else f" of the {size}-aggregation mean"
            self.stop(
                f"plateau: no improvement > {stop.min_delta}{over} in {self.patience} aggregations",
                "convergence",
            )
