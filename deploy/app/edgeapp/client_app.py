"""ClientApp of the deployment app: flower-edge's client around the digits MLP.

Each SuperNode reads its data partition from ``--node-config "partition-id=I num-partitions=N"``.
"""

from __future__ import annotations

from clients.examples import mlp_app

app = mlp_app
