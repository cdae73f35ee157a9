"""What each virtual node is: its device, its data partition and the run's client task.

Each virtual client finds its device from its partition id, the scenario and the seed
(:func:`devices_for`); :func:`build_task` gives the model and the node's data partition.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from flower_edge import wire
from flower_edge.errors import ConfigError
from simulations.devices import VirtualDevice, make_population
from simulations.settings import CLIENTS

if TYPE_CHECKING:
    from flwr.app import Context

    from clients.task import Task
    from simulations.scenarios import Scenario
    from simulations.settings import SimSettings

__all__ = [
    "build_task",
    "compute_share",
    "devices_for",
    "partition_id",
    "samples_per_round",
]


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


def partition_id(ctx: Context, scenario: Scenario) -> int:
    """Return the node's partition id, checked against the scenario's client count."""
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
        pid = partition_id(ctx, sc)
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
