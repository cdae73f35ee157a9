"""``ValuationConfig(drop_worst=True)``: an aggregation leaves out its worst update.

Checked against a brute-force reference: every leave-one-out mean of the first aggregation,
scored with the same ``evaluate_fn``.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, as_numpy, flwr_logs, model, virtual
from flwr.app import ArrayRecord, MetricRecord

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, ValuationConfig
from strategies.evaluation import ServerEvaluation, serve_better_of
from strategies.inprocess import InProcessGrid


def _first_aggregation(
    drop_worst: bool, goal: float, valuation: ValuationConfig | None = None
) -> tuple[EdgeStrategy, ToyEdge, object]:
    """Run one aggregation of 3 updates (2.0, 1.5, 1.0) valued on ``accuracy_fn(goal)``."""
    toy = ToyEdge()
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        decay="constant",
        valuation=valuation or ValuationConfig(drop_worst=drop_worst),
    )
    result = strategy.start(
        InProcessGrid(toy, 4), model(0.0), num_rounds=1, evaluate_fn=accuracy_fn(goal)
    )
    return strategy, toy, result


def _reference(toy: ToyEdge, strategy: EdgeStrategy, goal: float) -> tuple[np.ndarray, int | None]:
    """Brute force: the equal-weight mean, and the best leave-one-out mean if it scores higher."""
    record = strategy.history[0]
    models = [
        toy.returned[(n, j)][0].astype(np.float64)
        for n, j in zip(record.participants, record.job_ids, strict=True)
    ]

    def score(w: np.ndarray) -> float:
        return 1.0 / (1.0 + abs(float(w.astype(np.float32).mean()) - goal))

    full = np.mean(models, axis=0)
    without = [np.mean(models[:i] + models[i + 1 :], axis=0) for i in range(len(models))]
    best = max(range(len(models)), key=lambda i: score(without[i]))
    if score(without[best]) > score(full):
        return without[best], best
    return full, None


def test_the_worst_update_is_left_out_as_brute_force_says() -> None:
    goal = 1.0  # the fastest node (partition 3, target 4) pulls the mean past it
    strategy, toy, result = _first_aggregation(True, goal)
    expected, dropped = _reference(toy, strategy, goal)
    assert dropped is not None
    record = strategy.history[0]
    assert toy.returned  # the updates the reference reads
    np.testing.assert_allclose(as_numpy(result.arrays)[0], expected.astype(np.float32), rtol=1e-6)  # type: ignore[attr-defined]
    assert record.weights[dropped] == 0.0
    assert sum(record.weights) == pytest.approx(1.0)
    assert result.train_metrics_clientapp[1]["dropped-updates"] == 1  # type: ignore[attr-defined]
    # the values are the seed's, those of the full aggregate: the same as without dropping
    plain, _, _ = _first_aggregation(False, goal)
    assert record.values == pytest.approx(plain.history[0].values)
    assert record.values[dropped] == 0.0  # its removal helps: a negative contribution


def test_nothing_is_dropped_when_every_update_helps() -> None:
    goal = 1.5  # the mean of the three updates (2.0, 1.5, 1.0): any removal moves away
    strategy, toy, result = _first_aggregation(True, goal)
    expected, dropped = _reference(toy, strategy, goal)
    assert dropped is None
    np.testing.assert_allclose(as_numpy(result.arrays)[0], expected.astype(np.float32), rtol=1e-6)  # type: ignore[attr-defined]
    assert result.train_metrics_clientapp[1]["dropped-updates"] == 0  # type: ignore[attr-defined]
    assert 0.0 not in strategy.history[0].weights


def test_the_round_log_names_the_dropped_node() -> None:
    with flwr_logs() as caplog:
        strategy, _, _ = _first_aggregation(True, 1.0)
    record = strategy.history[0]
    node = record.participants[record.weights.index(0.0)]
    assert f"dropped=node {node} (drop_worst)" in caplog.text


def test_a_loss_metric_drops_the_update_that_raises_it() -> None:
    by_loss = ValuationConfig(metric_key="loss", higher_is_better=False, drop_worst=True)
    strategy, _, _ = _first_aggregation(True, 1.0, by_loss)
    by_accuracy, _, _ = _first_aggregation(True, 1.0)
    assert strategy.history[0].weights == by_accuracy.history[0].weights  # same order, same pick


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mode": "off", "drop_worst": True}, "drop_worst needs the exact leave-one-out"),
        ({"drop_worst": 1}, "drop_worst must be"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ValuationConfig(**options)  # type: ignore[arg-type]


def test_a_nan_full_aggregate_drops_the_update_whose_removal_scores() -> None:
    # the full aggregate (mean 1.5) and the model without the 1.5-update score a NaN loss,
    # as a diverged model does; NaN compared below nothing, so nothing was dropped
    def evaluate(_: int, arrays: ArrayRecord) -> MetricRecord:
        mean = float(arrays["w"].numpy().astype(np.float64).mean())
        return MetricRecord({"loss": math.nan if abs(mean - 1.5) < 1e-6 else abs(mean - 1.0)})

    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        decay="constant",
        valuation=ValuationConfig(metric_key="loss", higher_is_better=False, drop_worst=True),
    )
    result = strategy.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1, evaluate_fn=evaluate
    )
    record = strategy.history[0]
    dropped = [i for i, w in enumerate(record.weights) if w == 0.0]
    assert len(dropped) == 1
    kept = [w for w in as_numpy(result.arrays)[0].astype(np.float64)]
    assert np.allclose(kept, 1.25)  # without the 2.0-update: loss 0.25, the best


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_serve_better_serves_the_global_model_when_the_average_scores_nan(
    higher_is_better: bool,
) -> None:
    evaluation = ServerEvaluation(
        None,
        ("w",),
        ValuationConfig(metric_key="m", higher_is_better=higher_is_better),
        enabled=True,
        name="edge",
    )
    loop = SimpleNamespace(
        evaluation=evaluation, global_arrays=[np.ones(2)], served=None, serving_global=False
    )
    glob = MetricRecord({"m": 0.5})
    out = serve_better_of(loop, 1, MetricRecord({"m": math.nan}), glob, None)  # type: ignore[arg-type]
    assert out is glob
    assert loop.serving_global
    # and the reverse: a NaN global model never wins over a scored average
    loop.serving_global = False
    average = MetricRecord({"m": 0.5})
    assert serve_better_of(loop, 1, average, MetricRecord({"m": math.nan}), None) is average  # type: ignore[arg-type]
    assert not loop.serving_global
