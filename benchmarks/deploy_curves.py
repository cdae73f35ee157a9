"""Curves and rhythm of a real-deployment run, read from its logs and job timeline.

Used by ``benchmarks/real_deployment.py``: a strategy's ``[time, accuracy]`` curve from its
round lines (a run stopped before its result line has only those), the time a curve reaches
a target, and the run's rhythm from the bench app's ``timeline`` (twentieth session).
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

__all__ = [
    "ACCURACY_LINE",
    "ROUND_LINE",
    "curve_from_log",
    "final_within",
    "job_slowdown",
    "rhythm",
    "time_to",
]

ROUND_LINE = re.compile(r"\[(\w[\w-]*) round (\d+)\] t=([0-9.]+) .* metric=([0-9.eE+-]+)")
ACCURACY_LINE = re.compile(r"MetricRecord: \{'accuracy': ([0-9.eE+-]+)")


def curve_from_log(log: str) -> list[list[float]]:
    """Return ``[time, accuracy]`` per aggregation from the strategy's round lines.

    The accuracy is the served model's, on the ``MetricRecord: {'accuracy': ...`` line that
    follows a round line; the round line's own ``metric=`` (edge's is its validation loss)
    only when none follows it.
    """
    curve: list[list[float]] = []
    pending: tuple[float, float] | None = None
    for line in log.splitlines():
        found = ROUND_LINE.search(line)
        accuracy = ACCURACY_LINE.search(line)
        if found:
            if pending is not None:
                curve.append(list(pending))
            pending = (float(found.group(3)), float(found.group(4)))
        elif accuracy and pending is not None:
            curve.append([pending[0], float(accuracy.group(1))])
            pending = None
    if pending is not None:
        curve.append(list(pending))
    return curve


def final_within(curve: list[list[float]], budget: float) -> float:
    """Return the accuracy of the last global model published within ``budget`` seconds."""
    inside = [acc for t, acc in curve if t <= budget]
    return inside[-1] if inside else math.nan


def time_to(curve: list[list[float]], target: float) -> float | None:
    """Return the first wall time at which the accuracy reached ``target`` (None: never)."""
    return next((t for t, acc in curve if acc >= target), None)


def rhythm(
    timeline: list[list[Any]], curve: list[list[float]], first: int
) -> tuple[float | None, float | None]:
    """Return the ``first``-th finished job of the first wave (from version 0) and the median
    seconds from a reply at an aggregation's time (within 0.05 s) to that node's next job;
    ``None`` where the job ``timeline`` (rows ``[time, node, job, kind, version, samples]``,
    the bench app's) has none."""
    wave = sorted(row[0] for row in timeline if row[3] == "finished" and row[4] == 0)
    nth = wave[first - 1] if 0 < first <= len(wave) else None
    times = [point[0] for point in curve]
    gaps = []
    for i, (when, node, _, kind, _, _) in enumerate(timeline):
        if kind != "finished" or not any(abs(when - t) < 0.05 for t in times):
            continue
        later = [row[0] for row in timeline[i + 1 :] if row[1] == node and row[3] == "sent"]
        if later:
            gaps.append(later[0] - when)
    return nth, statistics.median(gaps) if gaps else None


def job_slowdown(timeline: list[list[Any]], slow_node: int) -> dict[str, float] | None:
    """Return how much longer the slowed node's jobs took than the others', in fact.

    A job's time runs from its ``sent`` event to its ``finished`` event in the bench app's
    timeline (rows ``[t, node, job, event, ...]``). Returns the median job time of the
    slowed node and of the others, and their ratio; None without a finished job of each.
    """
    sent: dict[Any, float] = {}
    slow: list[float] = []
    others: list[float] = []
    for t, node, job, event, *_ in timeline:
        if event == "sent":
            sent[job] = float(t)
        elif event == "finished" and job in sent:
            (slow if int(node) == slow_node else others).append(float(t) - sent.pop(job))
    if not slow or not others:
        return None
    mine, theirs = statistics.median(slow), statistics.median(others)
    return {"slow_job": mine, "other_job": theirs, "ratio": mine / theirs, "slow_jobs": len(slow)}
