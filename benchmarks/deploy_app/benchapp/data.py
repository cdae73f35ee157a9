"""The benchmark's data split, read from the run config by the ServerApp and the ClientApp."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast, get_args

from clients.data import Partitioning
from flower_edge import validate


def partitioning(run_config: Mapping[str, object]) -> tuple[Partitioning, float]:
    """Return ``(partitioning, dirichlet-alpha)`` of the run config (``"iid"``, 0.5 if absent).

    Raises ``flower_edge.errors.ConfigError`` naming the key when a value is not one the data
    loader accepts.
    """
    kind = validate.choice(
        "run config 'partitioning'", run_config.get("partitioning", "iid"), get_args(Partitioning)
    )
    alpha = validate.number(
        "run config 'dirichlet-alpha'",
        run_config.get("dirichlet-alpha", 0.5),
        low=0.0,
        low_inclusive=False,
    )
    return cast(Partitioning, kind), alpha
