"""The simulation ClientApp: one outer app that hands each message to the run's inner app.

The inner app is :func:`clients.build_client_app` around the scenario's task, with the node's
virtual device as its ``timer_fn`` (virtual durations) and ``probe_fn`` (its answer to the
resource benchmark).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from flower_edge import wire
from simulations.devices import VirtualDevice
from simulations.nodes import build_task, devices_for, partition_id
from simulations.settings import RUN_CONFIG_DEFAULTS, SimSettings

if TYPE_CHECKING:
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

    from simulations.probe import VirtualProbe

__all__ = ["make_client_app"]


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
            return devices_for(s.scenario, s.seed)[partition_id(ctx, s.scenario)]

        def probe_fn(ctx: Context) -> VirtualProbe:
            return VirtualProbe(timer_fn(ctx))

        app = build_client_app(build_task(s), timer_fn=timer_fn, probe_fn=probe_fn)
        if len(_INNER_APPS) >= 8:
            _INNER_APPS.clear()
        _INNER_APPS[s] = (app, s.client_run_config())
    return _INNER_APPS[s]


def _single_threaded() -> None:
    """Train on one torch thread, whatever CPUs the engine gives the worker.

    Float results depend on the thread count, and a seed's history must not depend on the
    engine's client resources: ``flower-edge simulate`` gives each worker one CPU, ``flwr run``
    takes them from the connection's ``client-resources`` (docs/simulations.md).
    """
    import torch

    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _dispatch(settings: SimSettings | None, msg: Message, ctx: Context) -> Message:
    from flwr.app import Context, Message, MetricRecord, RecordDict

    from simulations.recorder import PARTITION_MESSAGE_TYPE

    s = settings if settings is not None else _settings_from_context(ctx)
    _single_threaded()
    app, defaults = _inner_app(s)
    pid = partition_id(ctx, s.scenario)
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
def _settings_from_items(items: tuple[tuple[str, Any], ...], nodes: object) -> SimSettings:
    from simulations.federation import client_settings

    return client_settings(dict(items), {wire.NUM_PARTITIONS: nodes})


def _settings_from_context(ctx: Context) -> SimSettings:
    keys = set(RUN_CONFIG_DEFAULTS)
    items = tuple(sorted((k, v) for k, v in ctx.run_config.items() if k in keys))
    return _settings_from_items(items, ctx.node_config.get(wire.NUM_PARTITIONS))
