"""The simulation ServerApp: the chosen strategy on a virtual clock, evaluated centrally.

:func:`run_server` runs one simulation's server side and returns its
:class:`~simulations.report.RunResult` (history, timeline of slices, benchmark figures).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from logging import INFO
from typing import TYPE_CHECKING, Any, Final

from simulations.nodes import build_task, compute_share, devices_for, samples_per_round
from simulations.presets import VALIDATION_METRIC, describe
from simulations.report import HistoryPoint, RunResult, SpanKind, TimelineSpan
from simulations.settings import MAX_SHARE_OVER_MEAN, MESSAGE_TIMEOUT, SimSettings

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, Context, MetricRecord
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy

    from simulations.recorder import WorkLedger

__all__ = ["ProgressFn", "build_strategy", "make_server_app", "run_server", "unused_updates"]


class _Evaluator:
    """Centralized evaluation of the global model; notes the history of FedAvg rounds."""

    def __init__(
        self, settings: SimSettings, clock_now: Callable[[], float], progress: ProgressFn | None
    ) -> None:
        import torch

        from clients.data import load_centralized_test

        self.task = build_task(settings)
        self.test = load_centralized_test(settings.scenario.dataset, seed=settings.seed)
        torch.manual_seed(settings.seed)
        self.model = self.task.model_fn()
        self.loss = torch.nn.CrossEntropyLoss()
        self.clock_now = clock_now
        self.progress = progress
        self.rounds = settings.rounds
        self.points: dict[int, tuple[float, float]] = {}  # round -> (time, accuracy) (last call)
        #: the semi-asynchronous strategies' history: progress reports the served model of
        #: each aggregation from it (a round also evaluates leave-one-out and unserved models)
        self.records: list[Any] | None = None
        self.reported = 0
        sc = settings.scenario
        self.validation = None  # the edge preset's server-held validation set (val-* metrics)
        if settings.strategy == "edge" and sc.edge_validation is not None:
            from clients.data import load_server_validation

            self.validation = load_server_validation(
                sc.dataset, size=sc.edge_validation, seed=settings.seed
            )

    def report_records(self) -> None:
        """Report the progress of every aggregation recorded since the last report."""
        for rec in (self.records or [])[self.reported :]:
            if self.progress is not None:
                acc = float(rec.metrics.get("accuracy", math.nan))
                self.progress(rec.round, self.rounds, acc, rec.time)
            self.reported += 1

    def initial_arrays(self) -> ArrayRecord:
        from flwr.app import ArrayRecord

        return ArrayRecord(self.model.state_dict())

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord:
        import torch
        from flwr.app import MetricRecord

        from clients.task import evaluate_model

        self.model.load_state_dict(arrays.to_torch_state_dict(), strict=True)
        with torch.no_grad():
            res = evaluate_model(self.model, self.loss, self.test)
            val = (
                None
                if self.validation is None
                else evaluate_model(self.model, self.loss, self.validation)
            )
        self.points.setdefault(server_round, (self.clock_now(), res.accuracy))
        if self.records is not None:
            self.report_records()
        elif self.progress is not None:
            self.progress(server_round, self.rounds, res.accuracy, self.clock_now())
        metrics: dict[str, int | float | list[int] | list[float]] = {
            "accuracy": res.accuracy,
            "loss": res.loss,
        }
        if val is not None:
            metrics.update({"val-accuracy": val.accuracy, VALIDATION_METRIC: val.loss})
        return MetricRecord(metrics)


ProgressFn = Callable[[int, int, float, float], None]


#: a simulation's strategies keep no checkpoints, whatever FLOWER_EDGE_CHECKPOINT_DIR says:
#: the runs of one ``flower-edge simulate`` (strategies, seeds) would share its folder
NO_CHECKPOINTS: Final = ""


def build_strategy(settings: SimSettings, clock: Any) -> Strategy:
    """Return the strategy of ``settings`` on ``clock`` (a VirtualClock)."""
    sc = settings.scenario
    if settings.strategy == "fedavg":
        from simulations.fedavg import VirtualFedAvg

        return VirtualFedAvg(
            clock,
            fraction_train=1.0,
            fraction_evaluate=0.0,
            min_train_nodes=sc.num_clients,
            min_available_nodes=sc.num_clients,
        )
    import strategies
    from simulations.presets import EDGE_PRESETS, edge_options
    from strategies.config import AbandonConfig, LoopConfig, ShareConfig

    loop = LoopConfig(slice_budget=sc.slice_budget, min_nodes=sc.num_clients, poll_interval=0.01)
    uniform = settings.shares == "uniform"
    capped = settings.strategy != "edge-seed"  # the seed's shares are uncapped
    shares = ShareConfig(
        profile=not uniform,
        rebalance="off" if uniform else "seed",
        compute_share=compute_share(sc),  # the operator analysis of the scenario's model
        total_samples=None if uniform else samples_per_round(sc, settings.seed),
        max_share_fraction=min(1.0, MAX_SHARE_OVER_MEAN / sc.num_clients) if capped else 1.0,
        # edge: never more than edge_max_epochs epochs of a node's own data (issue 10)
        max_epochs=sc.edge_max_epochs if settings.strategy == "edge" else None,
        # the seed gives a node of match ratio 0 no samples; edge gives it F / n
        zero_ratio="none" if settings.strategy == "edge-seed" else "equal",
    )
    k = sc.k_for(settings.strategy) or sc.threshold  # each strategy's own (FedAsync: unused)
    if settings.strategy in EDGE_PRESETS:
        edge = strategies.EdgeStrategy(
            threshold=k,
            decay=settings.decay,
            decay_a=settings.decay_a,
            loop=loop,
            shares=shares,
            abandon=AbandonConfig(alpha=settings.alpha, theta=settings.theta),
            clock=clock,
            checkpoint_dir=NO_CHECKPOINTS,
            **edge_options(settings),
        )
        edge.name = settings.strategy  # the log says which preset ran
        return edge
    # the baselines keep their own defaults: equal shares, no values
    if settings.strategy == "fedbuff":
        return strategies.FedBuff(
            threshold=k, loop=loop, clock=clock, checkpoint_dir=NO_CHECKPOINTS
        )
    return strategies.FedAsync(loop=loop, clock=clock, checkpoint_dir=NO_CHECKPOINTS)


def run_server(grid: Grid, settings: SimSettings, progress: ProgressFn | None = None) -> RunResult:
    """Run one simulation's server side on ``grid``; return its result.

    Parameters
    ----------
    grid : Grid
        Flower's simulation grid, or ``strategies.inprocess.InProcessGrid``.
    settings : SimSettings
        The run.
    progress : callable, optional
        ``progress(round, rounds, accuracy, virtual_time)`` after each evaluation.
    """
    import torch

    # Single-threaded torch, as in flower-edge simulate and the engine's workers: float
    # results depend on the thread count, and the validation loss that the edge preset values
    # and drops on would tell apart a `flwr run .` from the same seed's CLI run.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_server(grid, settings, progress)
    finally:
        torch.set_num_threads(threads)


def _run_server(grid: Grid, settings: SimSettings, progress: ProgressFn | None) -> RunResult:
    """Run one simulation's server side (see :func:`run_server`)."""
    import torch
    from flwr.common.logger import log

    from simulations.recorder import RecordingGrid
    from strategies.clock import VirtualClock

    t0 = time.perf_counter()
    torch.manual_seed(settings.seed)
    clock = VirtualClock()
    recorder = RecordingGrid(
        grid, clock=clock.wall, stable_ids=True, num_nodes=settings.scenario.num_clients
    )
    evaluator = _Evaluator(settings, clock.now, progress)
    strategy = build_strategy(settings, clock)
    initial = evaluator.initial_arrays()
    evaluator(0, initial)
    if not hasattr(strategy, "round_seconds"):  # FedAvg has no aggregation records
        evaluator.records = getattr(strategy, "history", None)
    result = strategy.start(
        grid=recorder,
        initial_arrays=initial,
        num_rounds=settings.rounds,
        timeout=MESSAGE_TIMEOUT,
        evaluate_fn=evaluator,
    )
    evaluator.report_records()  # the last aggregation
    wall = time.perf_counter() - t0
    history = _history(strategy, evaluator, result)
    unused = recorder.ledger.slices_of(unused_updates(strategy, result))
    end = history[-1].virtual_time
    spans = _timeline(recorder.ledger, settings, unused, end)
    abandoned = recorder.ledger.abandoned_jobs
    log(
        INFO,
        "simulation %s/%s done in %.1f s wall",
        settings.scenario.name,
        settings.strategy,
        wall,
    )
    return RunResult(
        scenario=settings.scenario.name,
        strategy=settings.strategy,
        seed=settings.seed,
        clients=settings.scenario.num_clients,
        target_accuracy=settings.scenario.target_accuracy,
        final_accuracy=history[-1].accuracy,
        rounds=len(history) - 1,
        abandoned_jobs=abandoned,
        wasted_compute_fraction=recorder.ledger.wasted_fraction(unused, end=end),
        wall_seconds=wall,
        history=tuple(history),
        timeline=tuple(spans),
        extras={**_extras(recorder.ledger, history), **_dropped(result)},
        description=describe(settings),
        abandon=_abandon(result),
        rounds_requested=settings.rounds,
        stopped=getattr(strategy, "stop_kind", None) or "rounds",  # FedAvg: its rounds
        stop_reason=getattr(strategy, "stop_reason", "") or "round budget",
        heterogeneity=settings.scenario.heterogeneity,
        threshold=getattr(strategy, "threshold", None),  # FedAvg has none
    )


def _abandon(result: Any) -> dict[str, float]:
    """Return the abandon rule's tally from the strategy's last train metrics."""
    metrics = getattr(result, "train_metrics_clientapp", {}) or {}
    if not metrics:
        return {}
    last = metrics[max(metrics)]
    keys = {
        "offers": "abandon-offers",
        "abandoned": "abandoned-jobs",
        "samples_wasted": "abandon-samples-wasted",
        "samples_saved": "abandon-samples-saved",
        "theta": "abandon-theta",
    }
    return {k: float(last[w]) for k, w in keys.items() if w in last}


def _dropped(result: Any) -> dict[str, int]:
    """Return the counts of ``drop_worst``'s left-out updates and ``serve_better``'s choices.

    Each count is there only where the strategy may make that choice.
    """
    metrics = getattr(result, "train_metrics_clientapp", {}) or {}
    counts = [int(m["dropped-updates"]) for m in metrics.values() if "dropped-updates" in m]
    out = {"dropped_updates": sum(counts)} if counts else {}
    served = [int(m["served-global"]) for m in metrics.values() if "served-global" in m]
    if served:
        out["served_global"] = sum(served)
    return out


def _history(strategy: Any, evaluator: _Evaluator, result: Any) -> list[HistoryPoint]:
    t0, acc0 = evaluator.points[0]
    points = [HistoryPoint(0.0, 0, acc0, 0, 0.0)]
    records = getattr(strategy, "history", None)
    if records is not None and not hasattr(strategy, "round_seconds"):
        for rec in records:
            acc = float(rec.metrics.get("accuracy", math.nan))
            stal = sum(rec.staleness) / len(rec.staleness) if rec.staleness else 0.0
            points.append(HistoryPoint(rec.time, rec.round, acc, len(rec.participants), stal))
        return points
    participants: dict[int, int] = getattr(strategy, "round_participants", {})
    for rnd in sorted(r for r in evaluator.points if r > 0):
        when, acc = evaluator.points[rnd]
        points.append(HistoryPoint(when, rnd, acc, participants.get(rnd, 0), 0.0))
    return points


def unused_updates(strategy: Any, result: Any) -> set[tuple[int, int]]:
    """Return the (node id, job id) of the finished updates that no aggregation used.

    From the strategy's own records: updates it rejected (``rejected`` events), updates an
    aggregation left out (``drop_worst``: a round whose ``dropped-updates`` is 1 gives the
    dropped update weight 0 in its :class:`~strategies.records.AggregationRecord`), and
    updates accepted into the buffer (``finished`` events) that no aggregation took before
    the run ended. Empty for FedAvg, which keeps no such records.
    """
    events = getattr(strategy, "events", None)
    records = getattr(strategy, "history", None)
    if events is None or records is None or hasattr(strategy, "round_seconds"):
        return set()
    metrics = getattr(result, "train_metrics_clientapp", {}) or {}
    used: set[tuple[int, int]] = set()
    for rec in records:
        keys = list(zip(rec.participants, rec.job_ids, strict=True))
        round_metrics = metrics.get(rec.round)
        if round_metrics is not None and round_metrics.get("dropped-updates", 0):
            left_out = next((i for i, w in enumerate(rec.weights) if w == 0.0), None)
            if left_out is not None:
                del keys[left_out]
        used.update(keys)
    received = {
        (e.node_id, e.job_id)
        for e in events
        if e.kind in ("finished", "rejected") and e.job_id >= 0
    }
    return received - used


def _timeline(
    ledger: WorkLedger, settings: SimSettings, unused: set[int], end: float
) -> list[TimelineSpan]:
    """Return every client's spans: training, abandoned, wasted (``unused``), offline.

    The spans stop at ``end``, the run's last aggregation (the table's virtual seconds): a
    reply pulled after it is work still in flight, drawn up to ``end`` only (found by a
    new-user probe: a flaky node's in-flight job stretched the chart to three times the run).
    A run without an aggregation keeps every span.
    """
    spans: list[TimelineSpan] = []
    partition = ledger.partitions
    if end <= 0.0:
        end = max((s.end for s in ledger.slices), default=0.0)
    for i, s in enumerate(ledger.slices):
        if s.start >= end:  # sent after the run's end: nothing of it falls within
            continue
        node = partition.get(s.node_id, -1)
        kind: SpanKind = (
            "abandoned" if i in ledger.abandoned_slices else "wasted" if i in unused else "training"
        )
        spans.append(TimelineSpan(node, s.start, min(s.end, end), kind))
    for device in devices_for(settings.scenario, settings.seed):
        for a, b in device.offline_stretches(0.0, end):
            spans.append(TimelineSpan(device.spec.node, a, b, "offline"))
    spans.sort(key=lambda sp: (sp.node, sp.start, sp.end, sp.kind))
    return spans


def _extras(ledger: WorkLedger, history: list[HistoryPoint]) -> dict[str, Any]:
    """Benchmark figures: samples, slices and the iteration makespan of finished jobs.

    A job's duration runs from its first slice's send to its update's arrival. The
    *iteration makespan* is the largest per-node mean job duration; *job balance* is that
    over the smallest (1 = every node finishes its share in the same time, seed 000's aim).
    """
    open_start: dict[int, float] = {}
    per_node: dict[int, list[float]] = {}
    for s in ledger.slices:
        if s.abandoned or s.node_id not in open_start:
            open_start[s.node_id] = s.start
        if s.done:
            per_node.setdefault(s.node_id, []).append(s.end - open_start.pop(s.node_id))
    means = [sum(v) / len(v) for v in per_node.values() if v]
    makespan = max(means) if means else 0.0
    fastest = min(means) if means else 0.0
    return {
        "samples_processed": ledger.samples(),
        "slices": len(ledger.slices),
        "virtual_seconds": history[-1].virtual_time,
        "iteration_makespan": makespan,
        "job_balance": makespan / fastest if fastest > 0 else math.inf,
    }


def make_server_app(
    settings: SimSettings | None = None,
    sink: Callable[[RunResult], None] | None = None,
    progress: ProgressFn | None = None,
) -> ServerApp:
    """Build the simulation ServerApp.

    Parameters
    ----------
    settings : SimSettings, optional
        The run (the runner passes them); ``None`` reads them from the run config.
    sink : callable, optional
        Receives the :class:`RunResult` (the runner collects it; ``flwr run .`` logs it).
    progress : callable, optional
        See :func:`run_server`.
    """
    from flwr.common.logger import log
    from flwr.serverapp import ServerApp

    from simulations.report import results_to_json

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        if settings is not None:
            s = settings
        else:  # flwr run .: the run's clients are the federation's SuperNodes (or an error)
            from simulations.federation import federation_size, sized_settings

            s = sized_settings(context.run_config, federation_size(grid.get_node_ids))
        result = run_server(grid, s, progress)
        if sink is not None:
            sink(result)
        else:
            log(INFO, "result: %s", results_to_json([result], as_list=False))

    return app
