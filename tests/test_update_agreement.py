"""``benchmarks/update_agreement.py``'s statistic against a brute-force reference."""

import itertools

import numpy as np
import pytest
from conftest import load_benchmark


def _reference(deltas: list[np.ndarray]) -> float:
    pairs = list(itertools.permutations(range(len(deltas)), 2))
    cos = [
        float(deltas[i] @ deltas[j] / (np.linalg.norm(deltas[i]) * np.linalg.norm(deltas[j])))
        for i, j in pairs
    ]
    return sum(cos) / len(cos)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_mean_pairwise_cosine_is_the_mean_over_pairs(n: int) -> None:
    agreement = load_benchmark("update_agreement")
    rng = np.random.default_rng(n)
    deltas = [rng.normal(size=13) * rng.uniform(0.1, 5.0) for _ in range(n)]
    assert agreement.mean_pairwise_cosine(deltas) == pytest.approx(_reference(deltas))


def test_agreeing_and_unrelated_updates() -> None:
    agreement = load_benchmark("update_agreement")
    d = np.array([1.0, -2.0, 0.5])
    assert agreement.mean_pairwise_cosine([d, 3 * d, 0.1 * d]) == pytest.approx(1.0)
    assert agreement.mean_pairwise_cosine([d, -d]) == pytest.approx(-1.0)
    assert agreement.mean_pairwise_cosine([d]) == 1.0
