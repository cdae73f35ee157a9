"""Issue 10's levers in the strategy: per-node epoch caps on shares, staleness-scaled server lr."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, virtual

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy
from strategies.config import ShareConfig
from strategies.inprocess import InProcessGrid
from strategies.membership import Node
from strategies.records import ProfileRecord, Update
from strategies.shares import SharePlanner


def _planner(**share_options: Any) -> SharePlanner:
    cfg = ShareConfig(compute_share=0.5, **share_options)
    return SharePlanner(InProcessGrid(ToyEdge(), 2), virtual(), cfg, 0.01, "edge")


def _profiles(evaluations: list[float], local: list[int]) -> dict[int, ProfileRecord]:
    return {
        i + 1: ProfileRecord(node_id=i + 1, evaluations=(e, e, e, e), local_samples=n)
        for i, (e, n) in enumerate(zip(evaluations, local, strict=True))
    }


def test_max_epochs_caps_each_share_at_epochs_of_its_own_data() -> None:
    speeds = [1.0, 2.0, 4.0, 16.0]
    local = [40, 40, 10, 10]
    ids = [1, 2, 3, 4]
    total = 2 * sum(local)  # 200 samples: two epochs of all the data
    free = _planner(total_samples=total, max_share_fraction=1.0)
    nodes = {i: Node(i) for i in ids}
    free.assign_initial(ids, _profiles(speeds, local), nodes)
    uncapped = [nodes[i].share for i in ids]
    assert uncapped[3] > 3 * local[3]  # the fast node with little data: many epochs of it

    capped = _planner(total_samples=total, max_share_fraction=1.0, max_epochs=3.0)
    nodes = {i: Node(i) for i in ids}
    capped.assign_initial(ids, _profiles(speeds, local), nodes)
    shares = [nodes[i].share for i in ids]
    assert sum(shares) == total
    assert all(s <= 3 * n for s, n in zip(shares, local, strict=True))
    assert shares[3] == 30  # at its cap
    # the others keep the match-ratio order (faster nodes more), the excess went to them
    assert shares[0] < shares[1]
    assert all(c >= u for c, u in zip(shares[:3], uncapped[:3], strict=True))


@pytest.mark.parametrize("per_aggregation", [2, 1])
def test_a_synchronous_run_does_not_load_a_slow_node_beyond_its_share(
    per_aggregation: int,
) -> None:
    """Found by a new-user probe (``--clients 2``): two nodes, a 30x speed spread, every
    update needed for an aggregation. The fast node is capped at 2.5 epochs of its own data;
    the rest of the total went to the slow node (1.5 epochs, 12x its match-ratio share), so
    every round waited for it (30 virtual s to the target against 1.8 s for the seed's rule).
    A synchronous round now trains fewer samples instead; a semi-asynchronous one (an
    aggregation does not wait for the slow node) still hands them on."""
    local = [576, 576]
    planner = _planner(total_samples=2 * sum(local), max_share_fraction=1.0, max_epochs=2.5)
    planner.size_for(2, per_aggregation)
    nodes = {i: Node(i) for i in (1, 2)}
    planner.assign_initial([1, 2], _profiles([30.0, 1.0], local), nodes)
    fast, slow = nodes[1].share, nodes[2].share
    assert fast == 1440  # at its cap
    ratio = nodes[2].ratio / (nodes[1].ratio + nodes[2].ratio)
    fair = 2 * sum(local) * ratio  # the slow node's match-ratio share of the total
    if per_aggregation == 2:  # synchronous
        assert slow == math.ceil(fair)
    else:
        assert fast + slow == 2 * sum(local)
        assert slow > 10 * fair


def test_max_epochs_too_small_puts_every_node_at_its_cap(caplog: pytest.LogCaptureFixture) -> None:
    planner = _planner(total_samples=100, max_share_fraction=1.0, max_epochs=1.0)
    nodes = {i: Node(i) for i in (1, 2)}
    with caplog.at_level("WARNING", logger="flwr"):
        planner.assign_initial([1, 2], _profiles([1.0, 2.0], [10, 20]), nodes)
    assert [nodes[1].share, nodes[2].share] == [10, 20]
    # the user learns that the seed's shares are switched off, and how to keep them
    assert "caps the shares at 30 of 100 samples per round" in caplog.text
    assert "the match ratios and rebalancing have no effect" in caplog.text


def test_max_epochs_is_checked() -> None:
    with pytest.raises(ConfigError, match="max_epochs"):
        ShareConfig(max_epochs=0.0)


def _update(node: int, base: int, delta: float, share: int) -> Update:
    arrays = (np.full(3, delta, dtype=np.float32),)
    return Update(
        node_id=node,
        job_id=node,
        base_version=base,
        arrays=arrays,
        num_examples=share,
        share=share,
        delay=0.0,
        received_at=1.0,
        late=False,
        train_loss=None,
    )


def test_staleness_lr_scales_the_step_by_the_mean_fedbuff_weight() -> None:
    zero = [np.zeros(3, dtype=np.float32)]
    bases = {0: zero, 3: zero}
    updates = [_update(1, 0, 1.0, 10), _update(2, 3, 3.0, 30)]  # staleness 3 and 0 at v3
    plain = EdgeStrategy(threshold=1, aggregate="deltas", server_lr=1.0, decay="constant")
    scaled = EdgeStrategy(
        threshold=1, aggregate="deltas", server_lr=1.0, decay="constant", staleness_lr=True
    )
    mean = (10 * 1.0 + 30 * 3.0) / 40  # c_i = share
    scale = (1 / math.sqrt(4) + 1) / 2
    got_plain = plain.combine(zero, updates, 3, bases).arrays[0]
    got = scaled.combine(zero, updates, 3, bases)
    np.testing.assert_allclose(got_plain, mean, rtol=1e-6)
    np.testing.assert_allclose(got.arrays[0], scale * mean, rtol=1e-6)
    # leave-one-out keeps the same (whole-buffer) scale
    assert got.total is not None
    np.testing.assert_allclose(got.total.mean_without((1, 1))[0], scale * 3.0, rtol=1e-6)
    with pytest.raises(ConfigError, match="staleness_lr"):
        EdgeStrategy(threshold=1, staleness_lr="yes")  # type: ignore[arg-type]


def test_a_node_without_a_profile_gets_no_more_than_the_capped_nodes() -> None:
    # 4 nodes of 40 samples, 5 epochs of all data in total, shares capped at 3 epochs (120):
    # node 4 sent no profile; total / n would give it 200 samples, more than anyone else
    planner = _planner(total_samples=5 * 160, max_share_fraction=1.0, max_epochs=3.0)
    nodes = {i: Node(i) for i in (1, 2, 3, 4)}
    profiles = _profiles([1.0, 2.0, 4.0], [40, 40, 40])
    planner.assign_initial([1, 2, 3, 4], profiles, nodes)
    shares = [nodes[i].share for i in (1, 2, 3, 4)]
    assert shares[:3] == [120, 120, 120]
    assert shares[3] == 120
    # without caps binding, the unprofiled node keeps its equal share of the total
    planner = _planner(total_samples=400, max_share_fraction=1.0)
    nodes = {i: Node(i) for i in (1, 2, 3, 4)}
    planner.assign_initial([1, 2, 3, 4], profiles, nodes)
    assert nodes[4].share == 100
    assert sum(nodes[i].share for i in (1, 2, 3)) == 300
