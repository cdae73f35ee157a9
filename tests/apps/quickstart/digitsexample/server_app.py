"""digitsexample: the ServerApp of a Flower / PyTorch app."""

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from strategies import EdgeStrategy

from digitsexample.task import Net, load_centralized_dataset, test

# Create ServerApp
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run the strategy for ``num-server-rounds`` rounds and report the final accuracy."""
    # Read run config
    fraction_evaluate: float = context.run_config["fraction-evaluate"]
    num_rounds: int = context.run_config["num-server-rounds"]
    lr: float = context.run_config["learning-rate"]

    # Load global model
    global_model = Net()
    arrays = ArrayRecord(global_model.state_dict())

    # Initialize the strategy
    strategy = EdgeStrategy(threshold=2, fraction_evaluate=fraction_evaluate)

    # Start strategy, run it for `num_rounds`
    result = strategy.start(
        grid=grid,
        initial_arrays=arrays,
        train_config=ConfigRecord({"lr": lr}),
        num_rounds=num_rounds,
        evaluate_fn=global_evaluate,
    )

    # Report the final model's accuracy (the model is not written to the current folder)
    global_model.load_state_dict(result.arrays.to_torch_state_dict())
    _, accuracy = test(global_model, load_centralized_dataset(), torch.device("cpu"))
    print(f"final accuracy {accuracy:.4f}")


def global_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """Evaluate the global model on the server's test set."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    test_loss, test_acc = test(model, load_centralized_dataset(), torch.device("cpu"))
    return MetricRecord({"accuracy": test_acc, "loss": test_loss})
