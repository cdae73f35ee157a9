"""EdgeStrategy with the real ClientApp in process, and in Flower's simulation engine."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import ToyEdge, accuracy_fn, model
from flwr.app import ArrayRecord, Context, Message, MetricRecord

from clients.data import load_partition
from flower_edge import wire
from flower_edge.models import MLP
from strategies import (
    EdgeStrategy,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ManualClock,
    ShareConfig,
    VirtualClock,
)
from strategies.records import AggregationRecord

torch.set_num_threads(1)


def _digits_evaluate() -> Any:  # noqa: ANN401
    _, test = load_partition("digits", 0, 1, test_fraction=0.3)
    x, y = test.tensors

    def evaluate(_: int, arrays: ArrayRecord) -> MetricRecord:
        net = MLP(in_features=64)
        net.load_state_dict(arrays.to_torch_state_dict())
        with torch.no_grad():
            logits = net(x)
            loss = torch.nn.functional.cross_entropy(logits, y).item()
            acc = (logits.argmax(1) == y).float().mean().item()
        return MetricRecord({"accuracy": acc, "loss": loss})

    return evaluate


def _initial() -> ArrayRecord:
    torch.manual_seed(0)
    return ArrayRecord(MLP(in_features=64).state_dict())


def test_edge_strategy_with_the_real_client_app_in_process() -> None:
    from clients.examples import mlp_app

    clock = ManualClock()
    grid = InProcessGrid(mlp_app, 4, clock=clock)
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=ShareConfig(profile=False, total_samples=800),
        loop=LoopConfig(slice_budget=0.0),
    )
    result = strategy.start(grid, _initial(), num_rounds=4, evaluate_fn=_digits_evaluate())
    assert len(strategy.history) == 4
    assert not [e for e in strategy.events if e.kind == "rejected"]
    accuracy = [result.evaluate_metrics_serverapp[r]["accuracy"] for r in range(5)]
    assert accuracy[-1] > accuracy[0] + 0.2  # it learns
    for record in strategy.history:
        assert sum(record.values) == pytest.approx(1.0)


def _toy_client_app(toy: ToyEdge) -> Any:  # noqa: ANN401
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def handle(msg: Message, ctx: Context) -> Message:
        return toy(msg, ctx)

    app.train()(handle)
    app.query(wire.PROFILE_ACTION)(handle)
    return app


def _comparable(history: list[AggregationRecord]) -> list[tuple[Any, ...]]:
    # Flower's engine draws random node ids: compare everything but the ids
    return [
        (r.round, r.time, r.delays, r.staleness, r.raw_weights, r.values, r.metrics)
        for r in history
    ]


@pytest.mark.simulation
def test_virtual_clock_history_in_flowers_simulation_engine_matches_in_process() -> None:
    import conftest
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(conftest)  # Ray workers lack tests/
    speeds = [7.0, 13.0, 29.0, 61.0]
    shares = ShareConfig(total_samples=400, rebalance="seed")
    loop = LoopConfig(slice_budget=3.0, registration_timeout=60.0, poll_interval=0.02)
    out: dict[str, list[AggregationRecord]] = {}
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        edge = EdgeStrategy(threshold=2, clock=VirtualClock(), loop=loop, shares=shares)
        edge.start(grid, model(0.0), num_rounds=4, timeout=120.0, evaluate_fn=accuracy_fn())
        out["edge"] = list(edge.history)
        buff = FedBuff(threshold=2, clock=VirtualClock(), loop=loop)
        buff.start(grid, model(0.0), num_rounds=2, timeout=120.0)
        out["fedbuff"] = list(buff.history)

    run_simulation(
        server_app=app,
        client_app=_toy_client_app(ToyEdge(speeds=speeds)),
        num_supernodes=4,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False},
        },
    )
    assert len(out["edge"]) == 4
    assert len(out["fedbuff"]) == 2
    reference = EdgeStrategy(
        threshold=2, clock=VirtualClock(wall=ManualClock()), loop=loop, shares=shares
    )
    grid = InProcessGrid(ToyEdge(speeds=speeds), 4)
    reference.start(grid, model(0.0), num_rounds=4, evaluate_fn=accuracy_fn())
    assert _comparable(out["edge"]) == _comparable(reference.history)
