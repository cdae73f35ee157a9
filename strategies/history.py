"""The history of a run: one :class:`AggregationRecord` per aggregation.

Moved out of :mod:`strategies.records` (which re-exports it) to keep that module small.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flwr.app import MetricRecord

    from strategies.records import Update

__all__ = ["AggregationRecord"]


@dataclass(frozen=True)
class AggregationRecord:
    """One aggregation, as the history of a run keeps it.

    Attributes
    ----------
    round : int
        Aggregation number (1-based) = the new global version.
    time : float
        Seconds since ``start()`` was called, on the strategy's clock (virtual seconds under
        a virtual clock), carried on across a resume.
    participants, job_ids, base_versions : tuple[int, ...]
        Per aggregated update, in aggregation order (a node may appear twice).
    staleness : tuple[int, ...]
        Versions between each update's base and the version it was aggregated into, minus 1.
    delays : tuple[float, ...]
        ``dt_i``: receive time minus send time of the global the update started from.
    weights : tuple[float, ...]
        Normalised aggregation weights (sum to 1).
    raw_weights : tuple[float, ...]
        The weights as the strategy computed them (edge: ``c_i * g(dt_i)``; FedBuff:
        ``1 / sqrt(1 + staleness)``; FedAsync: the mixing weight ``alpha_t``).
    late : tuple[bool, ...]
        Whether each update missed its soft deadline.
    contributions, values : tuple[float, ...]
        Leave-one-out contributions and values per update (equal values when not valued).
    metrics : dict[str, float]
        The ``evaluate_fn`` metrics of the new global (empty without one).
    """

    round: int
    time: float
    participants: tuple[int, ...]
    job_ids: tuple[int, ...]
    base_versions: tuple[int, ...]
    staleness: tuple[int, ...]
    delays: tuple[float, ...]
    weights: tuple[float, ...]
    raw_weights: tuple[float, ...]
    late: tuple[bool, ...]
    contributions: tuple[float, ...]
    values: tuple[float, ...]
    metrics: dict[str, float]

    @classmethod
    def build(
        cls,
        rnd: int,
        time: float,
        updates: Sequence[Update],
        raw_weights: Sequence[float],
        valued: tuple[Sequence[float], Sequence[float]],
        metrics: MetricRecord | None,
    ) -> AggregationRecord:
        """Return the record of aggregation ``rnd`` of ``updates`` at ``time`` since the start.

        ``raw_weights`` are normalised for :attr:`weights`; ``valued`` is (contributions,
        values); only the numeric ``metrics`` are kept.
        """
        total = math.fsum(raw_weights)
        contributions, values = valued
        return cls(
            round=rnd,
            time=time,
            participants=tuple(u.node_id for u in updates),
            job_ids=tuple(u.job_id for u in updates),
            base_versions=tuple(u.base_version for u in updates),
            staleness=tuple(rnd - 1 - u.base_version for u in updates),
            delays=tuple(u.delay for u in updates),
            weights=tuple(w / total for w in raw_weights),
            raw_weights=tuple(raw_weights),
            late=tuple(u.late for u in updates),
            contributions=tuple(contributions),
            values=tuple(values),
            metrics={}
            if metrics is None
            else {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        )

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "round": self.round,
            "time": self.time,
            "participants": list(self.participants),
            "job_ids": list(self.job_ids),
            "base_versions": list(self.base_versions),
            "staleness": list(self.staleness),
            "delays": list(self.delays),
            "weights": list(self.weights),
            "raw_weights": list(self.raw_weights),
            "late": list(self.late),
            "contributions": list(self.contributions),
            "values": list(self.values),
            "metrics": dict(self.metrics),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AggregationRecord:
        """Rebuild a record from :meth:`to_json`'s output."""
        return cls(
            round=int(data["round"]),
            time=float(data["time"]),
            participants=tuple(int(x) for x in data["participants"]),
            job_ids=tuple(int(x) for x in data["job_ids"]),
            base_versions=tuple(int(x) for x in data["base_versions"]),
            staleness=tuple(int(x) for x in data["staleness"]),
            delays=tuple(float(x) for x in data["delays"]),
            weights=tuple(float(x) for x in data["weights"]),
            raw_weights=tuple(float(x) for x in data["raw_weights"]),
            late=tuple(bool(x) for x in data["late"]),
            contributions=tuple(float(x) for x in data["contributions"]),
            values=tuple(float(x) for x in data["values"]),
            metrics={str(k): float(v) for k, v in data["metrics"].items()},
        )
