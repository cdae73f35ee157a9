"""Convergence criteria, valuation modes, logging and the synchronous Strategy methods."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, as_numpy, flwr_logs, model
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies import (
    EdgeStrategy,
    InProcessGrid,
    LoopConfig,
    ManualClock,
    ShareConfig,
    StopConfig,
    ValuationConfig,
    VirtualClock,
)
from strategies.convergence import ConvergenceStop

EQUAL = ShareConfig(profile=False, total_samples=400, rebalance="off")


def _edge(**options: object) -> EdgeStrategy:
    options.setdefault("shares", EQUAL)
    return EdgeStrategy(threshold=2, clock=VirtualClock(wall=ManualClock()), **options)  # type: ignore[arg-type]


def test_stops_when_the_target_metric_is_reached() -> None:
    strategy = _edge(stop=StopConfig(target=0.5))
    result = strategy.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=accuracy_fn()
    )
    accuracies = [h.metrics["accuracy"] for h in strategy.history]
    assert accuracies[-1] >= 0.5
    assert all(a < 0.5 for a in accuracies[:-1])
    assert len(strategy.history) < 50
    assert max(result.evaluate_metrics_serverapp) == len(strategy.history)


def test_stops_on_a_plateau_of_the_metric() -> None:
    def flat(_: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord({"accuracy": 0.5})

    strategy = _edge(stop=StopConfig(patience=2, min_delta=0.01))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=flat)
    # round 1 sets the best; rounds 2 and 3 do not improve it by more than 0.01
    assert len(strategy.history) == 3


def test_the_plateau_waits_for_passes_over_the_federation() -> None:
    def flat(_: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord({"accuracy": 0.5})

    # K = 2: 3 updates per aggregation; 3 passes over 4 nodes = ceil(3 * 4 / 3) = 4 > 2
    strategy = _edge(stop=StopConfig(patience=2, min_delta=0.01, patience_passes=3.0))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=flat)
    assert len(strategy.history) == 1 + 4
    # fewer passes than the patience: the patience rules
    strategy = _edge(stop=StopConfig(patience=2, min_delta=0.01, patience_passes=0.5))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=flat)
    assert len(strategy.history) == 1 + 2


@pytest.mark.parametrize("passes", [0.25, 0.5, 1.0, 2.0, 2.5, 3.0])
def test_effective_patience_against_counting(passes: float) -> None:
    for patience in (1, 5, 20):
        config = StopConfig(patience=patience, patience_passes=passes)
        for nodes in range(1, 60):
            for per in range(1, 12):
                # brute force: the fewest aggregations whose updates cover `passes` passes
                count = next(a for a in range(10_000) if a * per >= passes * nodes)
                assert config.effective_patience(nodes, per) == max(patience, count)
    assert StopConfig(patience_passes=2.0).effective_patience(10, 3) is None
    assert StopConfig(patience=7).effective_patience(1000, 1) == 7


def test_patience_passes_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="patience_passes must be > 0, got 0"):
        StopConfig(patience=3, patience_passes=0)


def test_the_edge_strategy_scales_its_default_plateau() -> None:
    stop = EdgeStrategy(threshold=2).stop
    assert (stop.patience, stop.patience_passes, stop.window_passes) == (20, 4.0, 1.0)
    # mnist1d-100 (K = 10): a 10-aggregation window, 37 aggregations of patience
    assert stop.effective_window(100, 11) == 10
    assert stop.effective_patience(100, 11) == 37


def _brute_plateau(metrics: list[float], window: int, patience: int, min_delta: float) -> int:
    """The aggregation (1-based) at which the windowed plateau rule stops; 0 if it never does."""
    best = None
    since = 0
    for i in range(len(metrics)):
        if i + 1 < window:
            continue
        mean = sum(metrics[i + 1 - window : i + 1]) / window
        if best is None or mean - best > min_delta:
            best, since = mean, 0
        else:
            since += 1
            if since >= patience:
                return i + 1
    return 0


@pytest.mark.parametrize("seed", range(6))
def test_windowed_plateau_against_brute_force(seed: int) -> None:
    from strategies.convergence import ConvergenceStop

    rng = np.random.default_rng(seed)
    # a noisy, slowly rising metric that flattens out: the shape of non-IID runs
    n = 120
    trend = 0.6 * (1 - np.exp(-np.arange(n) / 25.0))
    metrics = [float(m) for m in trend + rng.normal(0.0, 0.08, n)]
    for window_passes, patience_passes in ((None, 2.0), (1.0, 2.0), (1.0, 4.0), (2.5, 3.0)):
        config = StopConfig(
            patience=3,
            min_delta=0.005,
            patience_passes=patience_passes,
            window_passes=window_passes,
        )
        stopper = ConvergenceStop(config, higher_is_better=True, num_rounds=n, time_budget=None)
        stopper.size_for(30, 4)
        stopped = 0
        for i, m in enumerate(metrics):
            stopper.observe(m)
            if stopper.reason:
                stopped = i + 1
                break
        window = config.effective_window(30, 4)
        patience = config.effective_patience(30, 4)
        assert patience is not None
        assert stopped == _brute_plateau(metrics, window, patience, 0.005)


def test_a_window_of_means_outlasts_one_lucky_high() -> None:
    from strategies.convergence import ConvergenceStop

    # a lucky 0.28 early, then noise around a mean that keeps rising: not a plateau
    metrics = [0.1, 0.28, 0.12, 0.15, 0.2, 0.14, 0.22, 0.18, 0.24, 0.2, 0.26, 0.22, 0.27, 0.25]
    raw = ConvergenceStop(
        StopConfig(patience=6), higher_is_better=True, num_rounds=99, time_budget=None
    )
    windowed = ConvergenceStop(
        StopConfig(patience=6, window_passes=1.0),
        higher_is_better=True,
        num_rounds=99,
        time_budget=None,
    )
    windowed.size_for(8, 2)  # a window of 4 aggregations
    for m in metrics:
        raw.observe(m)
        windowed.observe(m)
    assert raw.reason.startswith("plateau")
    assert windowed.reason == ""
    assert windowed.best == pytest.approx(sum(metrics[-4:]) / 4)


def test_window_passes_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="window_passes must be > 0, got -1"):
        StopConfig(patience=3, window_passes=-1)
    assert StopConfig(patience=3).effective_window(100, 1) == 1


def test_a_loss_metric_counts_lower_as_better() -> None:
    strategy = _edge(
        valuation=ValuationConfig(metric_key="loss", higher_is_better=False),
        stop=StopConfig(target=1.0),
    )
    strategy.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=accuracy_fn()
    )
    losses = [h.metrics["loss"] for h in strategy.history]
    assert losses[-1] <= 1.0
    assert all(loss > 1.0 for loss in losses[:-1])
    record = strategy.history[0]
    assert sum(record.values) == pytest.approx(1.0)


def test_stops_at_the_time_budget_of_the_clock() -> None:
    strategy = _edge(loop=LoopConfig(time_budget=12.0))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=100)
    assert strategy.history
    assert strategy.history[-1].time < 12.0 + 10.5
    assert len(strategy.history) < 100


def test_first_order_valuation_uses_one_gradient() -> None:
    calls: list[int] = []

    def gradient(arrays: ArrayRecord) -> list[np.ndarray]:
        calls.append(1)
        w = arrays["w"].numpy().astype(np.float64)
        # loss = mean((w - 2)^2) / 2 -> gradient (w - 2) / 3
        return [(w - 2.0) / 3.0, np.zeros(1)]

    strategy = _edge(valuation=ValuationConfig(mode="first-order", gradient_fn=gradient))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=accuracy_fn())
    assert len(calls) == 2
    for record in strategy.history:
        assert sum(record.values) == pytest.approx(1.0)
        assert any(c != 0.0 for c in record.contributions)


def test_valuation_off_gives_equal_values_without_extra_evaluations() -> None:
    calls: list[int] = []
    evaluate = accuracy_fn()

    def counting(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        calls.append(rnd)
        return evaluate(rnd, arrays)

    strategy = _edge(valuation=ValuationConfig(mode="off"))
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=counting)
    assert calls == [0, 1, 2]
    assert strategy.history[0].values == pytest.approx((1 / 3, 1 / 3, 1 / 3))


def test_exact_leave_one_out_evaluates_each_participant_once() -> None:
    calls: list[int] = []
    evaluate = accuracy_fn()

    def counting(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        calls.append(rnd)
        return evaluate(rnd, arrays)

    strategy = _edge()
    strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1, evaluate_fn=counting)
    assert calls == [0, 1, 1, 1, 1]  # initial, new global, then one without each of 3


def test_summary_and_one_log_line_per_aggregation() -> None:
    strategy = _edge()
    with flwr_logs() as caplog:
        strategy.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=accuracy_fn()
        )
    assert "aggregates when buffered updates > K = 2" in caplog.text
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[edge round")]
    assert len(lines) == 2
    assert "participants=[1004, 1003, 1002]" in lines[0]
    assert "staleness=" in lines[0]
    assert "values=" in lines[0]


def test_synchronous_strategy_methods_work_for_flowers_own_loop() -> None:
    grid = InProcessGrid(ToyEdge(), 2)
    strategy = _edge()

    cfg = ConfigRecord(
        {wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SLICE_BUDGET: 0.0, wire.SAMPLE_SHARE: 10}
    )
    messages = list(strategy.configure_train(1, model(0.0), cfg, grid))
    assert [m.metadata.dst_node_id for m in messages] == [1001, 1002]
    got = grid.send_and_receive(messages)
    arrays, metrics = strategy.aggregate_train(1, got)
    assert arrays is not None
    assert metrics is not None
    assert metrics["participants"] == 2
    # both trained 10 samples towards 1 and 2: mean of 0.5 * 1 and 0.5 * 2
    np.testing.assert_allclose(as_numpy(arrays)[0], np.full(3, 0.75, np.float32))
    assert list(strategy.configure_evaluate(1, model(0.0), cfg, grid)) == []
    assert strategy.aggregate_evaluate(1, []) is None


def test_batched_leave_one_out_matches_one_call_per_model() -> None:
    evaluate = accuracy_fn()
    batches: list[int] = []

    def many(rnd: int, records: list[ArrayRecord]) -> list[MetricRecord]:
        batches.append(len(records))
        return [evaluate(rnd, r) for r in records]

    plain = _edge()
    plain.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=evaluate)
    batched = _edge(valuation=ValuationConfig(evaluate_many_fn=many))
    batched.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=2, evaluate_fn=evaluate)
    assert batches == [3, 3]
    assert [h.values for h in batched.history] == [h.values for h in plain.history]


def test_a_failing_valuation_falls_back_to_equal_values() -> None:
    def short(rnd: int, records: list[ArrayRecord]) -> list[MetricRecord]:
        return []

    strategy = _edge(valuation=ValuationConfig(evaluate_many_fn=short))
    with flwr_logs() as caplog:
        strategy.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1, evaluate_fn=accuracy_fn()
        )
    assert strategy.history[0].values == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert "evaluate_many_fn returned 0 results for 3 models" in caplog.text


def test_the_stop_may_read_another_metric_than_the_values() -> None:
    """Values (and drop_worst) on a loss, the target on the reported accuracy."""
    strategy = _edge(
        valuation=ValuationConfig(metric_key="loss", higher_is_better=False, drop_worst=True),
        stop=StopConfig(target=0.5, metric_key="accuracy"),
    )
    strategy.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=50, evaluate_fn=accuracy_fn()
    )
    accuracies = [h.metrics["accuracy"] for h in strategy.history]
    assert accuracies[-1] >= 0.5
    assert all(a < 0.5 for a in accuracies[:-1])
    assert len(strategy.history) < 50


def test_a_stop_metric_that_evaluate_fn_lacks_is_an_error_before_any_message() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = _edge(stop=StopConfig(target=0.5, metric_key="f1"))
    with pytest.raises(ConfigError, match=r"no metric 'f1' \(StopConfig metric_key\)"):
        strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
    assert grid.pushed == []


@pytest.mark.parametrize("higher_is_better", [True, False])
def test_a_nan_metric_never_becomes_the_best(higher_is_better: bool) -> None:
    # a NaN first metric was kept as the best: nothing compares above NaN, so an improving
    # run was stopped as a plateau after `patience` aggregations
    stop = ConvergenceStop(
        StopConfig(patience=3), higher_is_better=higher_is_better, num_rounds=100, time_budget=None
    )
    step = 0.1 if higher_is_better else -0.1
    stop.observe(float("nan"))
    for i in range(1, 8):
        stop.observe(1.0 + i * step)
        assert stop.reason == ""
    assert stop.best == pytest.approx(1.0 + 7 * step)
    # a NaN after a best counts as no improvement (a diverged run still stops)
    for _ in range(3):
        stop.observe(float("nan"))
    assert stop.kind == "convergence"


def test_a_window_of_mixed_infinities_never_becomes_the_best() -> None:
    stop = ConvergenceStop(
        StopConfig(patience=2, window_passes=1.0),
        higher_is_better=True,
        num_rounds=100,
        time_budget=None,
    )
    stop.size_for(nodes=2, per_aggregation=1)  # a window of two metrics
    for metric in (float("inf"), float("-inf"), 0.5, 0.6, 0.7, 0.8):  # first mean: NaN
        stop.observe(metric)
    assert stop.reason == ""
    assert stop.best == pytest.approx(0.75)
