"""The strategies' combine rules on hand-built updates, against brute-force references."""

from __future__ import annotations

import math

import numpy as np
import pytest

from strategies import EdgeStrategy, FedBuff, ShareConfig
from strategies.records import Update


def _update(
    node: int, w: list[float], *, share: int, examples: int, delay: float, base: int
) -> Update:
    return Update(
        node_id=node,
        job_id=node,
        base_version=base,
        arrays=(np.asarray(w, dtype=np.float64),),
        num_examples=examples,
        share=share,
        delay=delay,
        received_at=delay,
        late=False,
        train_loss=None,
    )


UPDATES = [
    _update(1, [1.0, 2.0], share=30, examples=7, delay=0.0, base=0),
    _update(2, [5.0, -1.0], share=10, examples=50, delay=3.0, base=0),
    _update(3, [2.0, 4.0], share=0, examples=20, delay=8.0, base=0),  # share unknown
]


@pytest.mark.parametrize(
    ("weight_by", "coefficients"),
    [
        ("share", (30.0, 10.0, 20.0)),  # a share of 0 falls back to the reported examples
        ("num-examples", (7.0, 50.0, 20.0)),
        ("uniform", (1.0, 1.0, 1.0)),
    ],
)
def test_seed_weights_are_coefficient_times_decay(
    weight_by: str, coefficients: tuple[float, ...]
) -> None:
    # w_i = c_i * (1 + dt_i) ** -a; x = sum_i w_i x_i / sum_i w_i (seed 001, step 3)
    strategy = EdgeStrategy(
        threshold=2,
        decay="polynomial",
        decay_a=0.5,
        shares=ShareConfig(profile=False, weight_by=weight_by, rebalance="off"),  # type: ignore[arg-type]
    )
    reference = [np.zeros(2)]
    combined = strategy.combine(reference, UPDATES, 1, {0: reference})
    want = [c * (1.0 + u.delay) ** -0.5 for c, u in zip(coefficients, UPDATES, strict=True)]
    assert combined.weights == pytest.approx(want, rel=1e-12)
    mean = sum(w * u.arrays[0] for w, u in zip(want, UPDATES, strict=True)) / sum(want)
    np.testing.assert_allclose(combined.arrays[0], mean, rtol=1e-12)


def test_fedbuff_scales_the_mean_staleness_weighted_delta_by_server_lr() -> None:
    # x <- x + eta * (1/n) sum_i (x_i - x_base_i) / sqrt(1 + tau_i), tau_i = version - base_i
    bases = {0: [np.array([0.0, 0.0])], 2: [np.array([1.0, 1.0])]}
    current = [np.array([1.5, 0.5])]
    updates = [
        _update(1, [2.0, 2.0], share=1, examples=1, delay=1.0, base=2),  # tau 1
        _update(2, [4.0, -4.0], share=1, examples=1, delay=1.0, base=0),  # tau 3
    ]
    strategy = FedBuff(threshold=2, server_lr=0.3)
    combined = strategy.combine(current, updates, 3, bases)
    s = (1.0 / math.sqrt(2.0), 1.0 / math.sqrt(4.0))
    assert combined.weights == pytest.approx(s, rel=1e-12)
    step = s[0] * (np.array([2.0, 2.0]) - 1.0) + s[1] * np.array([4.0, -4.0])
    np.testing.assert_allclose(combined.arrays[0], current[0] + 0.3 * step / 2, rtol=1e-12)
