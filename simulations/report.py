"""Results of simulation runs: typed records, the JSON contract, summaries and output folders.

JSON contract of ``flower-edge simulate --json`` (one object per run; a list for
``--strategy all``)::

    {"scenario": str, "strategy": str, "seed": int, "clients": int,
     "heterogeneity": float (fastest / slowest compute of the devices, as run),
     "threshold": int | null (the K the strategy ran with; null for FedAvg),
     "engine": "ray" | "inprocess" | "flwr-run",
     "target_accuracy": float, "time_to_target": float | null (virtual seconds),
     "final_accuracy": float, "rounds": int,
     "rounds_requested": int (the round budget: --rounds, or the scenario's update budget),
     "stopped": "rounds" | "time" | "target" | "convergence" | "stalled",
     "stop_reason": str (the strategy's words), "abandoned_jobs": int,
     "wasted_compute_fraction": float, "wall_seconds": float,
     "description": str,
     "abandon": {"offers": int, "abandoned": int, "samples_wasted": int,
                 "samples_saved": int, "theta": float | null},
     "dropped_updates": int | null (aggregations that left out their worst update;
                                    null where the strategy never drops),
     "served_global": int | null (aggregations after which serve_better served the
                                  global model instead of its average; null without it),
     "history": [{"virtual_time": float, "round": int, "accuracy": float,
                  "participants": int, "mean_staleness": float}]}

``wasted_compute_fraction`` is the fraction of the training samples the clients processed
whose work never reached the global model: jobs abandoned by the abandon rule, plus finished
updates the server rejected, left out of their aggregation (``drop_worst``: the
``dropped_updates``) or had not aggregated when the run ended
(:func:`simulations.server.unused_updates`). Work still in flight when the run ends (jobs
that had not delivered their update by the last aggregation) is not counted either way
(:meth:`simulations.recorder.WorkLedger.in_flight`).

The first fields identify the run: with ``heterogeneity`` and ``threshold`` as resolved (a
``--clients`` below the scenario's lowers K with it), ``rounds_requested`` and ``engine``
(``flwr-run``: the ServerApp under ``flwr run .``), the same command runs it again.
``threshold`` is the strategy's own K: ``edge`` and ``edge-seed`` aggregate when more than K
updates are in, FedBuff at K, FedAsync at 1.

``rounds`` is the aggregations done; ``stopped`` says what ended the run
(:data:`strategies.convergence.StopKind`): its round budget of ``rounds_requested``
aggregations, a time budget, a target metric, the plateau of the metric (``convergence``,
the edge presets' default stop), or nothing could happen any more (``stalled``).

``description`` names the strategy; for ``edge`` it lists every departure from the seeds
(``simulations.presets``). ``abandon`` is the strategy's own tally of the abandon rule
(``strategies.abandon``): preemption points offered (a newer global reached a node busy with a
stale job), jobs abandoned there, the samples those jobs had trained (wasted) and the samples
they did not need to train (saved), and the last theta sent; all 0 (theta null) for a
strategy without the rule. ``abandoned_jobs`` counts every abandon a client reported, replies
still in flight when the run ended included; ``abandon.abandoned`` only those the strategy
processed, so it can be smaller.

A partial ``--strategy all`` run (a later strategy failed or was interrupted after at least
one had finished) adds to every row ``"unfinished": {strategy: reason}``: each strategy that
did not finish, with ``"interrupted"``, the error's one-line message, or ``"not started"``
(:func:`results_to_json`). A complete run has no such field.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from simulations.presets import EDGE_PRESETS

if TYPE_CHECKING:
    from strategies.convergence import StopKind

__all__ = [
    "HistoryPoint",
    "RunResult",
    "SpanKind",
    "TimelineSpan",
    "results_to_json",
    "stop_line",
    "summary_table",
    "time_to_target",
    "write_json",
]

SpanKind = Literal["training", "abandoned", "offline", "wasted"]


@dataclass(frozen=True)
class HistoryPoint:
    """The global model after one aggregation.

    Parameters
    ----------
    virtual_time : float
        Virtual seconds at which the aggregation happened (0 for the initial model).
    round : int
        Aggregation number (0 = the initial model).
    accuracy : float
        Centralized test accuracy of the global model, in [0, 1].
    participants : int
        Updates aggregated in this round.
    mean_staleness : float
        Mean staleness of the aggregated updates, in global versions (0 for FedAvg).
    """

    virtual_time: float
    round: int
    accuracy: float
    participants: int
    mean_staleness: float

    def to_dict(self) -> dict[str, float | int]:
        """Return the JSON-ready dict of the contract."""
        return {
            "virtual_time": self.virtual_time,
            "round": self.round,
            "accuracy": self.accuracy,
            "participants": self.participants,
            "mean_staleness": self.mean_staleness,
        }


@dataclass(frozen=True)
class TimelineSpan:
    """One stretch of one client's timeline, in virtual seconds.

    Parameters
    ----------
    node : int
        Partition id of the client.
    start, end : float
        Virtual seconds; ``start <= end``.
    kind : {"training", "abandoned", "offline", "wasted"}
        ``training``: a slice whose work was aggregated or is still useful; ``abandoned``:
        a slice of a job later abandoned; ``wasted``: a slice of a finished update that no
        aggregation used (rejected, left out by ``drop_worst``, never aggregated);
        ``offline``: the device was unreachable.
    """

    node: int
    start: float
    end: float
    kind: SpanKind


@dataclass(frozen=True)
class RunResult:
    """Everything one simulation run produced.

    Parameters
    ----------
    scenario, strategy : str
        What ran.
    seed, clients : int
        Seed and number of clients.
    target_accuracy : float
        Target of ``time_to_target``.
    final_accuracy : float
        Accuracy of the last global model.
    rounds : int
        Aggregations done.
    abandoned_jobs : int
        Jobs the clients abandoned (abandon rule).
    wasted_compute_fraction : float
        See the module docstring.
    wall_seconds : float
        Host seconds of the run, engine start-up included.
    history : tuple[HistoryPoint, ...]
        One point per aggregation, the initial model first.
    timeline : tuple[TimelineSpan, ...] (default: ())
        Per-client spans (for the timeline plot; not part of the JSON contract).
    extras : dict[str, Any] (default: {})
        Extra figures for benchmarks (iteration makespan, samples processed, ...).
    description : str (default: "")
        What the strategy is; for ``edge``, its departures from the seeds.
    abandon : dict[str, float] (default: {})
        The abandon rule's tally (see the module docstring).
    rounds_requested : int (default: 0)
        The round budget the run was given.
    stopped : StopKind (default: "rounds")
        What ended the run (see the module docstring).
    stop_reason : str (default: "round budget")
        The same in the strategy's words.
    heterogeneity : float (default: 0.0)
        Fastest / slowest compute of the devices, as run.
    threshold : int, optional
        The strategy's K (``None`` for FedAvg).
    engine : str (default: "flwr-run")
        ``ray`` or ``inprocess`` (``flower-edge simulate``), ``flwr-run`` (``flwr run .``).
    """

    scenario: str
    strategy: str
    seed: int
    clients: int
    target_accuracy: float
    final_accuracy: float
    rounds: int
    abandoned_jobs: int
    wasted_compute_fraction: float
    wall_seconds: float
    history: tuple[HistoryPoint, ...]
    timeline: tuple[TimelineSpan, ...] = ()
    extras: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    description: str = ""
    abandon: dict[str, float] = field(default_factory=dict, hash=False, compare=False)
    rounds_requested: int = 0
    stopped: StopKind = "rounds"
    stop_reason: str = "round budget"
    heterogeneity: float = 0.0
    threshold: int | None = None
    engine: str = "flwr-run"

    @property
    def time_to_target(self) -> float | None:
        """Virtual seconds until the accuracy first reached the target; ``None`` if never."""
        return time_to_target(self.history, self.target_accuracy)

    @property
    def virtual_seconds(self) -> float:
        """Virtual time of the last aggregation."""
        return self.history[-1].virtual_time if self.history else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of the ``--json`` contract."""
        return {
            "scenario": self.scenario,
            "strategy": self.strategy,
            "seed": self.seed,
            "clients": self.clients,
            "heterogeneity": self.heterogeneity,
            "threshold": self.threshold,
            "engine": self.engine,
            "target_accuracy": self.target_accuracy,
            "time_to_target": self.time_to_target,
            "final_accuracy": self.final_accuracy,
            "rounds": self.rounds,
            "rounds_requested": self.rounds_requested,
            "stopped": self.stopped,
            "stop_reason": self.stop_reason,
            "abandoned_jobs": self.abandoned_jobs,
            "wasted_compute_fraction": self.wasted_compute_fraction,
            "wall_seconds": self.wall_seconds,
            "description": self.description,
            "abandon": {
                "offers": int(self.abandon.get("offers", 0)),
                "abandoned": int(self.abandon.get("abandoned", 0)),
                "samples_wasted": int(self.abandon.get("samples_wasted", 0)),
                "samples_saved": int(self.abandon.get("samples_saved", 0)),
                "theta": self.abandon.get("theta"),
            },
            "dropped_updates": self.extras.get("dropped_updates"),
            "served_global": self.extras.get("served_global"),
            "history": [h.to_dict() for h in self.history],
        }


def time_to_target(history: Sequence[HistoryPoint], target: float) -> float | None:
    """Return the virtual time of the first point whose accuracy is >= ``target``."""
    for point in history:
        if point.accuracy >= target:
            return point.virtual_time
    return None


def results_to_json(
    results: Sequence[RunResult], *, as_list: bool, unfinished: Mapping[str, str] | None = None
) -> str:
    """Return the JSON text of the contract: one object, or a list when ``as_list``.

    ``unfinished`` (a partial run: each strategy that did not finish, and why) is added to
    every row as the field ``unfinished``; a complete run has no such field.
    """
    rows = [r.to_dict() for r in results]
    if unfinished:
        for row in rows:
            row["unfinished"] = dict(unfinished)
    payload: Any = rows if as_list else rows[0]
    return json.dumps(payload, indent=2, allow_nan=False)


def partial_line(unfinished: Mapping[str, str]) -> str:
    """Return the table's line that marks a partial run (empty for a complete one)."""
    if not unfinished:
        return ""
    missing = ", ".join(f"{name} ({why})" for name, why in unfinished.items())
    return f"PARTIAL: only the strategies above finished; did not finish: {missing}"


def _fmt(value: float | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, spec)


def _short(value: float | None, decimals: int) -> str:
    """Format ``value`` with ``decimals`` decimals, two significant digits below 0.1."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.2g}" if 0.0 < abs(value) < 0.1 else f"{value:.{decimals}f}"


def seconds_text(value: float | None) -> str:
    """Format virtual seconds for the table, the plots and the progress bar.

    One decimal, and two significant digits below 0.1 s: with ``--heterogeneity 1000000``
    a run reached its target at 0.015 virtual s, which the table read ``0.0`` and the
    accuracy chart's legend ``target at 0 s`` (whose whole seconds also read 0.92 s, 1.10 s
    and 1.31 s all as ``1 s``; found by a new-user probe). ``-`` for none.
    """
    return _short(value, 1)


def accuracy_text(value: float) -> str:
    """Format an accuracy for the table and the progress bar, rounded down to 3 decimals.

    Rounded to nearest, a final accuracy of 0.8997 read ``0.900`` beside a target of 0.90
    that the run never reached (``t->target`` ``-``; found by a new-user probe); the progress
    bar, rounded to nearest, showed ``acc 0.811`` for the table's ``0.810``.
    """
    if not math.isfinite(value):
        return "-"
    return f"{math.floor(value * 1000 + 1e-9) / 1000:.3f}"


def summary_table(results: Sequence[RunResult]) -> str:
    """Return a plain-text table: one row per run, ratios to FedAvg when it ran."""
    # the seed column widens for a large --seed (up to 2**64 - 1), so the columns stay aligned
    sw = max([4, *(len(str(r.seed)) for r in results)])
    header = (
        f"{'strategy':<9} {'seed':>{sw}} {'rounds':>6} {'final acc':>9} {'t->target':>10} "
        f"{'vs fedavg':>9} {'virtual s':>10} {'abandoned':>9} {'wasted':>7} {'wall s':>7}"
    )
    base = {r.seed: r.time_to_target for r in results if r.strategy == "fedavg"}
    lines = [header, "-" * len(header)]
    for r in results:
        ttt = r.time_to_target
        ref = base.get(r.seed)
        ratio = ttt / ref if ttt is not None and ref else None
        lines.append(
            f"{r.strategy:<9} {r.seed:>{sw}} {r.rounds:>6} {accuracy_text(r.final_accuracy):>9} "
            f"{seconds_text(ttt):>10} {_short(ratio, 2):>9} "
            f"{seconds_text(r.virtual_seconds):>10} {r.abandoned_jobs:>9} "
            f"{_fmt(r.wasted_compute_fraction, '.1%'):>7} {_fmt(r.wall_seconds, '.1f'):>7}"
        )
    if results:
        r0 = results[0]
        lines.append(
            f"scenario {r0.scenario}, {r0.clients} clients, target accuracy "
            f"{r0.target_accuracy:.2f}; times in virtual seconds"
        )
        lines.extend(_resized(r0.scenario, r0.clients))
        lines.extend(_ks(results))
    # what ended a run, where it was not its round budget (the table's rounds say that)
    lines.extend(stop_line(r) for r in results if r.stopped != "rounds")
    for r in results:
        a = r.abandon
        if a.get("offers"):
            lines.append(
                f"{r.strategy}: abandon rule fired {int(a.get('abandoned', 0))} times at "
                f"{int(a.get('offers', 0))} preemption points; samples wasted "
                f"{int(a.get('samples_wasted', 0))}, saved {int(a.get('samples_saved', 0))}"
            )
        elif r.strategy in EDGE_PRESETS:  # said, not left out: the rule had nothing to decide
            lines.append(
                f"{r.strategy}: abandon rule never had to decide: no job was still running "
                "when a newer global model reached its node (0 preemption points)"
            )
    for r in results:
        dropped = r.extras.get("dropped_updates")
        if dropped is not None:
            lines.append(
                f"{r.strategy}: left out its worst update in {int(dropped)} of {r.rounds} "
                "aggregations (drop_worst, on the server's validation set)"
            )
        served = r.extras.get("served_global")
        if served is not None:
            lines.append(
                f"{r.strategy}: served the global model instead of its average after "
                f"{int(served)} of {r.rounds} aggregations (serve_better, on the server's "
                "validation set)"
            )
    described = {r.strategy: r.description for r in results if r.description}
    lines.extend(described.values())
    return "\n".join(lines)


def _ks(results: Sequence[RunResult]) -> list[str]:
    """Return the line naming each strategy's K, where the runs' Ks differ (else none).

    A scenario may give the ``edge`` preset a K of its own (``Scenario.edge_threshold``:
    digits-20), which the table's rounds alone do not explain.
    """
    ks = {r.strategy: r.threshold for r in results if r.threshold is not None}
    if len(set(ks.values())) < 2:
        return []
    parts = [
        f"{name} more than {k}" if name in EDGE_PRESETS else f"{name} {k}" for name, k in ks.items()
    ]
    return ["updates per aggregation (K): " + ", ".join(parts)]


#: how the table names each stop kind
_STOPPED_BY: Final[dict[str, str]] = {
    "rounds": "its round budget",
    "time": "its time budget",
    "target": "the target metric",
    "convergence": "the convergence stop",
    "stalled": "a stall",
}


def stop_line(result: RunResult) -> str:
    """Return the table's line on what ended a run and after how many aggregations.

    A run may end before its round budget (``--rounds``): the edge presets stop on a plateau
    of the validation loss, and this line says so.
    """
    by = _STOPPED_BY.get(result.stopped, result.stopped)
    line = (
        f"{result.strategy}: stopped by {by} after {result.rounds} of "
        f"{result.rounds_requested} aggregations"
    )
    if result.stopped != "rounds" and result.stop_reason:
        line += f" ({result.stop_reason})"
    return line


def write_json(
    results: Sequence[RunResult],
    path: Path,
    *,
    as_list: bool,
    unfinished: Mapping[str, str] | None = None,
) -> Path:
    """Write :func:`results_to_json` to ``path`` and return it."""
    text = results_to_json(results, as_list=as_list, unfinished=unfinished)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _resized(name: str, clients: int) -> list[str]:
    """Say how a scenario run on fewer clients than designed was rescaled (or nothing)."""
    from simulations.scenarios import SCENARIOS, resolve_scenario

    base = SCENARIOS.get(name)
    if base is None or clients >= base.num_clients:
        return []
    sc = resolve_scenario(name, clients=clients)
    return [
        f"resized from {base.num_clients} to {clients} clients: local learning rate "
        f"{sc.learning_rate:g} (was {base.learning_rate:g}) and slices of {sc.slice_budget:g} s "
        f"(was {base.slice_budget:g} s), so that a job's larger partition does not make "
        "local SGD diverge"
    ]
