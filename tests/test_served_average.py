"""The served model: the moving average of the global models (``average_passes``).

The clients train from the global model itself, so a run with the average and one without
share every global model; the average is checked against a brute-force EMA of them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import ToyEdge, as_numpy, model
from flwr.app import ArrayRecord, MetricRecord

from flower_edge.errors import ConfigError, InputError
from flower_edge.server_opt import ModelAverage, average_decay
from strategies import (
    EdgeStrategy,
    InProcessGrid,
    ManualClock,
    ShareConfig,
    StopConfig,
    ValuationConfig,
    VirtualClock,
)

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="off")


def _brute_ema(models: list[list[np.ndarray]], beta: float) -> list[np.ndarray]:
    out = [np.asarray(a, dtype=np.float64) for a in models[0]]
    for t, x in enumerate(models[1:], start=2):
        b = min(beta, 1.0 - 1.0 / t)
        out = [
            b * e + (1 - b) * np.asarray(a, dtype=np.float64) for e, a in zip(out, x, strict=True)
        ]
    return out


def test_model_average_matches_a_brute_force_ema_and_keeps_counters() -> None:
    rng = np.random.default_rng(0)
    models = [
        [rng.normal(size=(3, 2)).astype(np.float32), np.array([t], np.int64)] for t in range(7)
    ]
    avg = ModelAverage(0.8)
    for t in range(1, 8):
        served = avg.update(models[t - 1])
        expected = _brute_ema([m[:1] for m in models[:t]], 0.8)[0]
        np.testing.assert_allclose(served[0], expected.astype(np.float32), rtol=1e-6)
        assert served[0].dtype == np.float32
        assert served[1].tolist() == [t - 1]  # a counter is served as the newest model has it
    assert avg.count == 7


@pytest.mark.parametrize(
    ("passes", "nodes", "per", "beta"),
    [
        (1.0, 20, 5, 0.75),
        (1.0, 100, 11, 0.9),
        (1.0, 200, 11, 1 - 1 / 19),
        (2.0, 4, 4, 0.5),
        (1.0, 3, 3, 0.0),
    ],
)
def test_average_decay_spans_the_passes(passes: float, nodes: int, per: int, beta: float) -> None:
    assert average_decay(passes, nodes, per) == pytest.approx(beta)


def test_bad_average_settings_name_the_field() -> None:
    with pytest.raises(InputError, match="average_passes"):
        average_decay(0.0, 10, 2)
    with pytest.raises(InputError, match="beta"):
        ModelAverage(1.0)
    with pytest.raises(ConfigError, match="average_passes"):
        EdgeStrategy(threshold=2, average_passes=-1.0)
    with pytest.raises(ConfigError, match="average_passes"):
        EdgeStrategy(threshold=2, average_passes=math.nan)


def _run(  # type: ignore[no-untyped-def]
    average: float | None,
    rounds: int = 6,
    directory: Path | None = None,
    resume: bool = False,
    threshold: int = 1,  # 2 updates per aggregation: P = 2 aggregations per pass
):
    seen: list[tuple[int, list[np.ndarray]]] = []

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        w = arrays["w"].numpy().astype(np.float64)
        seen.append((rnd, [arrays[k].numpy().copy() for k in arrays]))
        return MetricRecord({"accuracy": 1.0 / (1.0 + abs(float(w.mean()) - 2.0))})

    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    strategy = EdgeStrategy(
        threshold=threshold,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        aggregate="deltas",
        stop=StopConfig(),
        average_passes=average,
        checkpoint_dir=directory,
        resume=resume,
    )
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=evaluate)
    return strategy, result, seen


def test_the_served_model_is_the_ema_of_the_global_models_and_training_is_unchanged() -> None:
    plain, plain_result, plain_seen = _run(None)
    averaged, result, seen = _run(2.0)  # beta = 1 - 1 / (2 passes x 2) = 0.75
    # same training: the same participants and values (leave-one-out is on the global model)
    for a, b in zip(plain.history, averaged.history, strict=True):
        assert a.participants == b.participants
        assert a.values == pytest.approx(b.values)
    # the global models of the plain run: its last evaluation of each round
    globals_ = {}
    for rnd, arrays in plain_seen:
        globals_[rnd] = arrays
    models = [globals_[r] for r in range(1, 7)]
    expected = _brute_ema(models, 0.75)
    got = as_numpy(result.arrays)
    np.testing.assert_allclose(got[0], expected[0].astype(got[0].dtype), rtol=1e-6)
    assert got[1].tolist() == models[-1][1].tolist()  # the step counter of the newest global
    # each round evaluates the models without each update, the global model (for
    # leave-one-out), then the served model, last; the Result's metric is the served model's
    per_round: dict[int, list[list[np.ndarray]]] = {}
    for rnd, arrays in seen:
        per_round.setdefault(rnd, []).append(arrays)
    for r in range(1, 7):
        ema = _brute_ema(models[:r], 0.75)
        served = per_round[r][-1]
        np.testing.assert_allclose(served[0], ema[0].astype(served[0].dtype), rtol=1e-6)
        w = ema[0].astype(np.float32).astype(np.float64)
        want = 1.0 / (1.0 + abs(float(w.mean()) - 2.0))
        assert result.evaluate_metrics_serverapp[r]["accuracy"] == pytest.approx(want, rel=1e-5)
    assert plain_result.arrays is not None


def test_without_leave_one_out_the_global_model_is_not_evaluated() -> None:
    calls: list[int] = []

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        calls.append(rnd)
        return MetricRecord({"accuracy": 0.5})

    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=1,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        valuation=ValuationConfig(mode="off"),
        average_passes=1.0,
    )
    strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=evaluate)
    assert calls == [0, 1, 2, 3]  # the initial model, then one served model per round


def test_a_resumed_run_serves_the_same_average(tmp_path: Path) -> None:
    # K = n - 1: no job is in flight at a checkpoint, so a resumed run continues identically
    _, whole, _ = _run(3.0, rounds=6, threshold=3)
    _run(3.0, rounds=3, directory=tmp_path, threshold=3)
    _, resumed, _ = _run(3.0, rounds=6, directory=tmp_path, resume=True, threshold=3)
    for a, b in zip(as_numpy(whole.arrays), as_numpy(resumed.arrays), strict=True):
        assert a.tobytes() == b.tobytes()
    assert resumed.evaluate_metrics_serverapp == whole.evaluate_metrics_serverapp


def test_the_presets_serve_the_average_and_the_seed_does_not() -> None:
    assert EdgeStrategy.preset("edge", threshold=2).average_passes == 1.0
    assert EdgeStrategy.preset("edge-seed", threshold=2).average_passes is None
