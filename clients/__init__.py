"""Client side on Flower.

The ClientApp builder around a user's task, the abandon decision at preemption points,
resumable local training on the assigned sample share, bundled data. See ``docs/client.md``.
"""

from clients.app import build_client_app, host_availability
from clients.data import (
    DATASETS,
    dataset_info,
    load_centralized_test,
    load_flwr_dataset,
    load_partition,
)
from clients.settings import RUN_CONFIG_KEYS, ClientSettings
from clients.task import Task

__all__ = [
    "DATASETS",
    "RUN_CONFIG_KEYS",
    "ClientSettings",
    "Task",
    "build_client_app",
    "dataset_info",
    "host_availability",
    "load_centralized_test",
    "load_flwr_dataset",
    "load_partition",
]
