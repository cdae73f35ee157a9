"""``update_too_far``: a finite but absurd update is refused, against a brute-force norm."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flower_edge.aggregation import update_too_far
from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, LoopConfig


def _brute(arrays: list[np.ndarray], reference: list[np.ndarray], ratio: float) -> bool:
    """True when the update is absurd: sum of squared differences, element by element."""
    moved = norm = 0.0
    for a, r in zip(arrays, reference, strict=True):
        if a.dtype.kind != "f":
            continue
        for x, y in zip(a.ravel().tolist(), r.ravel().tolist(), strict=True):
            moved += (x - y) ** 2
            norm += y * y
    return math.sqrt(moved) > ratio * max(math.sqrt(norm), 1.0)


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    reference = [rng.normal(size=(3, 4)).astype(np.float32), np.arange(3, dtype=np.int64)]
    scale = 10.0 ** rng.uniform(-2, 3)
    arrays = [
        (reference[0] + scale * rng.normal(size=(3, 4))).astype(np.float32),
        reference[1] + 1000,  # integer arrays are not measured
    ]
    ratio = float(rng.choice([1.0, 10.0, 100.0]))
    assert (update_too_far(arrays, reference, ratio) is not None) == _brute(
        arrays, reference, ratio
    )


def test_names_the_farthest_array_and_survives_overflow() -> None:
    reference = [np.zeros(4, np.float32), np.ones(2, np.float64)]
    arrays = [np.full(4, 1.0, np.float32), np.full(2, 1e300, np.float64)]  # squares overflow
    reason = update_too_far(arrays, reference, 1e6)
    assert reason is not None
    assert reason.startswith("array 1 moved inf")
    assert "max_update_ratio 1e+06" in reason
    assert update_too_far([np.full(4, 1.0, np.float32)], [np.zeros(4, np.float32)], 1e6) is None
    # a zero model: the bound is ratio x 1
    assert update_too_far([np.full(4, 3.0, np.float32)], [np.zeros(4, np.float32)], 5.0) is not None
    assert update_too_far([], [], 1.0) is None


def test_setting_validated_and_off() -> None:
    assert LoopConfig().max_update_ratio == 1e6
    assert LoopConfig(max_update_ratio=None).max_update_ratio is None
    for bad in (0, -1.0, math.nan, math.inf, "big"):
        with pytest.raises(ConfigError, match="max_update_ratio"):
            LoopConfig(max_update_ratio=bad)  # type: ignore[arg-type]
    EdgeStrategy(threshold=1, loop=LoopConfig(max_update_ratio=None))
