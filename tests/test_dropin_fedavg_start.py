"""Drop-in: FedAvg's ``min_available_nodes`` is the wait before the first round.

Found by a helper's probe of ``FedAvg(...)`` swapped for ``EdgeStrategy(threshold=K, ...)``
with the other keywords kept (Flower 1.42): ``min_available_nodes`` was ignored with a
WARNING. FedAvg waits for that many registered nodes before a round, EdgeStrategy started
with the K + 1 it needs. It is now the number of nodes to wait for before the first round
(``LoopConfig.min_nodes`` when that is not set; both set to different values is a
ConfigError naming both)."""

from __future__ import annotations

import logging

import pytest
from conftest import EQUAL, ToyEdge, flwr_logs, model, virtual

from flower_edge.errors import ConfigError
from strategies import (
    EdgeStrategy,
    FedAsync,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ManualClock,
    StopConfig,
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
