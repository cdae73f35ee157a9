"""The Flower App of the simulations: ``server_app`` and ``client_app`` for ``flwr run .``.

``pyproject.toml`` points ``[tool.flwr.app.components]`` at :data:`server_app` and
:data:`client_app`. Both read their settings from the run config (``[tool.flwr.app.config]``,
or ``flwr run . --run-config "key=value ..."``), validated by
:meth:`SimSettings.from_run_config` before any message is sent:

=======================  =====================================================================
key                      meaning (default)
=======================  =====================================================================
``scenario``             scenario name (``digits-20``); see ``simulations.scenarios``
``strategy``             ``edge`` | ``fedavg`` | ``fedbuff`` | ``fedasync`` (``edge``)
``num-server-rounds``    aggregations; 0 = the scenario's update budget (0)
``threshold``            K; 0 = the scenario's (0)
``decay``                staleness decay of the edge strategy (``polynomial``)
``decay-a``              its parameter (0.5)
``alpha``, ``theta``     abandon rule: ``score = alpha R + (1 - alpha) V >= theta`` (0.5, 0.6)
``seed``                 seed of devices, data partition, model and sampling (0)
``clients``              number of clients; 0 = the scenario's (0)
``heterogeneity``        fastest / slowest compute; 0 = the scenario's (0)
``shares``               ``match`` (radar match ratio + rebalancing) | ``uniform`` (``match``)
``slice-budget``         virtual seconds per train message; < 0 = the scenario's (-1)
=======================  =====================================================================

The number of SuperNodes of the federation (``options.num-supernodes``) must equal the
scenario's client count; a mismatch is an error before the first round.

Each virtual client finds its device from its partition id, the scenario and the seed
(:func:`devices_for`), and gets it as the ClientApp's ``timer_fn`` (virtual durations) and
``probe_fn`` (its answer to the resource benchmark). The server runs the chosen strategy on a
:class:`~strategies.clock.VirtualClock`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from logging import INFO
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from flower_edge import wire
from flower_edge.errors import ConfigError, InputError
from simulations.devices import VirtualDevice, make_population
from simulations.report import HistoryPoint, RunResult, TimelineSpan
from simulations.scenarios import (
    STRATEGIES,
    Scenario,
    StrategyName,
    resolve_scenario,
    resolve_strategies,
)

if TYPE_CHECKING:
    from flwr.app import ArrayRecord, Context, Message, MetricRecord
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy

    from clients.task import Task
    from simulations.recorder import WorkLedger
    from strategies.edge import Aggregate

__all__ = [
    "RUN_CONFIG_DEFAULTS",
    "SHARE_MODES",
    "ShareMode",
    "SimSettings",
    "client_app",
    "devices_for",
    "make_client_app",
    "make_server_app",
    "run_server",
    "server_app",
]

ShareMode = Literal["match", "uniform"]
SHARE_MODES: tuple[str, ...] = get_args(ShareMode)

# ---------------------------------------------------------------- run-config keys
SCENARIO: Final = "scenario"
STRATEGY: Final = "strategy"
NUM_SERVER_ROUNDS: Final = "num-server-rounds"
THRESHOLD: Final = "threshold"
DECAY: Final = "decay"
DECAY_A: Final = "decay-a"
ALPHA: Final = "alpha"
THETA: Final = "theta"
SEED: Final = "seed"
CLIENTS: Final = "clients"
HETEROGENEITY: Final = "heterogeneity"
SHARES: Final = "shares"
SLICE_BUDGET: Final = "slice-budget"

#: every key and its default (0 / -1 = the scenario's value)
RUN_CONFIG_DEFAULTS: Final[dict[str, str | int | float]] = {
    SCENARIO: "digits-20",
    STRATEGY: "edge",
    NUM_SERVER_ROUNDS: 0,
    THRESHOLD: 0,
    DECAY: "polynomial",
    DECAY_A: 0.5,
    ALPHA: 0.5,
    THETA: 0.6,
    SEED: 0,
    CLIENTS: 0,
    HETEROGENEITY: 0.0,
    SHARES: "match",
    SLICE_BUDGET: -1.0,
}
#: real seconds after which an unanswered message is forgotten
MESSAGE_TIMEOUT: Final = 600.0
#: cap on a node's sample share, as a multiple of the mean share. Data stays on the devices:
#: a share beyond the local data means more local epochs, and a fast node given many times
#: its data both overfits its own labels (non-IID) and dominates the share-weighted average.
MAX_SHARE_OVER_MEAN: Final = 3.0


@dataclass(frozen=True)
class SimSettings:
    """Everything one simulation run needs, validated.

    Parameters
    ----------
    scenario : Scenario
        The resolved scenario (client count, heterogeneity and K applied).
    strategy : {"edge", "fedavg", "fedbuff", "fedasync"}
        Strategy to run.
    seed : int
        Seed of devices, partition, initial model and local sampling (>= 0).
    rounds : int
        Aggregations (>= 1).
    decay : str (default: "polynomial")
        Staleness decay of the edge strategy.
    decay_a : float (default: 0.5)
        Parameter of the decay (> 0).
    alpha : float (default: 0.5)
        Weight of resources in the abandon score, in [0, 1].
    theta : float (default: 0.6)
        Abandon threshold (>= 0; ``math.inf`` never abandons).
    shares : {"match", "uniform"} (default: "match")
        Sample shares from the radar match ratio (with rebalancing) or equal shares.
    aggregate : {"models", "deltas"}, optional
        What the edge strategy averages (default: the scenario's ``edge_aggregate``).
    server_lr : float, optional
        The edge strategy's server learning rate (default: the scenario's ``edge_server_lr``).
    """

    scenario: Scenario
    strategy: StrategyName
    seed: int
    rounds: int
    decay: str = "polynomial"
    decay_a: float = 0.5
    alpha: float = 0.5
    theta: float = 0.6
    shares: ShareMode = "match"
    aggregate: Aggregate | None = None
    server_lr: float | None = None

    def __post_init__(self) -> None:
        resolve_strategies(self.strategy)
        if self.strategy not in STRATEGIES:
            raise InputError(f"strategy must be one of {', '.join(STRATEGIES)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"seed must be an integer >= 0, got {self.seed!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, int) or self.rounds < 1:
            raise InputError(f"rounds must be an integer >= 1, got {self.rounds!r}")
        from flower_edge.staleness import DECAYS, make_decay

        if self.decay not in DECAYS:
            raise InputError(f"decay must be one of {', '.join(DECAYS)}, got {self.decay!r}")
        if not (math.isfinite(self.decay_a) and self.decay_a > 0):
            raise InputError(f"decay-a must be > 0, got {self.decay_a!r}")
        make_decay(self.decay, a=self.decay_a)  # the decay's own range checks
        if not 0.0 <= self.alpha <= 1.0:
            raise InputError(f"alpha must be in [0, 1], got {self.alpha!r}")
        if not self.theta >= 0.0:
            raise InputError(f"theta must be >= 0 (inf = never abandon), got {self.theta!r}")
        if self.shares not in SHARE_MODES:
            raise InputError(f"shares must be one of {', '.join(SHARE_MODES)}, got {self.shares!r}")
        from strategies.edge import AGGREGATES

        if self.aggregate is not None and self.aggregate not in AGGREGATES:
            raise InputError(
                f"aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}"
            )
        if self.server_lr is not None and not (
            math.isfinite(self.server_lr) and self.server_lr > 0
        ):
            raise InputError(f"server-lr must be > 0, got {self.server_lr!r}")

    @classmethod
    def create(
        cls,
        scenario: str = "digits-20",
        strategy: str = "edge",
        *,
        seed: int = 0,
        rounds: int | None = None,
        clients: int | None = None,
        heterogeneity: float | None = None,
        threshold: int | None = None,
        slice_budget: float | None = None,
        **options: Any,
    ) -> SimSettings:
        """Resolve a scenario by name with overrides and build validated settings.

        ``rounds=None`` takes the scenario's update budget for the strategy.
        """
        (name,) = resolve_strategies(strategy)
        sc = resolve_scenario(
            scenario, clients=clients, heterogeneity=heterogeneity, threshold=threshold
        )
        if slice_budget is not None:
            if not (math.isfinite(slice_budget) and slice_budget >= 0):
                raise InputError(f"slice-budget must be >= 0, got {slice_budget!r}")
            sc = replace(sc, slice_budget=slice_budget)
        n = sc.rounds_for(name) if rounds is None else rounds
        return cls(scenario=sc, strategy=name, seed=seed, rounds=n, **options)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, object]) -> SimSettings:
        """Read and validate a Flower run config (see the module docstring).

        Raises
        ------
        ConfigError
            A key of the wrong type or out of range; the message names the key.
        """
        cfg = {**RUN_CONFIG_DEFAULTS, **dict(run_config)}

        def text(key: str) -> str:
            value = cfg[key]
            if not isinstance(value, str):
                raise ConfigError(f"run config {key!r} must be a string, got {value!r}")
            return value

        def integer(key: str) -> int:
            value = cfg[key]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"run config {key!r} must be an integer >= 0, got {value!r}")
            return value

        def real(key: str) -> float:
            value = cfg[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"run config {key!r} must be a number, got {value!r}")
            if math.isnan(value):
                raise ConfigError(f"run config {key!r} must be a number, got nan")
            return float(value)

        rounds, threshold, clients = (
            integer(NUM_SERVER_ROUNDS),
            integer(THRESHOLD),
            integer(CLIENTS),
        )
        hetero, budget = real(HETEROGENEITY), real(SLICE_BUDGET)
        try:
            return cls.create(
                text(SCENARIO),
                text(STRATEGY),
                seed=integer(SEED),
                rounds=rounds or None,
                clients=clients or None,
                heterogeneity=hetero if hetero > 0 else None,
                threshold=threshold or None,
                slice_budget=budget if budget >= 0 else None,
                decay=text(DECAY),
                decay_a=real(DECAY_A),
                alpha=real(ALPHA),
                theta=real(THETA),
                shares=text(SHARES),
            )
        except ConfigError:
            raise
        except InputError as exc:
            raise ConfigError(f"run config: {exc}") from None

    def client_run_config(self) -> dict[str, int | float | str]:
        """Return the run config a client of this run reads (``clients.settings`` keys)."""
        from clients import settings as cs

        sc = self.scenario
        return {
            cs.LEARNING_RATE: sc.learning_rate,
            cs.BATCH_SIZE: sc.batch_size,
            cs.LOCAL_EPOCHS: sc.local_epochs,
            cs.ALPHA: self.alpha,
            cs.THETA: self.theta,
            cs.SEED: self.seed,
        }


# ---------------------------------------------------------------- devices and the task


@lru_cache(maxsize=8)
def devices_for(scenario: Scenario, seed: int) -> tuple[VirtualDevice, ...]:
    """Return the virtual devices of ``scenario`` under ``seed``, one per partition id."""
    from clients.data import dataset_info
    from simulations.costs import model_cost

    features, _, _ = dataset_info(scenario.dataset)
    cost = model_cost(scenario.model, (scenario.batch_size, features)).cost
    specs = make_population(scenario.population(seed))
    return tuple(VirtualDevice(spec, cost, seed=seed) for spec in specs)


@lru_cache(maxsize=8)
def samples_per_round(scenario: Scenario, seed: int) -> int:
    """Return the edge strategy's samples per round: local epochs x all local training samples.

    Without it the strategy's default (the local training samples of all nodes, one epoch)
    would give the edge strategy's jobs half the work of the baselines' ``local_epochs``
    epochs at the scenario's 2 epochs, and the update budgets would not compare equal work.
    """
    from clients.data import load_partition

    local = sum(
        len(
            load_partition(
                scenario.dataset,
                pid,
                scenario.num_clients,
                partitioning=scenario.partition,
                alpha=scenario.dirichlet_alpha,
                seed=seed,
            )[0]
        )
        for pid in range(scenario.num_clients)
    )
    return scenario.local_epochs * local


def compute_share(scenario: Scenario) -> float:
    """Return ``p_c`` of the scenario's model (count-based operator share)."""
    from clients.data import dataset_info
    from simulations.costs import model_cost

    features, _, _ = dataset_info(scenario.dataset)
    return model_cost(scenario.model, (scenario.batch_size, features)).compute_share


def _partition_id(ctx: Context, scenario: Scenario) -> int:
    pid = ctx.node_config.get(wire.PARTITION_ID)
    num = ctx.node_config.get(wire.NUM_PARTITIONS)
    if not isinstance(pid, int) or not isinstance(num, int):
        raise ConfigError(
            f"node config needs integer {wire.PARTITION_ID!r} and {wire.NUM_PARTITIONS!r} "
            f"(the simulation engine sets them), got {pid!r}, {num!r}"
        )
    if num != scenario.num_clients or not 0 <= pid < num:
        raise ConfigError(
            f"scenario {scenario.name!r} has {scenario.num_clients} clients but the federation "
            f"has {num} SuperNodes (partition {pid}); set options.num-supernodes = "
            f"{scenario.num_clients} or the run config key {CLIENTS!r} = {num}"
        )
    return pid


def build_task(settings: SimSettings) -> Task:
    """Return the client task of the run: the scenario's model and data partition."""
    from clients.data import dataset_info, load_partition
    from clients.task import Task
    from flower_edge.models import build_model

    sc = settings.scenario
    features, classes, _ = dataset_info(sc.dataset)
    kwargs = {"in_features": features, "num_classes": classes} if sc.model != "cnn" else {}

    def model_fn() -> Any:
        return build_model(sc.model, **kwargs)

    def load_data(ctx: Context) -> Any:
        pid = _partition_id(ctx, sc)
        return load_partition(
            sc.dataset,
            pid,
            sc.num_clients,
            partitioning=sc.partition,
            alpha=sc.dirichlet_alpha,
            seed=settings.seed,
        )

    return Task(
        model_fn=model_fn,
        load_data=load_data,
        learning_rate=sc.learning_rate,
        batch_size=sc.batch_size,
        local_epochs=sc.local_epochs,
    )


# ---------------------------------------------------------------- the ClientApp


def make_client_app(settings: SimSettings | None = None) -> ClientApp:
    """Build the simulation ClientApp.

    Parameters
    ----------
    settings : SimSettings, optional
        The run's settings (the runner passes them). ``None``: read them from each message's
        ``context.run_config`` (``flwr run .``).

    Every reply to a train message also carries the node's partition id under
    :data:`flower_edge.wire.PARTITION_ID` in its metrics, so that the server's timeline can
    name clients by partition.
    """
    from flwr.clientapp import ClientApp

    from simulations.recorder import PARTITION_ACTION

    def forward(msg: Message, ctx: Context) -> Message:
        return _dispatch(settings, msg, ctx)

    outer = ClientApp()
    outer.train()(forward)
    outer.evaluate()(forward)
    outer.query(wire.PROFILE_ACTION)(forward)
    outer.query(PARTITION_ACTION)(forward)
    return outer


#: per-process cache of the inner ClientApp of each run (the engine ships the outer app to
#: its workers with every message; a module-level cache survives that)
_INNER_APPS: dict[SimSettings, tuple[ClientApp, dict[str, Any]]] = {}


def _inner_app(s: SimSettings) -> tuple[ClientApp, dict[str, Any]]:
    from clients.app import build_client_app
    from simulations.probe import VirtualProbe

    if s not in _INNER_APPS:

        def timer_fn(ctx: Context) -> VirtualDevice:
            return devices_for(s.scenario, s.seed)[_partition_id(ctx, s.scenario)]

        def probe_fn(ctx: Context) -> VirtualProbe:
            return VirtualProbe(timer_fn(ctx))

        app = build_client_app(build_task(s), timer_fn=timer_fn, probe_fn=probe_fn)
        if len(_INNER_APPS) >= 8:
            _INNER_APPS.clear()
        _INNER_APPS[s] = (app, s.client_run_config())
    return _INNER_APPS[s]


def _dispatch(settings: SimSettings | None, msg: Message, ctx: Context) -> Message:
    from flwr.app import Context, Message, MetricRecord, RecordDict

    from simulations.recorder import PARTITION_MESSAGE_TYPE

    s = settings if settings is not None else _settings_from_context(ctx)
    app, defaults = _inner_app(s)
    pid = _partition_id(ctx, s.scenario)
    if msg.metadata.message_type == PARTITION_MESSAGE_TYPE:
        content = RecordDict({wire.METRICS: MetricRecord({wire.PARTITION_ID: pid})})
        return Message(content, reply_to=msg)
    # The engine forbids changing ctx.run_config: hand the app a view with the run's client
    # keys, sharing the node's state (which the app updates in place). The view's node id is
    # the stable id ``partition id + 1`` that the server sees (``RecordingGrid``), not the
    # engine's random node id, so that what the client seeds from its node id (sample order)
    # and the values it looks up by id are the same in every run of a seed.
    config = {**defaults, **ctx.run_config} if settings is None else dict(defaults)
    view = Context(
        run_id=ctx.run_id,
        node_id=pid + 1,
        node_config=ctx.node_config,
        state=ctx.state,
        run_config=config,
    )
    reply = app(msg, view)
    if msg.metadata.message_type.startswith("train") and not reply.has_error():
        metrics = reply.content.metric_records.get(wire.METRICS)
        if metrics is not None:
            metrics[wire.PARTITION_ID] = pid
    return reply


@lru_cache(maxsize=4)
def _settings_from_items(items: tuple[tuple[str, Any], ...]) -> SimSettings:
    return SimSettings.from_run_config(dict(items))


def _settings_from_context(ctx: Context) -> SimSettings:
    keys = set(RUN_CONFIG_DEFAULTS)
    items = tuple(sorted((k, v) for k, v in ctx.run_config.items() if k in keys))
    return _settings_from_items(items)


# ---------------------------------------------------------------- the server


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
        self.points.setdefault(server_round, (self.clock_now(), res.accuracy))
        if self.progress is not None:
            self.progress(server_round, self.rounds, res.accuracy, self.clock_now())
        return MetricRecord({"accuracy": res.accuracy, "loss": res.loss})


ProgressFn = Callable[[int, int, float, float], None]


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
    from strategies.config import LoopConfig, ShareConfig

    loop = LoopConfig(slice_budget=sc.slice_budget, min_nodes=sc.num_clients, poll_interval=0.01)
    uniform = settings.shares == "uniform"
    shares = ShareConfig(
        profile=not uniform,
        rebalance="off" if uniform else "seed",
        compute_share=compute_share(sc),
        total_samples=None if uniform else samples_per_round(sc, settings.seed),
        max_share_fraction=min(1.0, MAX_SHARE_OVER_MEAN / sc.num_clients),
    )
    if settings.strategy == "edge":
        return strategies.EdgeStrategy(
            threshold=sc.threshold,
            decay=settings.decay,
            decay_a=settings.decay_a,
            aggregate=sc.edge_aggregate if settings.aggregate is None else settings.aggregate,
            server_lr=sc.edge_server_lr if settings.server_lr is None else settings.server_lr,
            loop=loop,
            shares=shares,
            clock=clock,
        )
    # the baselines keep their own defaults: equal shares, no values
    if settings.strategy == "fedbuff":
        return strategies.FedBuff(threshold=sc.threshold, loop=loop, clock=clock)
    return strategies.FedAsync(loop=loop, clock=clock)


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
    result = strategy.start(
        grid=recorder,
        initial_arrays=initial,
        num_rounds=settings.rounds,
        timeout=MESSAGE_TIMEOUT,
        evaluate_fn=evaluator,
    )
    wall = time.perf_counter() - t0
    history = _history(strategy, evaluator, result)
    spans = _timeline(recorder.ledger, settings)
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
        wasted_compute_fraction=recorder.ledger.wasted_fraction(),
        wall_seconds=wall,
        history=tuple(history),
        timeline=tuple(spans),
        extras=_extras(recorder.ledger, history),
    )


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


def _timeline(ledger: WorkLedger, settings: SimSettings) -> list[TimelineSpan]:
    spans: list[TimelineSpan] = []
    partition = ledger.partitions
    end = 0.0
    for i, s in enumerate(ledger.slices):
        node = partition.get(s.node_id, -1)
        kind: Literal["training", "abandoned"] = (
            "abandoned" if i in ledger.abandoned_slices else "training"
        )
        spans.append(TimelineSpan(node, s.start, s.end, kind))
        end = max(end, s.end)
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
        s = settings if settings is not None else SimSettings.from_run_config(context.run_config)
        result = run_server(grid, s, progress)
        if sink is not None:
            sink(result)
        else:
            log(INFO, "result: %s", results_to_json([result], as_list=False))

    return app


#: the components named in ``[tool.flwr.app.components]``
server_app = make_server_app()
client_app = make_client_app()
