"""Drop-in: FedAvg's node wait, its evaluation log lines and its Result of no round.

Found by a helper's probe of ``FedAvg(...)`` swapped for ``EdgeStrategy(threshold=K, ...)``
with the other keywords kept (Flower 1.42):

- ``min_available_nodes`` was ignored with a WARNING: FedAvg waits for that many registered
  nodes before a round, EdgeStrategy started with the K + 1 it needs. It is now the number of
  nodes to wait for before the first round (``LoopConfig.min_nodes`` when that is not set;
  both set to different values is a ConfigError naming both);
- with an ``evaluate_fn``, FedAvg's ``Strategy.start`` logs ``Initial global evaluation
  results: ...`` and, after each round, ``Global evaluation`` and ``\\t└──> MetricRecord:
  ...``; EdgeStrategy logged neither, so a FedAvg user's log lost its evaluation lines;
- with ``num_rounds=0`` both Results hold the initial evaluation only; ``Result.arrays`` is
  FedAvg's empty ArrayRecord but EdgeStrategy's initial model (documented in docs/dropin.md).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, flwr_logs, make_dropin_app, model, virtual
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import FedAvg

from flower_edge.errors import ConfigError
from strategies import (
    EdgeStrategy,
    FedAsync,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ManualClock,
    StopConfig,
    ValuationConfig,
    VirtualClock,
)


class _Joining(InProcessGrid):
    """A grid whose last nodes register only after the first few polls."""

    def __init__(self, num_nodes: int, early: int) -> None:
        super().__init__(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0, 80.0]), num_nodes)
        self.early, self.polls = early, 0

    def get_node_ids(self) -> list[int]:
        self.polls += 1
        ids = super().get_node_ids()
        return ids if self.polls > 3 else ids[: self.early]


def test_min_available_nodes_is_the_wait_before_the_first_round() -> None:
    with flwr_logs() as logs:
        strategy = EdgeStrategy(threshold=2, min_available_nodes=5)  # type: ignore[call-arg]
    assert not logs.matching("min_available_nodes", level=logging.WARNING)  # no longer ignored
    assert strategy.min_nodes() == 5
    # at least the fewest nodes that can trigger an aggregation, as FedAvg waits for at least
    # its sample: FedAvg's default of 2 does not make a K = 4 run start with 2 nodes
    assert EdgeStrategy(threshold=4, min_available_nodes=2).min_nodes() == 5  # type: ignore[call-arg]
    assert FedBuff(3, min_available_nodes=6).min_nodes() == 6  # type: ignore[call-arg]
    assert FedAsync(min_available_nodes=0).min_nodes() == 1  # type: ignore[call-arg]
    same = EdgeStrategy(threshold=2, min_available_nodes=4, loop=LoopConfig(min_nodes=4))  # type: ignore[call-arg]
    assert same.min_nodes() == 4

    grid = _Joining(5, early=3)
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        stop=StopConfig(),
        min_available_nodes=5,  # type: ignore[call-arg]
    )
    with flwr_logs() as logs:
        strategy.start(grid, model(0.0), num_rounds=1)
    assert logs.matching("edge: 5 nodes registered")  # not 3, the K + 1 it needs
    assert logs.matching("min_available_nodes 5: waits for 5 nodes")  # the settings block
    first = {int(m.metadata.dst_node_id) for m in grid.pushed[:5]}
    assert first == {1001, 1002, 1003, 1004, 1005}


def test_too_few_nodes_for_min_available_nodes_says_which_setting_to_lower() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=2,
        clock=VirtualClock(wall=ManualClock()),
        min_available_nodes=5,  # type: ignore[call-arg]
    )
    with pytest.raises(
        ConfigError,
        match=r"only 4 nodes registered within 120.0 s; need at least 5 .*"
        r"lower min_available_nodes \(5\) or run 5 or more SuperNodes",
    ):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (
            {"min_available_nodes": 3, "loop": LoopConfig(min_nodes=4)},
            r"min_available_nodes=3 and loop=LoopConfig\(min_nodes=4\) both set the nodes",
        ),
        ({"min_available_nodes": -1}, "min_available_nodes must be an integer >= 0, got -1"),
        ({"min_available_nodes": 2.5}, "min_available_nodes must be an integer"),
    ],
)
def test_bad_min_available_nodes_is_named(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EdgeStrategy(threshold=2, **options)  # type: ignore[arg-type]


GLOBAL_LINES = ("Initial global evaluation results: ", "Global evaluation", "\t└──> MetricRecord: ")


def _evaluation_lines(logs: object) -> dict[str, list[str]]:
    messages = logs.messages(logging.INFO)  # type: ignore[attr-defined]
    return {
        "initial": [m for m in messages if m.startswith(GLOBAL_LINES[0])],
        "global": [m for m in messages if m == GLOBAL_LINES[1]],
        "record": [m for m in messages if m.startswith(GLOBAL_LINES[2])],
    }


def test_the_log_has_fedavgs_global_evaluation_lines() -> None:
    with flwr_logs() as logs:
        FedAvg(fraction_evaluate=0.0).start(
            InProcessGrid(make_dropin_app(), 4), model(0.0), num_rounds=2, evaluate_fn=accuracy_fn()
        )
    fedavg = _evaluation_lines(logs)
    assert [len(v) for v in fedavg.values()] == [1, 2, 2]  # Flower's own, for reference

    # leave-one-out calls evaluate_fn K + 1 more times per aggregation: one line pair each
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL, stop=StopConfig())
    with flwr_logs() as logs:
        result = strategy.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=accuracy_fn()
        )
    edge = _evaluation_lines(logs)
    assert [len(v) for v in edge.values()] == [1, 2, 2]
    served = result.evaluate_metrics_serverapp
    assert edge["initial"] == [f"{GLOBAL_LINES[0]}{served[0]}"]
    assert edge["record"] == [f"{GLOBAL_LINES[2]}{served[r]}" for r in (1, 2)]
    messages = logs.messages(logging.INFO)  # each pair right after its aggregation's line
    for rnd in (1, 2):
        at = next(i for i, m in enumerate(messages) if m.startswith(f"[edge round {rnd}]"))
        assert messages[at + 1 : at + 3] == [GLOBAL_LINES[1], f"{GLOBAL_LINES[2]}{served[rnd]}"]

    with flwr_logs() as logs:  # none without an evaluate_fn, as FedAvg
        EdgeStrategy(
            threshold=2, clock=virtual(), shares=EQUAL, valuation=ValuationConfig(mode="off")
        ).start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1)
    assert not any(_evaluation_lines(logs).values())


def test_no_round_gives_fedavgs_metrics_and_the_initial_model() -> None:
    """``num_rounds=0``: the same metrics as FedAvg's Result (the initial evaluation only).
    FedAvg's ``arrays`` is an empty ArrayRecord, set only by an aggregation; EdgeStrategy's is
    the model it serves, the initial one, as docs/dropin.md says."""
    initial = model(0.5)
    fedavg = FedAvg(fraction_evaluate=0.0).start(
        InProcessGrid(make_dropin_app(), 4), initial, num_rounds=0, evaluate_fn=accuracy_fn()
    )
    edge = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL).start(
        InProcessGrid(ToyEdge(), 4), initial, num_rounds=0, evaluate_fn=accuracy_fn()
    )
    for name in ("train_metrics_clientapp", "evaluate_metrics_clientapp"):
        assert getattr(fedavg, name) == getattr(edge, name) == {}
    assert list(fedavg.evaluate_metrics_serverapp) == list(edge.evaluate_metrics_serverapp) == [0]
    assert dict(fedavg.evaluate_metrics_serverapp[0]) == dict(edge.evaluate_metrics_serverapp[0])
    assert len(fedavg.arrays) == 0
    assert isinstance(edge.arrays, ArrayRecord)
    for key in initial:
        np.testing.assert_array_equal(edge.arrays[key].numpy(), initial[key].numpy())
    guide = (Path(__file__).resolve().parents[1] / "docs" / "dropin.md").read_text()
    assert "`num_rounds=0` returns what FedAvg's Result holds" in guide
    assert "where FedAvg's is an empty ArrayRecord" in " ".join(guide.split())
