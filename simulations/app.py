"""The Flower App of the simulations: ``server_app`` and ``client_app`` for ``flwr run .``.

``pyproject.toml`` points ``[tool.flwr.app.components]`` at :data:`server_app` and
:data:`client_app`. Both read their settings from the run config (``[tool.flwr.app.config]``,
or ``flwr run . --run-config "key=value ..."``), validated by
:meth:`SimSettings.from_run_config` before any message is sent; the keys are listed in
:mod:`simulations.settings`.

The run's client count follows the federation (``options.num-supernodes``) unless the run
config sets ``clients``; a set count that differs, or a federation too small for the
scenario, is an error before the first message (:mod:`simulations.federation`).

Each virtual client finds its device from its partition id, the scenario and the seed
(:func:`devices_for`), and gets it as the ClientApp's ``timer_fn`` (virtual durations) and
``probe_fn`` (its answer to the resource benchmark). The server runs the chosen strategy on a
:class:`~strategies.clock.VirtualClock`.

The parts live in their own modules, re-exported here:

- :mod:`simulations.settings`: :class:`SimSettings` and the run-config keys;
- :mod:`simulations.nodes`: each node's device, data partition and task;
- :mod:`simulations.client`: :func:`make_client_app`;
- :mod:`simulations.server`: :func:`run_server`, :func:`build_strategy`,
  :func:`make_server_app`.
"""

from __future__ import annotations

from simulations.client import make_client_app
from simulations.nodes import build_task, compute_share, devices_for, samples_per_round
from simulations.server import ProgressFn, build_strategy, make_server_app, run_server
from simulations.settings import (
    MAX_SHARE_OVER_MEAN,
    MESSAGE_TIMEOUT,
    RUN_CONFIG_DEFAULTS,
    SHARE_MODES,
    ShareMode,
    SimSettings,
)

__all__ = [
    "MAX_SHARE_OVER_MEAN",
    "MESSAGE_TIMEOUT",
    "RUN_CONFIG_DEFAULTS",
    "SHARE_MODES",
    "ProgressFn",
    "ShareMode",
    "SimSettings",
    "build_strategy",
    "build_task",
    "client_app",
    "compute_share",
    "devices_for",
    "make_client_app",
    "make_server_app",
    "run_server",
    "samples_per_round",
    "server_app",
]

#: the components named in ``[tool.flwr.app.components]``
server_app = make_server_app()
client_app = make_client_app()
