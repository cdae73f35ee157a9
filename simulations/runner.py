"""The experiment runner: one run per (strategy, seed) through Flower's simulation engine.

:func:`run_experiment` builds the simulation's ServerApp and ClientApp for a
:class:`~simulations.app.SimSettings` and runs them with :func:`flwr.simulation.run_simulation`
(the Ray backend: one SuperNode per client, ``client_num_cpus`` CPUs per ClientApp, so
``floor(cpus / client_num_cpus)`` clients train at once). The server side records the run and
hands its :class:`~simulations.report.RunResult` back through a sink; ``wall_seconds`` includes
the engine's start-up.

``engine="inprocess"`` runs the same apps on :class:`strategies.inprocess.InProcessGrid`
instead (no Ray, no SuperLink; one process): a run has the same history either way, because
the server orders events by virtual time.

Beyond one machine: ``ray_init_args={"address": "auto"}`` (or ``"ray://head:10001"``) attaches
the engine to a running Ray cluster instead of starting a local one; see ``docs/simulations.md``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from flower_edge import validate
from flower_edge.errors import FlowerEdgeError
from simulations.app import ProgressFn, SimSettings
from simulations.report import RunResult
from simulations.scenarios import ENGINES, Engine

__all__ = [
    "ENGINES",
    "ENGINE_POLL_SECONDS",
    "Engine",
    "quick_engine_poll",
    "run_experiment",
    "run_many",
    "shared_ray_session",
]

#: how often Flower's simulation engine looks for pushed messages while a run of
#: ``flower-edge simulate`` is on (Flower's own loop waits 0.1 s between looks)
ENGINE_POLL_SECONDS = 0.01


@contextmanager
def _quiet_flower(verbose: bool) -> Iterator[None]:
    """Set Flower's logger to INFO (``verbose``) or WARNING for a run; restore it after.

    Found by a new-user probe: the level stayed at WARNING after :func:`run_experiment`, so
    an app that called it lost Flower's INFO logs for good.
    """
    flwr_logger = logging.getLogger("flwr")
    before = flwr_logger.level
    flwr_logger.setLevel(logging.INFO if verbose else logging.WARNING)
    try:
        yield
    finally:
        flwr_logger.setLevel(before)


def _backend_config(
    cpus: int | None, client_num_cpus: float, ray_init_args: Mapping[str, Any] | None
) -> dict[str, Any]:
    init_args: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
    if ray_init_args:
        init_args.update(ray_init_args)
    if "address" not in init_args and not os.environ.get("RAY_ADDRESS", "").strip():
        # with RAY_ADDRESS set ray.init attaches to that cluster, which refuses num_cpus
        init_args.setdefault("num_cpus", cpus if cpus is not None else (os.cpu_count() or 1))
    return {
        "client_resources": {"num_cpus": client_num_cpus, "num_gpus": 0.0},
        "init_args": init_args,
    }


def run_experiment(
    settings: SimSettings,
    *,
    engine: Engine = "ray",
    cpus: int | None = None,
    client_num_cpus: float = 1.0,
    ray_init_args: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    verbose: bool = False,
) -> RunResult:
    """Run one simulation and return its result.

    Parameters
    ----------
    settings : SimSettings
        Scenario, strategy, seed, rounds, strategy options.
    engine : {"ray", "inprocess"} (default: "ray")
        Flower's simulation engine (Ray backend), or the in-process grid.
    cpus : int, optional
        CPUs Ray may use (default: all of this machine's). Ignored when attaching to a
        cluster (``ray_init_args["address"]``).
    client_num_cpus : float (default: 1.0)
        CPUs reserved per ClientApp (> 0).
    ray_init_args : mapping, optional
        Extra ``ray.init`` arguments of the Ray backend (``address``, ``runtime_env``, ...).
    progress : callable, optional
        ``progress(round, rounds, accuracy, virtual_time)`` after each evaluation.
    verbose : bool (default: False)
        Keep Flower's INFO logs.

    Raises
    ------
    ConfigError
        A bad engine or resource setting (before anything starts).
    FlowerEdgeError
        The run ended without a result.
    """
    validate.choice("engine", engine, ENGINES)
    validate.number("client_num_cpus", client_num_cpus, low=0.0, low_inclusive=False)
    validate.integer("cpus", cpus, low=1, allow_none=True)
    with _quiet_flower(verbose):
        t0 = time.perf_counter()
        # single-threaded torch: simulations.server.run_server and the simulation ClientApp
        if engine == "inprocess":
            result = _run_inprocess(settings, progress)
        else:
            result = _run_ray(settings, cpus, client_num_cpus, ray_init_args, progress)
        wall = time.perf_counter() - t0
    return _with_wall(result, wall, engine)


def _with_wall(result: RunResult, wall: float, engine: Engine) -> RunResult:
    """Return ``result`` with the wall time of the whole run and the engine that ran it."""
    from dataclasses import replace

    extras = dict(result.extras)
    extras["server_wall_seconds"] = result.wall_seconds
    return replace(result, wall_seconds=wall, extras=extras, engine=engine)


def _run_inprocess(settings: SimSettings, progress: ProgressFn | None) -> RunResult:
    from simulations.app import make_client_app, run_server
    from strategies.inprocess import InProcessGrid

    grid = InProcessGrid(make_client_app(settings), settings.scenario.num_clients)
    return run_server(grid, settings, progress)


def _run_ray(
    settings: SimSettings,
    cpus: int | None,
    client_num_cpus: float,
    ray_init_args: Mapping[str, Any] | None,
    progress: ProgressFn | None,
) -> RunResult:
    import warnings

    from flwr.simulation import run_simulation

    from simulations.app import make_client_app, make_server_app

    results: list[RunResult] = []
    server = make_server_app(settings, sink=results.append, progress=progress)
    client = make_client_app(settings)
    config = _backend_config(cpus, client_num_cpus, ray_init_args)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addFilter(_drop_run_simulation_deprecation)
    with warnings.catch_warnings(), quick_engine_poll():
        warnings.simplefilter("ignore", FutureWarning)  # Ray's accelerator notice
        try:
            run_simulation(
                server_app=server,
                client_app=client,
                num_supernodes=settings.scenario.num_clients,
                backend_name="ray",
                backend_config=config,
            )
        finally:
            flwr_logger.removeFilter(_drop_run_simulation_deprecation)
    if not results:
        raise FlowerEdgeError(
            f"simulation {settings.scenario.name}/{settings.strategy} ended without a result "
            "(see the log above)"
        )
    return results[0]


def _drop_run_simulation_deprecation(record: logging.LogRecord) -> bool:
    """Drop Flower's notice that ``run_simulation`` is deprecated (a logging filter).

    Flower 1.42 tells every caller of ``run_simulation`` to "use `flwr run` in the CLI
    instead"; a user of ``flower-edge simulate`` can do nothing about it (found by a new-user
    probe: the coloured multi-line WARNING opened every Ray run). ``flwr run .`` runs the same
    App (docs/simulations.md).
    """
    text = str(record.msg)
    args = record.args if isinstance(record.args, tuple) else ()
    return not (text.startswith("DEPRECATED FEATURE") and "`run_simulation`" in str(args))


def run_many(
    runs: Sequence[SimSettings],
    *,
    engine: Engine = "ray",
    cpus: int | None = None,
    client_num_cpus: float = 1.0,
    ray_init_args: Mapping[str, Any] | None = None,
    progress: ProgressFn | None = None,
    verbose: bool = False,
) -> list[RunResult]:
    """Run several simulations one after the other (see :func:`run_experiment`).

    With the Ray engine the runs share one Ray session: Flower's Ray backend starts Ray when
    none is running and shuts it down at the end of every run, which costs each run a start
    (about 6 s on 2 cores); here the shutdown waits until the last run. Each run still gets
    new actors (Flower terminates its actor pool), so a run's history is the same as alone.
    """
    with shared_ray_session(engine, len(runs)):
        return [
            run_experiment(
                s,
                engine=engine,
                cpus=cpus,
                client_num_cpus=client_num_cpus,
                ray_init_args=ray_init_args,
                progress=progress,
                verbose=verbose,
            )
            for s in runs
        ]


@contextmanager
def shared_ray_session(engine: Engine, runs: int) -> Iterator[None]:
    """Let ``runs`` Ray runs share one Ray session: defer ``ray.shutdown`` to the block's end.

    A no-op for the in-process engine or a single run (see :func:`run_many`).
    """
    if engine != "ray" or runs < 2:
        yield
        return
    import ray

    real = ray.shutdown
    ray.shutdown = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        ray.shutdown = real  # type: ignore[assignment]
        if ray.is_initialized():
            real()


@contextmanager
def quick_engine_poll(seconds: float = ENGINE_POLL_SECONDS) -> Iterator[None]:
    """Let Flower's simulation engine pick up pushed messages every ``seconds``, not 0.1 s.

    The engine's ``vce_api.add_messages_to_queue`` thread looks for messages the ServerApp
    pushed, then waits 0.1 s. A semi-asynchronous strategy pushes a message or two at a
    time, each after the reply it waits for, so that wait is paid on nearly every message
    (about half the wall time of the main job's asynchronous rows). The history of a run
    does not depend on it (events are ordered by virtual time). Flower's function is
    restored at the end of the block; where a Flower version has no such function, nothing
    changes.
    """
    validate.number("seconds", seconds, low=0.0, low_inclusive=False)
    try:
        from flwr.server.superlink.fleet.vce import vce_api
    except ImportError:  # pragma: no cover - another Flower layout
        yield
        return
    original = getattr(vce_api, "add_messages_to_queue", None)
    if original is None:  # pragma: no cover - another Flower layout
        yield
        return

    def add_messages_to_queue(state: Any, queue: Any, nodes_mapping: Any, f_stop: Any) -> None:
        """Flower's loop with a shorter wait: put each node's pushed messages in the queue."""
        while not f_stop.is_set():
            for node_id in nodes_mapping:
                for msg in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(msg)
            f_stop.wait(seconds)

    vce_api.add_messages_to_queue = add_messages_to_queue
    try:
        yield
    finally:
        vce_api.add_messages_to_queue = original
