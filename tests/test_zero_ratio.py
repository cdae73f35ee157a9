"""A node whose match ratio is 0, and a node planned at 0 samples (seed 000, formula 7).

Found by a review against the seed: the planner gave a profiled node of match ratio 0 an
equal share ``F / n``, while the seed's ``f_d = F m_d / sum m`` gives it none, and a share
of 0 on the wire means "train your own default", so a node that a plan or a rebalancing left
with 0 samples trained a whole default job. Now ``ShareConfig.zero_ratio`` chooses (the
``edge-seed`` preset: ``"none"``), and a node planned at 0 samples gets no job.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, virtual
from fault_clients import (
    HONEST_PROFILE,
    capture_flwr_logs,
    edge_app,
    initial_model,
    train_config,
)

from flower_edge import wire
from flower_edge.allocation import initial_shares
from flower_edge.errors import ConfigError
from flower_edge.radar import match_ratios
from strategies import EdgeStrategy, LoopConfig, ShareConfig
from strategies.checkpoint import NodeState, RunState
from strategies.inprocess import InProcessGrid
from strategies.membership import Node
from strategies.records import ProfileRecord
from strategies.shares import SharePlanner

#: the review's example: the fourth node scores only on the CPU axis (no area)
EVALUATIONS = [
    (4.0, 2.0, 3.0, 1.0),
    (2.0, 2.0, 6.0, 2.0),
    (1.0, 0.0, 1.0, 1.0),
    (3.0, 0.0, 0.0, 0.0),
]
IDS = [1, 2, 3, 4]


def _planner(**options: Any) -> SharePlanner:
    cfg = ShareConfig(compute_share=0.5, max_share_fraction=1.0, total_samples=400, **options)
    return SharePlanner(InProcessGrid(ToyEdge(), 2), virtual(), cfg, 0.01, "edge")


def _profiles(evaluations: list[tuple[float, ...]]) -> dict[int, ProfileRecord]:
    return {
        i: ProfileRecord(node_id=i, evaluations=e, local_samples=100)
        for i, e in zip(IDS, evaluations, strict=True)
    }


def _plan(**options: Any) -> dict[int, Node]:
    nodes = {i: Node(i) for i in IDS}
    _planner(**options).assign_initial(IDS, _profiles(EVALUATIONS), nodes)
    return nodes


def test_none_gives_the_seeds_split_and_no_job() -> None:
    ratios = match_ratios(np.array(EVALUATIONS), 0.5)
    assert ratios[3] == 0.0
    assert all(r > 0 for r in ratios[:3])
    expected = initial_shares(400, list(ratios))  # f_d = F m_d / sum m, brute force below
    exact = [400 * r / sum(ratios) for r in ratios]
    assert all(abs(e - x) < 1 for e, x in zip(expected, exact, strict=True))
    nodes = _plan(zero_ratio="none")
    assert [nodes[i].share for i in IDS] == list(expected)
    assert nodes[4].share == 0
    assert nodes[4].profiled
    assert nodes[4].planned_out
    assert not nodes[4].ready(1)
    assert all(nodes[i].ready(1) and not nodes[i].planned_out for i in IDS[:3])


def test_equal_gives_f_over_n_and_names_the_node() -> None:
    with capture_flwr_logs() as logs:
        nodes = _plan(zero_ratio="equal")
    assert nodes[4].share == 400 // 4
    assert not nodes[4].planned_out
    assert nodes[4].ready(1)
    assert sum(nodes[i].share for i in IDS) == 400
    warned = logs.messages(logging.WARNING)
    assert [w for w in warned if "node 4 has match ratio 0" in w and "zero_ratio='equal'" in w]


def test_every_ratio_zero_falls_back_to_equal_shares() -> None:
    nodes = {i: Node(i) for i in IDS}
    flat = [(1.0, 0.0, 1.0, 0.0)] * 4  # no two neighbouring axes score: no area anywhere
    with capture_flwr_logs() as logs:
        _planner(zero_ratio="none").assign_initial(IDS, _profiles(flat), nodes)
    assert [nodes[i].share for i in IDS] == [100] * 4
    assert not any(n.planned_out for n in nodes.values())
    assert [w for w in logs.messages(logging.WARNING) if "every profiled node" in w]


def test_a_rebalancing_to_zero_samples_plans_the_node_out() -> None:
    planner = _planner(rebalance="optimal")
    nodes = {i: Node(i) for i in (1, 2)}
    planner.assign_initial([1, 2], {i: _profiles(EVALUATIONS)[i] for i in (1, 2)}, nodes)
    for _ in range(3):  # node 2 takes 1000x longer per sample, with a large fixed cost
        planner.observe(nodes[1], nodes[1].share, 0.001 * nodes[1].share + 0.01)
        planner.observe(nodes[2], nodes[2].share, 1.0 * nodes[2].share + 50.0)
    planner.rebalance(nodes.values())
    assert nodes[2].share == 0
    assert nodes[2].planned_out
    assert not nodes[2].ready(5)
    assert nodes[1].share == 400
    assert not nodes[1].planned_out
    # the fast node slows down 100x: the planned-out node is a candidate again and gets work
    nodes[1].observations.clear()
    for _ in range(3):
        planner.observe(nodes[1], 400, 0.1 * 400 + 0.01)
    planner.rebalance(nodes.values())
    assert nodes[2].share > 0
    assert not nodes[2].planned_out
    assert nodes[2].ready(6)
    assert nodes[1].share + nodes[2].share == 400


def test_planned_out_survives_a_checkpoint_and_old_checkpoints_read_false() -> None:
    node = Node(7, share=0, ratio=0.0, profiled=True, planned_out=True)
    state = NodeState.of(node)
    back = Node(7)
    state.apply_to(back)
    assert back.planned_out
    nodes_json = {"7": {"share": 0, "ratio": 0.0, "profiled": True, "observations": []}}
    old = RunState.from_json({**_run_state_json(), "nodes": nodes_json})
    assert old.nodes[7].planned_out is False


def _run_state_json() -> dict[str, Any]:
    return {
        "strategy": "edge",
        "version": 1,
        "clock": 1.0,
        "elapsed": 1.0,
        "jobs": 1,
        "best": None,
        "since_best": 0,
        "abandoned_total": 0,
        "values": {},
        "last_values": [0, [], []],
        "history": [],
        "train_metrics": {},
        "evaluate_metrics": {},
        "client_evaluate_metrics": {},
    }


def test_zero_ratio_is_validated_by_name() -> None:
    with pytest.raises(ConfigError, match="zero_ratio"):
        ShareConfig(zero_ratio="skip")  # type: ignore[arg-type]


def test_presets_choose_the_seed_rule_only_in_edge_seed() -> None:
    assert EdgeStrategy.preset("edge-seed", threshold=2).shares.zero_ratio == "none"
    assert EdgeStrategy.preset("edge", threshold=2).shares.zero_ratio == "equal"


@pytest.mark.parametrize(("rule", "trains"), [("none", False), ("equal", True)])
def test_a_run_never_sends_a_planned_out_node_a_job(rule: str, trains: bool) -> None:
    """End to end on the in-process grid: four nodes, one without radar area."""
    nodes = [1001, 1002, 1003, 1004]
    grid = InProcessGrid(edge_app(), node_ids=nodes)
    grid.set_app(1004, edge_app(profile=(1.0, 0.0, 1.0, 0.0)))
    assert HONEST_PROFILE[1] == 0.0  # the honest nodes have no GPU either, but an area
    strategy = EdgeStrategy(
        threshold=1,
        clock=virtual(),
        loop=LoopConfig(poll_interval=0.01),
        shares=ShareConfig(zero_ratio=rule, total_samples=400),  # type: ignore[arg-type]
        checkpoint_dir="",
    )
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=6, timeout=20.0)
    jobs = [
        m
        for m in grid.pushed
        if m.metadata.dst_node_id == 1004
        and m.metadata.message_type == "train"
        and wire.PROFILE_MODE not in train_config(m)
    ]
    assert bool(jobs) is trains
    assert len(strategy.history) == 6
    assert any(1004 in h.participants for h in strategy.history) is trains
    assert [w for w in logs.messages(logging.WARNING) if "node 1004 has match ratio 0" in w]
