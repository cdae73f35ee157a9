"""The server's side of the abandon rule: R and theta per message, and the tally."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flower_edge import wire
from flower_edge.decision import decide
from flower_edge.errors import ConfigError
from strategies.abandon import AbandonPolicy
from strategies.config import AbandonConfig


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
        ({"alpha": 1.5}, r"alpha must be a number in \[0, 1\], got 1.5"),
        ({"quantile": -0.1}, r"quantile must be a number in \[0, 1\]"),
        ({"theta": -1.0}, r"theta must be a number >= 0 \(inf allowed\)"),
        ({"alpha": True}, "alpha must be a number"),
    ],
)
def test_bad_config(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        AbandonConfig(**kwargs)
