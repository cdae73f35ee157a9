"""flower_edge.server_opt: each step rule against a brute-force reference and hand cases."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from flower_edge.errors import InputError
from flower_edge.server_opt import (
    ServerOptimizer,
    StepSum,
    UpdateCache,
    staleness_scale,
    work_normalised_step,
)

SHAPES = [(3, 2), (4,)]


def _model(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.normal(size=s) for s in SHAPES]


def _close(a: Sequence[Any], b: Sequence[Any], tol: float = 1e-12) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol)


# ------------------------------------------------------------------ FedNova


def test_work_normalised_step_by_hand() -> None:
    # D = 3 after 1 step and D = 3 after 3 steps: per-step 3 and 1, mean 2, tau_eff 2 -> 4
    step, tau_eff = work_normalised_step([[np.array([3.0])], [np.array([3.0])]], [1, 1], [1, 3])
    assert tau_eff == 2.0
    _close(step, [np.array([4.0])])


def test_work_normalised_step_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 6))
        deltas = [_model(rng) for _ in range(n)]
        weights = rng.uniform(0.1, 3.0, size=n).tolist()
        work = rng.uniform(0.5, 40.0, size=n).tolist()
        step, tau_eff = work_normalised_step(deltas, weights, work)
        w = np.array(weights) / sum(weights)
        tau_ref = float(np.dot(w, work))
        ref = [
            tau_ref * sum(w[i] * deltas[i][k] / work[i] for i in range(n))
            for k in range(len(SHAPES))
        ]
        assert math.isclose(tau_eff, tau_ref, rel_tol=1e-12)
        _close(step, ref)


def test_work_normalised_step_equal_work_is_the_weighted_mean() -> None:
    rng = np.random.default_rng(1)
    deltas = [_model(rng) for _ in range(4)]
    weights = [1.0, 2.0, 3.0, 4.0]
    step, _ = work_normalised_step(deltas, weights, [7.0] * 4)
    ref = [sum(w * d[k] for w, d in zip(weights, deltas, strict=True)) / 10.0 for k in range(2)]
    _close(step, ref)


@pytest.mark.parametrize(
    ("weights", "work", "match"),
    [
        ([1.0], [0.0], r"work\[0\] must be (a finite number )?> 0"),
        ([1.0], [math.nan], r"work\[0\] must be (a finite number )?> 0"),
        ([-1.0], [1.0], r"weights\[0\] must be >= 0, got -1.0"),
        ([0.0], [1.0], "weights must not all be 0"),
        ([1.0, 1.0], [1.0], r"weights must have one entry per update \(1\), got 2"),
        ([1.0], [1.0, 2.0], r"work must have one entry per update \(1\), got 2"),
    ],
)
def test_work_normalised_step_errors(weights: list[float], work: list[float], match: str) -> None:
    with pytest.raises(InputError, match=match):
        work_normalised_step([[np.ones(2)]], weights, work)


# ------------------------------------------------------------------ staleness


def test_staleness_scale() -> None:
    assert staleness_scale([0, 3]) == pytest.approx(0.75)
    assert staleness_scale([0, 0, 0]) == 1.0
    with pytest.raises(InputError, match=r"staleness\[1\] must be an integer >= 0, got -1"):
        staleness_scale([0, -1])
    with pytest.raises(InputError, match="at least one update"):
        staleness_scale([])


# ------------------------------------------------------------------ CA2FL


def _ca2fl_reference(
    rounds: list[list[tuple[int, list[np.ndarray], float]]], num_nodes: int, divisor: str
) -> list[list[Any]]:
    """CA2FL written out: a dict of cached deltas, sums recomputed from scratch every round."""
    cache: dict[int, list[np.ndarray]] = {}
    steps = []
    for buffer in rounds:
        if cache:
            n = len(cache) if divisor == "seen" else max(num_nodes, len(cache))
            h_bar = [sum(c[k] for c in cache.values()) / n for k in range(len(SHAPES))]
        else:
            h_bar = [np.zeros(s) for s in SHAPES]
        total = sum(w for _, _, w in buffer)
        step: list[Any] = []
        for k in range(len(SHAPES)):
            news = sum(
                w * (d[k] - (cache[node][k] if node in cache else 0.0)) for node, d, w in buffer
            )
            step.append(h_bar[k] + news / total)
        steps.append(step)
        for node, d, _ in buffer:
            cache[node] = d
    return steps


@pytest.mark.parametrize("divisor", ["nodes", "seen"])
def test_update_cache_matches_brute_force(divisor: str) -> None:
    rng = np.random.default_rng(2)
    num_nodes = 6
    rounds = []
    for _ in range(12):
        nodes = rng.choice(num_nodes, size=int(rng.integers(1, 4)), replace=False)
        rounds.append([(int(i), _model(rng), float(rng.uniform(0.2, 2.0))) for i in nodes])
    cache = UpdateCache(num_nodes, divisor=divisor)  # type: ignore[arg-type]
    got = []
    for buffer in rounds:
        got.append(
            cache.calibrated_step(
                [d for _, d, _ in buffer], [w for _, _, w in buffer], [i for i, _, _ in buffer]
            )
        )
        for node, d, _ in buffer:
            cache.store(node, d)
    for g, r in zip(got, _ca2fl_reference(rounds, num_nodes, divisor), strict=True):
        _close(g, r, 1e-10)


def test_update_cache_first_round_is_the_weighted_mean_and_full_cache_is_fedavg() -> None:
    rng = np.random.default_rng(3)
    cache = UpdateCache(2)
    d0, d1 = _model(rng), _model(rng)
    step = cache.calibrated_step([d0, d1], [1.0, 3.0], [0, 1])
    _close(step, [(a + 3 * b) / 4 for a, b in zip(d0, d1, strict=True)])
    cache.store(0, d0)
    cache.store(1, d1)
    # node 0 again, with the same delta: no news, the step is the mean over both nodes
    step = cache.calibrated_step([d0], [1.0], [0])
    _close(step, [(a + b) / 2 for a, b in zip(d0, d1, strict=True)])


def test_update_cache_state_round_trip_and_errors() -> None:
    rng = np.random.default_rng(4)
    cache = UpdateCache(3)
    for node in (2, 0, 2):
        cache.store(node, _model(rng))
    clone = UpdateCache(3)
    clone.load(cache.state())
    assert len(clone) == 2
    assert 0 in clone
    assert 1 not in clone
    like = _model(rng)
    _close(clone.mean(like), cache.mean(like))
    with pytest.raises(InputError, match="num_nodes must be an integer >= 1, got 0"):
        UpdateCache(0)
    with pytest.raises(InputError, match="divisor must be one of nodes, seen, got 'all'"):
        UpdateCache(2, divisor="all")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"node_ids must have one entry per update \(1\), got 2"):
        cache.calibrated_step([_model(rng)], [1.0], [0, 1])


# ------------------------------------------------------------------ server optimizers


def test_momentum_matches_brute_force() -> None:
    rng = np.random.default_rng(5)
    steps = [_model(rng) for _ in range(6)]
    opt = ServerOptimizer("momentum", beta1=0.9)
    m = [np.zeros(s) for s in SHAPES]
    for s in steps:
        m = [0.9 * mi + si for mi, si in zip(m, s, strict=True)]
        peeked = opt.peek(s)
        _close(opt.apply(s), m)
        _close(peeked, m)


def test_adam_matches_brute_force() -> None:
    rng = np.random.default_rng(6)
    steps = [_model(rng) for _ in range(6)]
    opt = ServerOptimizer("adam", beta1=0.9, beta2=0.99, tau=1e-3)
    m = [np.zeros(s) for s in SHAPES]
    v = [np.zeros(s) for s in SHAPES]
    for s in steps:
        m = [0.9 * mi + 0.1 * si for mi, si in zip(m, s, strict=True)]
        v = [0.99 * vi + 0.01 * si**2 for vi, si in zip(v, s, strict=True)]
        _close(opt.apply(s), [mi / (np.sqrt(vi) + 1e-3) for mi, vi in zip(m, v, strict=True)])


def test_bias_corrected_adam_matches_brute_force_and_resumes() -> None:
    rng = np.random.default_rng(8)
    steps = [_model(rng) for _ in range(6)]
    opt = ServerOptimizer("adam", beta1=0.5, beta2=0.9, tau=1e-3, bias_correction=True)
    m = [np.zeros(s) for s in SHAPES]
    v = [np.zeros(s) for s in SHAPES]
    for t, s in enumerate(steps, start=1):
        m = [0.5 * mi + 0.5 * si for mi, si in zip(m, s, strict=True)]
        v = [0.9 * vi + 0.1 * si**2 for vi, si in zip(v, s, strict=True)]
        want = [
            (mi / (1 - 0.5**t)) / (np.sqrt(vi / (1 - 0.9**t)) + 1e-3)
            for mi, vi in zip(m, v, strict=True)
        ]
        _close(opt.peek(s), want)
        _close(opt.apply(s), want)
        if t == 3:  # a checkpoint here: the clone goes on with the same t
            clone = ServerOptimizer("adam", beta1=0.5, beta2=0.9, bias_correction=True)
            clone.load(opt.state())
    assert opt.steps == 6
    for s in steps[3:]:
        last = clone.apply(s)
    _close(last, want)


def test_sign_is_the_sign_of_the_step_and_counts_steps() -> None:
    rng = np.random.default_rng(9)
    s = _model(rng)
    s[0].flat[0] = 0.0  # sign(0) = 0: a coordinate that did not move stays
    opt = ServerOptimizer("sign")
    want = [np.sign(a) for a in s]
    _close(opt.peek(s), want)
    assert opt.steps == 0
    _close(opt.apply(s), want)
    assert opt.steps == 1
    assert opt.state() == {"t": [np.array(1.0)]}


def test_sgd_is_the_step_and_peek_keeps_the_state() -> None:
    rng = np.random.default_rng(7)
    s = _model(rng)
    _close(ServerOptimizer().apply(s), s)
    opt = ServerOptimizer("momentum")
    opt.apply(s)
    before = opt.state()
    for _ in range(3):
        opt.peek(_model(rng))
    _close(opt.state()["m"], before["m"])
    clone = ServerOptimizer("momentum")
    clone.load(opt.state())
    t = _model(rng)
    _close(clone.apply(t), opt.apply(t))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kind": "lamb"}, "kind must be one of sgd, momentum, adam, sign, rprop, got 'lamb'"),
        ({"beta1": 1.0}, r"beta1 must be in \[0, 1\), got 1.0"),
        ({"beta2": -0.1}, r"beta2 must be in \[0, 1\), got -0.1"),
        ({"tau": 0.0}, "tau must be > 0, got 0.0"),
    ],
)
def test_server_optimizer_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        ServerOptimizer(**kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ StepSum (leave-one-out)


def _rule(
    x: list[np.ndarray],
    terms: list[list[np.ndarray]],
    weights: list[float],
    lr: float,
    offset: list[np.ndarray],
    scale: float,
    opt: ServerOptimizer,
) -> list[np.ndarray]:
    total = sum(weights)
    mean = [
        sum(w * t[k] for w, t in zip(weights, terms, strict=True)) / total for k in range(len(x))
    ]
    direction = opt.peek([o + scale * m for o, m in zip(offset, mean, strict=True)])
    return [xi + lr * d for xi, d in zip(x, direction, strict=True)]


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_step_sum_leave_one_out_is_the_rule_without_the_update(kind: str) -> None:
    rng = np.random.default_rng(8)
    x = _model(rng)
    opt = ServerOptimizer(kind)  # type: ignore[arg-type]
    opt.apply(_model(rng))  # some momentum already
    terms = [_model(rng) for _ in range(4)]
    weights = [0.5, 40.0, 1.5, 3e-3]  # weights above and below the sum's internal scaling
    offset = _model(rng)
    total = StepSum(x, 0.3, offset=offset, scale=2.5, direction_fn=opt.peek)
    for i, (t, w) in enumerate(zip(terms, weights, strict=True)):
        total.add(i, t, w)
    _close(total.mean(), _rule(x, terms, weights, 0.3, offset, 2.5, opt), 1e-10)
    for i in range(4):
        keep = [j for j in range(4) if j != i]
        ref = _rule(x, [terms[j] for j in keep], [weights[j] for j in keep], 0.3, offset, 2.5, opt)
        _close(total.mean_without(i), ref, 1e-10)
        _close(list(total.update(i)), _rule(x, [terms[i]], [1.0], 0.3, offset, 2.5, opt), 1e-10)


def test_step_sum_casts_to_the_model_dtypes_and_checks_lr() -> None:
    x: list[np.ndarray] = [np.zeros(3, dtype=np.float32), np.array([4, 5], dtype=np.int64)]
    total = StepSum(x, 1.0)
    total.add("a", [np.ones(3, dtype=np.float32), np.array([2, 2], dtype=np.int64)], 1.0)
    out = total.mean()
    assert out[0].dtype == np.float32
    assert out[1].dtype == np.int64
    np.testing.assert_array_equal(out[1], [6, 7])
    with pytest.raises(InputError, match="lr must be > 0, got 0.0"):
        StepSum(x, 0.0)
