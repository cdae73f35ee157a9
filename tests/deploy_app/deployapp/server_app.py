"""ServerApp of the tiny deployment test app: FedAvg over a 3-element vector."""

from __future__ import annotations

from logging import INFO

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    rounds = int(context.run_config["num-server-rounds"])
    strategy = FedAvg(fraction_evaluate=0.0, min_available_nodes=4)
    result = strategy.start(
        grid=grid, initial_arrays=ArrayRecord([np.zeros(3)]), num_rounds=rounds, timeout=60
    )
    final = result.arrays.to_numpy_ndarrays()[0]
    log(INFO, "DEPLOYAPP-FINAL %s", ",".join(f"{v:.4f}" for v in final))
