"""``benchmarks/explore_edge.py``'s ``fedbuff_sign`` variant against a brute-force reference.

FedBuff given the edge preset's server sign step: ``x + lr * mean_i s(tau_i) * sign(s)`` with
``s = (1/K) sum_i s(tau_i) (x_i - x_base_i)`` and ``s(tau) = 1 / sqrt(1 + tau)``; integer
tensors take ``s`` itself.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
from conftest import load_benchmark

from strategies.records import Update


def _update(node: int, base: int, arrays: list[np.ndarray]) -> Update:
    return Update(
        node_id=node,
        job_id=node,
        base_version=base,
        arrays=tuple(arrays),
        num_examples=10,
        share=10,
        delay=0.1,
        received_at=1.0,
        late=False,
        train_loss=None,
    )


def test_fedbuff_sign_matches_brute_force() -> None:
    explore = load_benchmark("explore_edge")
    rng = np.random.default_rng(0)
    bases = {
        v: [rng.normal(size=(3, 4)).astype(np.float32), np.arange(5, dtype=np.int64) * v]
        for v in (3, 5)
    }
    version = 5
    global_arrays = [rng.normal(size=(3, 4)).astype(np.float32), np.arange(5, dtype=np.int64) * 7]
    updates = [
        _update(
            i,
            base,
            [
                bases[base][0] + rng.normal(size=(3, 4)).astype(np.float32),
                bases[base][1] + np.int64(i + 2),
            ],
        )
        for i, base in enumerate((3, 5, 5))
    ]
    strategy = SimpleNamespace()
    explore._change_fedbuff(strategy, {"fedbuff_sign": 0.05})
    combined = strategy.combine(global_arrays, updates, version, bases)

    taus = [version - u.base_version for u in updates]
    weights = [1.0 / math.sqrt(1.0 + t) for t in taus]
    lr = 0.05 * sum(weights) / len(weights)
    for k, ref in enumerate(global_arrays):
        step = np.zeros(ref.shape)
        for u, w in zip(updates, weights, strict=True):
            step += w * (u.arrays[k].astype(np.float64) - bases[u.base_version][k])
        step /= len(updates)
        if k == 0:
            want = (ref.astype(np.float64) + lr * np.sign(step)).astype(np.float32)
        else:
            want = np.rint(ref + step).astype(np.int64)
        np.testing.assert_allclose(combined.arrays[k], want, rtol=0, atol=1e-6)
        assert combined.arrays[k].dtype == ref.dtype
    assert combined.weights == tuple(weights)
    # the float step really moves every coordinate by the same amount
    moved = np.abs(combined.arrays[0].astype(np.float64) - global_arrays[0])
    np.testing.assert_allclose(moved, lr, rtol=1e-5)
