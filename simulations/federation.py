"""Size a ``flwr run .`` simulation from its federation (the number of SuperNodes).

``flwr run .`` starts as many virtual SuperNodes as the connection's
``options.num-supernodes`` (Flower's default is 2), whatever the scenario says. With the run
config's ``clients = 0`` (the default) the run takes that number as its client count, on both
sides: the ServerApp counts the nodes it sees, each ClientApp reads ``num-partitions`` from its
node config (set by the simulation engine to the same number). With ``clients = N`` set, a
federation of another size is an error before the first message, naming both settings;
nothing waits for nodes that will never come.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from flower_edge import validate, wire
from flower_edge.errors import ConfigError, InputError
from simulations.settings import RUN_CONFIG_DEFAULTS, SimSettings

__all__ = ["FEDERATION_WAIT", "federation_size", "sized_settings"]

#: seconds the ServerApp waits for the simulated SuperNodes to be listed
FEDERATION_WAIT: Final = 20.0
#: the node count must stay the same this long (seconds) to count as complete
FEDERATION_SETTLE: Final = 1.0
CLIENTS: Final = "clients"


def _fix_hint(nodes: int) -> str:
    return (
        f"set the run config key {CLIENTS!r} = 0 to follow the federation "
        f'(--run-config "{CLIENTS}=0"), or start as many SuperNodes as the run\'s clients '
        f'(--federation-config "num-supernodes=N"); the federation has {nodes}'
    )


def sized_settings(run_config: Mapping[str, object], nodes: int) -> SimSettings:
    """Return the run's settings for a federation of ``nodes`` SuperNodes.

    Parameters
    ----------
    run_config : Mapping[str, object]
        The run config (``[tool.flwr.app.config]`` with ``--run-config`` overrides).
    nodes : int
        SuperNodes in the federation, ``>= 1``.

    Raises
    ------
    ConfigError
        ``clients`` is set and differs from ``nodes``, or the scenario cannot run with
        ``nodes`` clients; the message names ``clients`` and ``num-supernodes``.
    """
    validate.integer("num-supernodes", nodes, low=1)
    config = {**RUN_CONFIG_DEFAULTS, **dict(run_config)}
    base = SimSettings.from_run_config(config)
    if base.scenario.num_clients == nodes:
        return base
    if config.get(CLIENTS, 0) not in (0, None):
        raise ConfigError(
            f"run config {CLIENTS!r} = {config[CLIENTS]!r} but the federation has {nodes} "
            f"SuperNodes: {_fix_hint(nodes)}"
        )
    try:
        return SimSettings.from_run_config({**config, CLIENTS: nodes})
    except InputError as exc:
        raise ConfigError(
            f"scenario {base.scenario.name!r} cannot run on {nodes} SuperNodes ({exc}); "
            f'start more with --federation-config "num-supernodes=N" '
            f"(the scenario's own count is {base.scenario.num_clients})"
        ) from None


def federation_size(
    node_ids: Callable[[], Iterable[int]],
    timeout: float = FEDERATION_WAIT,
    settle: float = FEDERATION_SETTLE,
) -> int:
    """Return the number of nodes once it has stopped changing for ``settle`` seconds.

    Parameters
    ----------
    node_ids : Callable[[], Iterable[int]]
        Returns the node ids connected now (``grid.get_node_ids``).
    timeout : float (default: 20.0)
        Seconds to wait at most; past it the count seen last is returned if it is >= 1.
    settle : float (default: 1.0)
        Seconds the count must stay the same.

    Raises
    ------
    ConfigError
        No node was seen within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    count, since = -1, time.monotonic()
    while True:
        now = time.monotonic()
        seen = len(list(node_ids()))
        if seen != count:
            count, since = seen, now
        elif count >= 1 and now - since >= settle:
            return count
        if now > deadline:
            if count >= 1:
                return count
            raise ConfigError(
                f"no SuperNode connected within {timeout:.0f} s; start the run with "
                f'--federation-config "num-supernodes=N" (N >= 1)'
            )
        time.sleep(0.1)


def client_settings(
    run_config: Mapping[str, object], node_config: Mapping[str, object]
) -> SimSettings:
    """Return a ClientApp's settings: sized by ``num-partitions`` of its node config if set."""
    nodes = node_config.get(wire.NUM_PARTITIONS)
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1:
        return sized_settings(run_config, nodes)
    return SimSettings.from_run_config(run_config)
