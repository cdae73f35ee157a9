"""Ready-made ClientApps on the bundled data: an MLP and a CNN on digits, a 1-D CNN on MNIST-1D.

Point ``flwr run`` (``[tool.flwr.app.components] clientapp``) at one of them, e.g.
``clients.examples:client_app``. Each node reads ``partition-id`` and ``num-partitions`` from
its node config (Flower's simulation engine sets both; give them to a SuperNode with
``--node-config "partition-id=0 num-partitions=2"``).

They also show how to wrap your own model and data: a :class:`~clients.task.Task` with a model
factory and a loader ``Context -> (train, test)``, passed to
:func:`~clients.app.build_client_app`.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context
from flwr.clientapp import ClientApp
from torch.utils.data import TensorDataset

from clients.app import build_client_app
from clients.data import Partitioning, dataset_info, load_partition
from clients.task import Task
from flower_edge import validate, wire
from flower_edge.errors import ConfigError
from flower_edge.models import CNN, CNN1D, MLP

__all__ = [
    "bundled_loader",
    "client_app",
    "cnn_app",
    "digits_cnn_task",
    "digits_mlp_task",
    "mlp_app",
    "mnist1d_app",
    "mnist1d_task",
]


def _node_int(context: Context, key: str) -> int:
    try:
        return validate.integer(f"node config {key!r}", context.node_config.get(key))
    except ConfigError as exc:
        hint = "set by the simulation engine, or with flower-supernode --node-config"
        raise ConfigError(f"{exc} ({hint})") from None


def bundled_loader(
    name: str,
    *,
    partitioning: Partitioning = "iid",
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> Callable[[Context], tuple[TensorDataset, TensorDataset]]:
    """Return a ``load_data`` for :class:`~clients.task.Task` that reads the node's partition.

    The node's partition is ``partition-id`` of ``num-partitions`` from its node config (see
    :data:`flower_edge.wire.PARTITION_ID`); the rest is passed to
    :func:`clients.data.load_partition`.
    """
    dataset_info(name)  # validates the name early

    def load(context: Context) -> tuple[TensorDataset, TensorDataset]:
        return load_partition(
            name,
            _node_int(context, wire.PARTITION_ID),
            _node_int(context, wire.NUM_PARTITIONS),
            partitioning=partitioning,
            alpha=alpha,
            seed=seed,
            test_fraction=test_fraction,
        )

    return load


def digits_mlp_task() -> Task:
    """Return the MLP on scikit-learn's digits (64 features, 10 classes), IID partitions."""
    return Task(model_fn=lambda: MLP(in_features=64), load_data=bundled_loader("digits"))


def digits_cnn_task() -> Task:
    """Return a CNN on the 8x8 digit images (flat inputs are reshaped by the model)."""
    return Task(
        model_fn=lambda: CNN(in_channels=1, image_size=8),
        load_data=bundled_loader("digits"),
        learning_rate=0.05,
    )


def mnist1d_task() -> Task:
    """Return the 1-D CNN on MNIST-1D (generated offline), Dirichlet(0.5) partitions."""
    return Task(
        model_fn=lambda: CNN1D(in_features=40),
        load_data=bundled_loader("mnist1d", partitioning="dirichlet", alpha=0.5),
        learning_rate=0.05,
    )


#: MLP on digits
mlp_app: ClientApp = build_client_app(digits_mlp_task())
#: CNN on digits
cnn_app: ClientApp = build_client_app(digits_cnn_task())
#: 1-D CNN on MNIST-1D
mnist1d_app: ClientApp = build_client_app(mnist1d_task())
#: the default example
client_app: ClientApp = mlp_app
