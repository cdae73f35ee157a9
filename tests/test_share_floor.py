"""``ShareConfig.min_epochs``: no node's share falls below that many epochs of its own data.

Found on the real deployment with label-skewed digits (run 25): the node slowed 10x was given
1-3 of its 176 samples, and it held 47 % of the test set's 8s; trained centrally without it,
the MLP reads 0.65 on 8s instead of 0.95.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import ToyEdge, virtual

from flower_edge.errors import ConfigError
from strategies.config import ShareConfig
from strategies.inprocess import InProcessGrid
from strategies.membership import Node
from strategies.records import ProfileRecord
from strategies.shares import SharePlanner, late_answer

SPEEDS = [1.0, 100.0, 100.0, 100.0]  # node 1 is 100x slower on every axis
LOCAL = [50, 60, 70, 80]
IDS = [1, 2, 3, 4]


def _planner(**share_options: Any) -> SharePlanner:
    cfg = ShareConfig(compute_share=0.5, max_share_fraction=1.0, **share_options)
    return SharePlanner(InProcessGrid(ToyEdge(), 2), virtual(), cfg, 0.01, "edge")


def _plan(planner: SharePlanner) -> dict[int, Node]:
    profiles = {
        i: ProfileRecord(node_id=i, evaluations=(e,) * 4, local_samples=n)
        for i, e, n in zip(IDS, SPEEDS, LOCAL, strict=True)
    }
    nodes = {i: Node(i) for i in IDS}
    planner.assign_initial(IDS, profiles, nodes)
    return nodes


def test_without_a_floor_the_slow_node_gets_next_to_nothing() -> None:
    nodes = _plan(_planner(total_samples=520))
    assert nodes[1].share <= 3  # its match ratio is ~1 % of the total
    assert sum(n.share for n in nodes.values()) == 520


def test_the_floor_raises_the_slow_node_and_takes_nothing_from_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    free = _plan(_planner(total_samples=520))
    with caplog.at_level("INFO", logger="flwr"):
        nodes = _plan(_planner(total_samples=520, min_epochs=1.5))
    assert nodes[1].share == 75  # ceil(1.5 * 50)
    assert not nodes[1].planned_out
    assert [nodes[i].share for i in (2, 3, 4)] == [free[i].share for i in (2, 3, 4)]
    assert "node 1's share" in caplog.text
    assert "raised to 75 (min_epochs 1.5" in caplog.text
    # the plan's log line shows the floored share
    assert "1: 75" in caplog.text


def test_a_tiny_floor_changes_only_the_node_planned_out() -> None:
    free = _plan(_planner(total_samples=5200))
    floored = _plan(_planner(total_samples=5200, min_epochs=0.01))
    # 5,200 samples: node 1's ratio (1e-4 of the others') still rounds to 0, and the floor of
    # 0.01 epochs is one sample; the other nodes are far above theirs
    assert free[1].share == 0
    assert free[1].planned_out
    assert floored[1].share == 1
    assert not floored[1].planned_out
    assert [floored[i].share for i in (2, 3, 4)] == [free[i].share for i in (2, 3, 4)]


def _observe_jobs(planner: SharePlanner, nodes: dict[int, Node]) -> None:
    """Three jobs per node: node 1 takes 100x longer per sample, with a large fixed cost."""
    for node in nodes.values():
        slow = node.node_id == 1
        for k in (1, 2, 3):
            share = max(1, node.share) * k
            planner.observe(node, share, (1.0 if slow else 0.01) * share + (30.0 if slow else 0.5))


def test_rebalancing_keeps_the_floor() -> None:
    planner = _planner(total_samples=520, min_epochs=1.0)
    nodes = _plan(planner)
    _observe_jobs(planner, nodes)
    planner.rebalance(nodes.values())
    assert nodes[1].share == 50  # the allocation would give it nothing: its floor
    assert not nodes[1].planned_out
    unfloored = _planner(total_samples=520)
    plain = _plan(unfloored)
    _observe_jobs(unfloored, plain)
    unfloored.rebalance(plain.values())
    assert plain[1].share < 50


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"min_epochs": 0.0}, "min_epochs"),
        ({"min_epochs": -1.0}, "min_epochs"),
        ({"min_epochs": float("nan")}, "min_epochs"),
        ({"min_epochs": 3.0, "max_epochs": 2.0}, "min_epochs"),
        ({"min_epochs": 1.0, "zero_ratio": "none"}, "zero_ratio"),
    ],
)
def test_bad_floors_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ShareConfig(**options)


def test_a_profile_that_comes_after_the_plan_is_floored_too() -> None:
    planner = _planner(total_samples=520, min_epochs=1.0)
    profiles = {
        i: ProfileRecord(node_id=i, evaluations=(e,) * 4, local_samples=n)
        for i, e, n in zip(IDS, SPEEDS, LOCAL, strict=True)
    }
    nodes = {i: Node(i) for i in IDS}
    planner.assign_initial(IDS, {i: profiles[i] for i in (2, 3, 4)}, nodes)
    assert nodes[1].share == 130  # no profile yet: an equal share
    planner.late = {1}
    late_answer(planner, nodes[1], nodes, profiles[1])
    assert nodes[1].profiled
    assert nodes[1].share == 50  # its match ratio gives ~0; the floor, one epoch of its 50
