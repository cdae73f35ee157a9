"""ClientApp of the benchmark: flower-edge's client around the bundled digits MLP.

The node's partition is ``partition-id`` of ``num-partitions`` (node config), split as the
run config's ``partitioning`` and ``dirichlet-alpha`` say (the server reads the same keys).
"""

from __future__ import annotations

from flwr.app import Context
from torch.utils.data import TensorDataset

from benchapp.data import partitioning
from clients.app import build_client_app
from clients.examples import bundled_loader
from clients.task import Task
from flower_edge.models import MLP


def load(context: Context) -> tuple[TensorDataset, TensorDataset]:
    """Return the node's (train, test) partition of digits under the run's partitioning."""
    kind, alpha = partitioning(context.run_config)
    return bundled_loader("digits", partitioning=kind, alpha=alpha)(context)


app = build_client_app(Task(model_fn=lambda: MLP(in_features=64), load_data=load))
