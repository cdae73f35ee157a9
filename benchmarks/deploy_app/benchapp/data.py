"""The benchmark's data split, read from the run config by the ServerApp and the ClientApp."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast, get_args

from clients.data import Partitioning
from flower_edge import validate
from flower_edge.errors import ConfigError


def partitioning(run_config: Mapping[str, object]) -> tuple[Partitioning, float]:
    """Return ``(partitioning, dirichlet-alpha)`` of the run config (``"iid"``, 0.5 if absent).

    Raises ConfigError naming the key when a value is not one the data loader accepts.
    """
    kind = run_config.get("partitioning", "iid")
    choices: tuple[Partitioning, ...] = get_args(Partitioning)
    if kind not in choices:
        raise ConfigError(
            f"run config 'partitioning' must be one of {', '.join(choices)}, got {kind!r}"
        )
    alpha = validate.number(
        "run config 'dirichlet-alpha'",
        run_config.get("dirichlet-alpha", 0.5),
        low=0.0,
        low_inclusive=False,
    )
    return cast(Partitioning, kind), alpha
