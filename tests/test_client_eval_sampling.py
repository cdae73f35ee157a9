"""Client-side evaluation samples real node ids, however large (Flower's ids are uint64)."""

from __future__ import annotations

import pytest
from flwr.app import ConfigRecord

from strategies.client_eval import ClientEvaluation

#: node ids as Flower draws them: above 2**63 numpy stores a list of them as float64
BIG_IDS = [2647664492157856987, 12345678901234567890, 17654321987654321012, 5, 2**64 - 1]


@pytest.mark.parametrize("rnd", range(6))
def test_sampled_nodes_are_idle_nodes_exactly(rnd: int) -> None:
    evaluation = ClientEvaluation(0.5, 2, ConfigRecord({}), timeout=60.0)
    chosen = evaluation.sample(rnd, BIG_IDS, registered=len(BIG_IDS))
    assert len(chosen) == 2  # max(2, int(0.5 x 5)), as Flower's FedAvg counts
    assert set(chosen) <= set(BIG_IDS)
    assert chosen == sorted(set(chosen))


def test_sampling_is_seeded_by_the_round() -> None:
    evaluation = ClientEvaluation(0.4, 1, ConfigRecord({}), timeout=60.0)
    assert evaluation.sample(3, BIG_IDS, 5) == evaluation.sample(3, list(reversed(BIG_IDS)), 5)
    assert evaluation.sample(3, BIG_IDS[:1], 5) == BIG_IDS[:1]  # fewer idle than wanted: all


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5, 0.7, 0.99, 1.0])
@pytest.mark.parametrize("minimum", [0, 1, 2, 5])
@pytest.mark.parametrize("nodes", [1, 2, 5, 7, 20])
def test_the_count_is_flowers_fedavg_count(fraction: float, minimum: int, nodes: int) -> None:
    """Brute force: FedAvg.configure_evaluate's ``max(int(n x fraction), min_evaluate_nodes)``."""
    evaluation = ClientEvaluation(fraction, minimum, ConfigRecord({}), timeout=60.0)
    assert evaluation.wanted(nodes) == max(int(nodes * fraction), minimum)
