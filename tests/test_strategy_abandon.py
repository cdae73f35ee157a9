"""The server's side of the abandon rule: R and theta per message, and the tally."""

from __future__ import annotations

import math
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, model, virtual
from flwr.app import Message, MessageType

from flower_edge import wire
from flower_edge.decision import decide
from flower_edge.errors import ConfigError
from strategies import (
    EdgeStrategy,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ShareConfig,
    StopConfig,
)
from strategies.abandon import AbandonPolicy
from strategies.config import AbandonConfig
from strategies.membership import Node


def test_resources_and_the_median_theta_by_hand() -> None:
    policy = AbandonPolicy(AbandonConfig(), enabled=True)
    assert policy.theta == math.inf  # no decision before the first refresh
    # R = sqrt(m / 0.16): 1, 0.5, 0.25; values: node 1 valued 0.6, nodes 2 and 3 never
    # (neutral = mean of the last results [0.6, 0.2] = 0.4)
    policy.refresh({1: 0.16, 2: 0.04, 3: 0.01}, {1: 0.6}, [0.6, 0.2])
    assert policy.resources == pytest.approx({1: 1.0, 2: 0.5, 3: 0.25})
    # scores 0.5 R + 0.5 V: 0.8, 0.45, 0.325 -> median 0.45
    assert policy.theta == pytest.approx(0.45)
    assert policy.fields(2) == pytest.approx({wire.THETA: 0.45, wire.RESOURCE: 0.5})
    # the clients' decisions with these numbers: nodes 1 and 2 abandon, node 3 continues
    got = [
        decide(0.5, policy.theta, policy.resources[i], v).abandon
        for i, v in ((1, 0.6), (2, 0.4), (3, 0.4))
    ]
    assert got == [True, True, False]


def test_theta_is_derived_from_the_live_nodes_only() -> None:
    # node 4 has left: neither its R (it would be the best-matched) nor its score counts
    nodes = [
        Node(1, ratio=0.16),
        Node(2, ratio=0.04),
        Node(3, ratio=0.01),
        Node(4, ratio=0.64, gone=True),
    ]
    evaluation = SimpleNamespace(values={1: 0.6}, last_values=(1, [1, 2], [0.6, 0.2]))
    policy = AbandonPolicy(AbandonConfig(), enabled=True)
    policy.refresh_from(nodes, evaluation)  # type: ignore[arg-type]
    assert policy.resources == pytest.approx({1: 1.0, 2: 0.5, 3: 0.25})  # as by hand above
    assert policy.theta == pytest.approx(0.45)
    # with every node gone, all of them count (rather than none)
    for node in nodes:
        node.gone = True
    policy.refresh_from(nodes, evaluation)  # type: ignore[arg-type]
    assert set(policy.resources) == {1, 2, 3, 4}


def test_a_user_theta_is_sent_as_is_and_a_disabled_policy_never_abandons() -> None:
    fixed = AbandonPolicy(AbandonConfig(theta=0.3), enabled=True)
    fixed.refresh({1: 0.5, 2: 0.1}, {}, [])
    assert fixed.theta == 0.3
    off = AbandonPolicy(AbandonConfig(), enabled=False)
    off.refresh({1: 0.5, 2: 0.1}, {}, [])
    assert off.fields(1)[wire.THETA] == math.inf


def test_quantile_against_numpy_on_random_populations() -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        ratios = {i: float(r) for i, r in enumerate(rng.uniform(0, 0.3, n))}
        values = {i: float(v) for i, v in enumerate(rng.dirichlet(np.ones(n)))}
        alpha, q = float(rng.uniform()), float(rng.uniform())
        policy = AbandonPolicy(AbandonConfig(alpha=alpha, quantile=q), enabled=True)
        policy.refresh(ratios, values, list(values.values()))
        top = max(ratios.values())
        scores = [alpha * math.sqrt(ratios[i] / top) + (1 - alpha) * values[i] for i in range(n)]
        assert policy.theta == pytest.approx(float(np.quantile(scores, q)), abs=1e-12)


def test_tally_of_wasted_and_saved_samples() -> None:
    policy = AbandonPolicy(AbandonConfig(), enabled=True)
    policy.offered()
    policy.progress(7, share=100, trained=30, abandoned=False)  # 30 of 100 trained on v0
    policy.offered()
    policy.progress(7, share=100, trained=10, abandoned=True)  # abandoned: 30 lost, 70 saved
    policy.offered()
    policy.progress(7, share=100, trained=25, abandoned=True)  # again: 10 lost, 90 saved
    policy.finished(7)
    assert policy.tally.metrics() == {
        "abandon-offers": 3,
        "abandoned-jobs": 2,
        "abandon-samples-wasted": 40,
        "abandon-samples-saved": 160,
    }
    resumed = AbandonPolicy(AbandonConfig(), enabled=True)
    resumed.restore(policy.tally.metrics())
    assert resumed.tally == policy.tally


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 1.5}, r"alpha must be in \[0, 1\], got 1.5"),
        ({"quantile": -0.1}, r"quantile must be in \[0, 1\], got -0.1"),
        ({"theta": -1.0}, r"theta must be >= 0, got -1.0"),
        ({"alpha": True}, "alpha must be a finite number"),
    ],
)
def test_bad_config(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        AbandonConfig(**kwargs)


# ---------------------------------------------------------------- on the wire, in a run


class _Recording(InProcessGrid):
    """An InProcessGrid that keeps (node, config) of every train message it delivers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: list[tuple[int, dict[str, Any]]] = []

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        batch = list(messages)
        for msg in batch:
            if msg.metadata.message_type == MessageType.TRAIN:
                cfg = dict(msg.content.config_records[wire.CONFIG])
                self.sent.append((int(msg.metadata.dst_node_id), cfg))
        return super().push_messages(batch)


def _run(strategy: Any, rounds: int = 6) -> tuple[_Recording, Any]:
    toy = ToyEdge(speeds=[5.0, 20.0, 40.0, 80.0], evaluations=lambda p: (1.0 + p, 0.0, 2.0, 1.0))
    grid = _Recording(toy, 4)
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return grid, result


def test_edge_strategy_sends_r_and_the_median_theta_and_tallies_abandons() -> None:
    shares = ShareConfig(total_samples=400, rebalance="off", compute_share=0.4)
    loop = LoopConfig(slice_budget=0.5)  # short slices: stale jobs meet newer globals
    strategy = EdgeStrategy(
        threshold=1, clock=virtual(), shares=shares, loop=loop, stop=StopConfig()
    )
    grid, result = _run(strategy)
    # once the profiles are in (messages carry m > 0), R = sqrt(m / max m)
    profiled = [(node, cfg) for node, cfg in grid.sent if cfg[wire.MATCH_RATIO] > 0]
    ratio = {node: cfg[wire.MATCH_RATIO] for node, cfg in profiled}
    assert len(ratio) == 4
    top = max(ratio.values())
    r = {node: math.sqrt(m / top) for node, m in ratio.items()}
    for node, cfg in profiled:
        assert cfg[wire.RESOURCE] == pytest.approx(r[node])
    # before any values: every V is neutral (0.5), theta = median of 0.5 R + 0.25
    first = float(np.quantile([0.5 * r[n] + 0.25 for n in sorted(r)], 0.5))
    before = [cfg[wire.THETA] for _, cfg in profiled if cfg[wire.VALUES_ROUND] == 0]
    assert before
    assert before == pytest.approx([first] * len(before))
    # brute force: after the last aggregation, theta = median of 0.5 R + 0.5 V over the nodes,
    # V = the latest known value, or the mean of the last results for a node never valued
    latest: dict[int, float] = {}
    last_round: dict[int, float] = {}
    for record in strategy.history:
        last_round = {}
        for node, value in zip(record.participants, record.values, strict=True):
            last_round[node] = last_round.get(node, 0.0) + value
        latest.update(last_round)
    neutral = sum(last_round.values()) / len(last_round)
    scores = [0.5 * r[n] + 0.5 * latest.get(n, neutral) for n in sorted(r)]
    expected = float(np.quantile(scores, 0.5))
    final = result.train_metrics_clientapp[len(strategy.history)]
    assert final["abandon-theta"] == pytest.approx(expected)
    # no work goes out after the final aggregation: the messages of the last values round
    # sent carry the theta of that round
    last = max(int(cfg.get(wire.VALUES_ROUND, 0)) for _, cfg in grid.sent)
    after = [cfg[wire.THETA] for _, cfg in grid.sent if cfg.get(wire.VALUES_ROUND) == last]
    assert after
    theta = result.train_metrics_clientapp[last]["abandon-theta"]
    assert after == pytest.approx([theta] * len(after))
    # the toy clients abandon whenever a newer global arrives at a slice boundary
    assert final["abandon-offers"] >= final["abandoned-jobs"] > 0
    assert final["abandon-samples-wasted"] + final["abandon-samples-saved"] > 0


def test_baselines_tell_their_clients_never_to_abandon() -> None:
    strategy = FedBuff(threshold=2, clock=virtual(), shares=ShareConfig(profile=False))
    grid, result = _run(strategy, rounds=3)
    assert {cfg[wire.THETA] for _, cfg in grid.sent} == {math.inf}
    last = result.train_metrics_clientapp[max(result.train_metrics_clientapp)]
    assert "abandon-theta" not in last
    assert last["abandon-offers"] == 0  # no decision is offered when the rule is off


def test_auto_compute_share_analyses_the_served_model_once() -> None:
    from flower_edge.models import MLP
    from strategies.shares import SharePlanner

    auto = ShareConfig(compute_share="auto", model=MLP, input_shape=(8, 64))
    planner = SharePlanner(InProcessGrid(ToyEdge(), 2), virtual(), auto, 0.01, "edge")
    assert planner.compute_share() == pytest.approx(0.4)  # the digits MLP
    assert planner.compute_share() == pytest.approx(0.4)  # cached
    bare = SharePlanner(InProcessGrid(ToyEdge(), 2), virtual(), ShareConfig(), 0.01, "edge")
    assert bare.compute_share() == 0.5
    with pytest.raises(ConfigError, match="model needs input_shape"):
        ShareConfig(model=MLP)


def test_resume_continues_the_tally_and_sends_the_checkpointed_theta(tmp_path: Any) -> None:
    def run(rounds: int, resume: bool) -> tuple[_Recording, Any]:
        strategy = EdgeStrategy(
            threshold=1,
            clock=virtual(),
            shares=ShareConfig(total_samples=400, rebalance="off", compute_share=0.4),
            loop=LoopConfig(slice_budget=0.5),
            stop=StopConfig(),
            checkpoint_dir=tmp_path,
            resume=resume,
        )
        return _run(strategy, rounds)

    _, first = run(3, resume=False)
    at_checkpoint = first.train_metrics_clientapp[3]
    grid, resumed = run(6, resume=True)
    assert resumed.train_metrics_clientapp[3] == at_checkpoint
    # theta comes from the restored ratios and values: the same as after round 3
    assert grid.sent[0][1][wire.THETA] == pytest.approx(at_checkpoint["abandon-theta"])
    final = resumed.train_metrics_clientapp[6]
    for key in ("abandon-offers", "abandoned-jobs", "abandon-samples-wasted"):
        assert final[key] >= at_checkpoint[key]
    assert final["abandon-offers"] > at_checkpoint["abandon-offers"]
