"""ClientApp of the benchmark: flower-edge's client around the bundled digits MLP."""

from __future__ import annotations

from clients.examples import mlp_app

app = mlp_app
