"""The server's side of the clients' abandon rule: R and theta for each message, and a tally.

Seed 001 leaves the client's resource ``R``, ``alpha`` and ``theta`` "preset"; the choices
are :mod:`flower_edge.decision`'s. The server sees every node's match ratio and every value,
so it is the one that can put ``R`` on a common scale (``sqrt(m / max m)``) and derive theta
from the live scores; it sends both with each train message (:data:`~flower_edge.wire.RESOURCE`,
:data:`~flower_edge.wire.THETA`). A strategy that sends no values (FedBuff, FedAsync) sends
``theta = inf``: its clients never abandon, as in their papers.

The tally counts, over the run:

``abandon-offers``
    Train messages that brought a newer global to a node busy with a stale job: each is a
    preemption point where the client takes the decision.
``abandoned-jobs``
    Of those, the ones where the client abandoned its stale work.
``abandon-samples-wasted``
    Samples the abandoning clients had already trained on the stale base (thrown away).
``abandon-samples-saved``
    Samples of those stale jobs that were never trained (``share - trained``): the compute
    that would have gone into an update already outdated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from flower_edge import validate, wire
from flower_edge.decision import derive_theta, linear_resources, neutral_value
from flower_edge.errors import ConfigError
from strategies.config import AbandonConfig
from strategies.evaluation import ServerEvaluation
from strategies.membership import Node

__all__ = ["AbandonPolicy", "AbandonTally"]


@dataclass
class AbandonTally:
    """Counts of the abandon rule over a run (see the module docstring)."""

    offers: int = 0
    abandoned: int = 0
    samples_wasted: int = 0
    samples_saved: int = 0

    def metrics(self) -> dict[str, int]:
        """Return the tally as train-metric entries."""
        return {
            "abandon-offers": self.offers,
            "abandoned-jobs": self.abandoned,
            "abandon-samples-wasted": self.samples_wasted,
            "abandon-samples-saved": self.samples_saved,
        }


class AbandonPolicy:
    """``R`` per node, the current ``theta``, and the tally of abandons.

    Parameters
    ----------
    config : AbandonConfig
        ``alpha``, a fixed ``theta`` or the ``quantile`` to derive it.
    enabled : bool
        ``False``: every message carries ``theta = inf`` (never abandon).
    """

    def __init__(self, config: AbandonConfig, *, enabled: bool) -> None:
        if not isinstance(config, AbandonConfig):
            raise ConfigError(f"abandon must be an AbandonConfig, got {type(config).__name__}")
        self.config = config
        self.enabled = validate.boolean("enabled", enabled)
        self.resources: dict[int, float] = {}
        # inf until the first refresh: no decision can come before the first aggregation
        self.theta = config.theta if enabled and config.theta is not None else math.inf
        self.tally = AbandonTally()
        self.trained: dict[int, int] = {}  # job id -> samples its last report had trained

    def refresh(
        self,
        ratios: Mapping[int, float],
        values: Mapping[int, float],
        latest: Sequence[float],
        availability: Mapping[int, float] | None = None,
    ) -> None:
        """Recompute every node's ``R`` and theta from the live state.

        Parameters
        ----------
        ratios : Mapping[int, float]
            Match ratio of every live node (0 when not profiled).
        values : Mapping[int, float]
            Latest known value per node (nodes never valued are absent).
        latest : Sequence[float]
            Values of the last aggregation (what the clients see), for the neutral value.
        availability : Mapping[int, float], optional
            Each node's last reported availability (1 when absent): the client scales its
            ``R`` by it, so theta is derived from the scores as the clients compute them.
        """
        if not ratios:
            return
        ids = sorted(ratios)
        scaled = linear_resources([min(1.0, max(0.0, ratios[i])) for i in ids])
        self.resources = {i: float(r) for i, r in zip(ids, scaled, strict=True)}
        if not self.enabled:
            return
        if self.config.theta is not None:
            self.theta = float(self.config.theta)
            return
        neutral = neutral_value(list(latest))
        node_values = [min(1.0, max(0.0, values.get(i, neutral))) for i in ids]
        available = availability or {}
        scores_r = [self.resources[i] * available.get(i, 1.0) for i in ids]
        self.theta = derive_theta(scores_r, node_values, self.config.alpha, self.config.quantile)

    def refresh_from(self, nodes: Iterable[Node], evaluation: ServerEvaluation) -> None:
        """:meth:`refresh` from the loop's nodes (the live ones) and latest values."""
        every = list(nodes)
        live = [n for n in every if not n.gone] or every
        ratios = {n.node_id: n.ratio for n in live}
        available = {n.node_id: n.availability for n in live}
        self.refresh(ratios, evaluation.values, evaluation.last_values[2], available)

    def fields(self, node_id: int) -> dict[str, float]:
        """Return the train-config entries for a message to ``node_id``."""
        out = {wire.THETA: float(self.theta)}
        if node_id in self.resources:
            out[wire.RESOURCE] = self.resources[node_id]
        return out

    def metrics(self) -> dict[str, int | float]:
        """Return the tally and the current theta (when finite) as train-metric entries."""
        out: dict[str, int | float] = dict(self.tally.metrics())
        if self.enabled and math.isfinite(self.theta):
            out["abandon-theta"] = float(self.theta)
        return out

    # ------------------------------------------------------------------ tally
    def offered(self) -> None:
        """Count a message that brings a newer global to a node busy with a stale job."""
        if self.enabled:  # with the rule off (theta = inf) there is no decision to offer
            self.tally.offers += 1

    def progress(self, job_id: int, share: int, trained: int, abandoned: bool) -> None:
        """Count a slice report: ``trained`` samples of the (new) job; ``abandoned`` if so.

        ``trained`` is capped at a known ``share``: a reply's ``samples-processed`` beyond it
        (``10**12``) would otherwise count as compute wasted.
        """
        if share > 0:
            trained = min(trained, share)
        if abandoned:
            before = self.trained.get(job_id, 0)
            self.tally.abandoned += 1
            self.tally.samples_wasted += before
            self.tally.samples_saved += max(share - before, 0)
        self.trained[job_id] = trained

    def finished(self, job_id: int) -> None:
        """Forget a job that ended."""
        self.trained.pop(job_id, None)

    def resume(
        self,
        train_metrics: Mapping[int, Mapping[str, object]],
        nodes: Iterable[Node],
        evaluation: ServerEvaluation,
    ) -> None:
        """Continue from a checkpoint: the tally of the last round's metrics, then refresh."""
        if train_metrics:
            last = train_metrics[max(train_metrics)]
            self.restore({k: v for k, v in last.items() if isinstance(v, int)})
        self.refresh_from(nodes, evaluation)

    def restore(self, tally: Mapping[str, int]) -> None:
        """Continue a tally from a checkpoint (``AbandonTally.metrics`` keys)."""
        self.tally = AbandonTally(
            offers=int(tally.get("abandon-offers", 0)),
            abandoned=int(tally.get("abandoned-jobs", 0)),
            samples_wasted=int(tally.get("abandon-samples-wasted", 0)),
            samples_saved=int(tally.get("abandon-samples-saved", 0)),
        )
