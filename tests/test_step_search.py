"""``ValuationConfig(step_search=...)``: the server scales its step by the best factor.

Checked against a brute-force reference: every factor's model ``x + c (x_new - x)`` is
scored by hand and the best one (``c = 1`` on ties, a NaN never) must be the global model;
integer tensors keep the aggregate's values; the values stay those of the unscaled aggregate;
and in a whole run the last ``evaluate_fn`` call of each round still scores the served model.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import Recorder, check_last_calls, edge_preset_on_toy, flwr_logs, model
from flwr.app import ArrayRecord, MetricRecord

from flower_edge.errors import ConfigError
from strategies import ValuationConfig
from strategies.evaluation import ServerEvaluation, Step, scaled_move
from strategies.records import Combined

KEYS = ("w", "steps")


def _closeness(goal: float, nan_for: float | None = None):  # type: ignore[no-untyped-def]
    """An evaluate_fn scoring 1 / (1 + |mean(w) - goal|); NaN where the mean is ``nan_for``."""
    seen: list[np.ndarray] = []

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        w = arrays["w"].numpy().astype(np.float64)
        seen.append(w)
        if nan_for is not None and math.isclose(float(w.mean()), nan_for, abs_tol=1e-6):
            return MetricRecord({"accuracy": math.nan})
        return MetricRecord({"accuracy": 1.0 / (1.0 + abs(float(w.mean()) - goal))})

    evaluate.seen = seen  # type: ignore[attr-defined]
    return evaluate


def _step(goal: float, factors: tuple[float, ...], nan_for: float | None = None) -> Step:
    evaluation = ServerEvaluation(
        _closeness(goal, nan_for),
        KEYS,
        ValuationConfig(step_search=factors),
        enabled=True,
        name="t",
    )
    base = [np.full(3, 1.0, np.float32), np.array([4], np.int64)]
    new = [np.full(3, 2.0, np.float32), np.array([7], np.int64)]
    return Step.of(evaluation, Combined(new, (1.0,), None), 1, base)


def _brute(goal: float, factors: tuple[float, ...]) -> float:
    """The factor whose model 1 + c is closest to ``goal``; 1 unless another is strictly closer."""
    best, best_c = abs(2.0 - goal), 1.0
    for c in factors:
        if abs(1.0 + c - goal) < best:
            best, best_c = abs(1.0 + c - goal), c
    return best_c


@pytest.mark.parametrize("goal", [0.5, 1.6, 2.0, 2.4, 2.9, 3.6, 4.0, 9.0])
def test_the_global_model_is_the_move_a_brute_force_search_picks(goal: float) -> None:
    factors = (0.5, 1.0, 1.5, 2.0, 3.0)
    step = _step(goal, factors)
    c = _brute(goal, factors)
    assert step.scale == c
    np.testing.assert_allclose(step.arrays[0], np.full(3, 1.0 + c, np.float32))
    np.testing.assert_array_equal(step.arrays[1], [7])  # the counter: the aggregate's
    assert step.arrays[0].dtype == np.float32
    assert step.full is not None  # the unscaled aggregate, scored first: the values use it
    assert step.full["accuracy"] == pytest.approx(1.0 / (1.0 + abs(2.0 - goal)))
    if c == 1.0:
        assert step.searched is None
    else:
        assert step.searched is not None
        assert step.searched["accuracy"] == pytest.approx(1.0 / (1.0 + abs(1.0 + c - goal)))


def test_a_tie_keeps_the_unscaled_step_and_a_nan_never_wins() -> None:
    assert _step(2.5, (1.0, 2.0)).scale == 1.0  # 2 and 3 are as close to 2.5: c = 1 stays
    assert _step(3.0, (1.0, 2.0), nan_for=3.0).scale == 1.0  # the best model scores NaN
    assert _step(3.0, (2.0,)).scale == 2.0  # 1 need not be listed: it is always a candidate


def test_scaled_move_scales_float_tensors_only() -> None:
    base = [np.array([1.0, -2.0], np.float16), np.array([3], np.int32), np.array([True])]
    new = [np.array([2.0, 0.0], np.float16), np.array([5], np.int32), np.array([False])]
    out = scaled_move(base, new, 2.5)
    np.testing.assert_array_equal(out[0], np.array([3.5, 3.0], np.float16))
    assert out[0].dtype == np.float16
    assert out[1].tolist() == [5]
    assert out[1].dtype == np.int32
    assert out[2].tolist() == [False]


@pytest.mark.parametrize(
    "factors", [(0.0,), (-1.0,), (math.nan,), (1.0, 101.0), "1.5", 2.0, (True,), ("x",)]
)
def test_a_bad_search_names_the_field(factors: object) -> None:
    with pytest.raises(ConfigError, match="step_search"):
        ValuationConfig(step_search=factors)  # type: ignore[arg-type]


def test_a_list_is_taken_as_a_tuple() -> None:
    assert ValuationConfig(step_search=[1, 2]).step_search == (1.0, 2.0)  # type: ignore[arg-type]
    assert ValuationConfig().step_search == ()


@pytest.mark.parametrize("average", [True, False])
def test_a_run_with_the_search_ends_each_round_on_the_served_model(average: bool) -> None:
    """The preset with the search on (and without its moving average): the toy's models pass
    the goal, so larger moves win early and the plain one later; the metrics say which."""
    recorder = Recorder(3.5)
    plain = {} if average else {"average_passes": None, "serve_better": False}
    valuation = ValuationConfig(drop_worst=True, step_search=(1.0, 2.0, 4.0))
    strategy, grid = edge_preset_on_toy(valuation, **plain)
    with flwr_logs() as logs:
        result = strategy.start(grid, model(0.0), num_rounds=8, evaluate_fn=recorder)
    check_last_calls(recorder, result, 8)
    scales = [float(str(result.train_metrics_clientapp[r]["step-scale"])) for r in range(1, 9)]
    assert set(scales) <= {1.0, 2.0, 4.0}
    assert any(s > 1.0 for s in scales)  # the search moved further than the step
    assert "(step_search)" in logs.text
    for rnd, scale in enumerate(scales, start=1):  # the log names the scale of each round
        line = logs.text.split(f"[edge round {rnd}]")[1].split("\n")[0]
        assert ("(step_search)" in line) == (scale != 1.0)
        assert scale == 1.0 or f"step=x{scale:g}" in line


def test_without_another_factor_nothing_changes() -> None:
    """No factor, or only ``c = 1``: the same models and history (no step-scale metric
    without the search; with ``(1.0,)`` the unscaled step always stands)."""
    runs = []
    for factors in ((), (1.0,)):
        strategy, grid = edge_preset_on_toy(ValuationConfig(drop_worst=True, step_search=factors))
        result = strategy.start(grid, model(0.0), num_rounds=4, evaluate_fn=Recorder(3.5))
        runs.append((strategy, result))
    (plain, off), (ones, on) = runs
    assert "step-scale" not in off.train_metrics_clientapp[1]
    assert [str(on.train_metrics_clientapp[r]["step-scale"]) for r in range(1, 5)] == ["1.0"] * 4
    assert [h.weights for h in plain.history] == [h.weights for h in ones.history]
    for key in off.arrays:
        assert off.arrays[key].numpy().tobytes() == on.arrays[key].numpy().tobytes()
