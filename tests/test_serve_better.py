"""``serve_better``: serve the better of the global model and its moving average.

The choice never changes training, so a run without it shares every global model with a run
with it; the served models are checked against a brute-force choice between each global
model and the EMA of the global models so far, on the valuation metric.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, as_numpy, model
from flwr.app import ArrayRecord, MetricRecord

from flower_edge.errors import ConfigError
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
TARGET = 3.5  # the toy's global models pass near it: some rounds serve each model
BETA = 0.75  # 2 passes x 2 aggregations per pass (threshold 1, 4 nodes)


def _score(w: np.ndarray) -> float:
    return 1.0 / (1.0 + abs(float(np.asarray(w, np.float64).mean()) - TARGET))


def _run(  # type: ignore[no-untyped-def]
    serve_better: bool,
    *,
    valuation: ValuationConfig | None = None,
    loss: bool = False,
    rounds: int = 8,
    threshold: int = 1,
    **options: Any,
):
    calls: list[int] = []

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        calls.append(rnd)
        s = _score(arrays["w"].numpy())
        return MetricRecord({"accuracy": s, "val-loss": 1.0 - s} if loss else {"accuracy": s})

    strategy = EdgeStrategy(
        threshold=threshold,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        aggregate="deltas",
        stop=StopConfig(),
        average_passes=2.0,
        serve_better=serve_better,
        **({} if valuation is None else {"valuation": valuation}),
        **options,
    )
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=evaluate)
    return strategy, result, calls


def _brute(
    monkeypatch: pytest.MonkeyPatch, valuation: ValuationConfig | None = None, loss: bool = False
) -> list[bool]:
    """Rebuild each round's global model (drop_worst included) and the EMA of them in a run
    without the choice; return where the global model scores better (a tie: the average)."""
    import strategies.loop as loop_module

    globals_: list[np.ndarray] = []
    original = loop_module.evaluate_served

    def capture(loop, rnd, full=None, **kwargs):  # type: ignore[no-untyped-def]
        globals_.append(np.asarray(loop.global_arrays[0], np.float64))
        return original(loop, rnd, full, **kwargs)

    monkeypatch.setattr(loop_module, "evaluate_served", capture)
    _run(False, valuation=valuation, loss=loss)
    monkeypatch.setattr(loop_module, "evaluate_served", original)
    wins: list[bool] = []
    ema = globals_[0]
    for t, g in enumerate(globals_, start=1):
        b = min(BETA, 1.0 - 1.0 / t)
        ema = g if t == 1 else b * ema + (1 - b) * g
        wins.append(_score(g.astype(np.float32)) > _score(ema.astype(np.float32)))
    return wins


def test_the_served_model_is_the_better_of_the_global_model_and_its_average(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wins = _brute(monkeypatch)
    assert any(wins)  # the toy exercises both choices
    assert not all(wins)
    averaged, plain_result, _ = _run(False)
    chosen, result, _ = _run(True)
    served = [int(m["served-global"]) for m in result.train_metrics_clientapp.values()]
    assert served == [int(w) for w in wins]
    for r in range(1, 9):
        plain = plain_result.evaluate_metrics_serverapp[r]["accuracy"]
        got = result.evaluate_metrics_serverapp[r]["accuracy"]
        assert got >= plain  # the average's score, or the better global model's
        assert (got > plain) == wins[r - 1]
    # the same training: the choice only changes what is served
    assert [h.participants for h in chosen.history] == [h.participants for h in averaged.history]
    # the Result holds the model served last
    last = as_numpy(result.arrays)[0].astype(np.float64)
    assert _score(last) == pytest.approx(result.evaluate_metrics_serverapp[8]["accuracy"])


def test_with_drop_worst_the_leave_one_out_metric_chooses_with_one_more_evaluation_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    valuation = ValuationConfig(metric_key="val-loss", higher_is_better=False, drop_worst=True)
    wins = _brute(monkeypatch, valuation, loss=True)
    assert any(wins)
    assert not all(wins)
    _, plain_result, plain_calls = _run(False, valuation=valuation, loss=True)
    _, result, calls = _run(True, valuation=valuation, loss=True)
    served = [int(m["served-global"]) for m in result.train_metrics_clientapp.values()]
    assert served == [int(w) for w in wins]
    dropped = [int(m["dropped-updates"]) for m in result.train_metrics_clientapp.values()]
    # one more evaluation only where the global model wins: after a drop, its full metrics;
    # otherwise its metrics are known, and it is scored again to be the round's last call
    assert any(w and d for w, d in zip(wins, dropped, strict=True))
    assert any(w and not d for w, d in zip(wins, dropped, strict=True))
    assert len(calls) == len(plain_calls) + sum(wins)
    for r in range(1, 9):
        assert (
            result.evaluate_metrics_serverapp[r]["val-loss"]
            <= (plain_result.evaluate_metrics_serverapp[r]["val-loss"])
        )


def test_serve_better_needs_an_average_and_a_boolean() -> None:
    with pytest.raises(ConfigError, match="serve_better.*average_passes"):
        EdgeStrategy(threshold=2, serve_better=True)
    with pytest.raises(ConfigError, match="serve_better"):
        EdgeStrategy(threshold=2, average_passes=1.0, serve_better="yes")  # type: ignore[arg-type]


def test_without_evaluate_fn_the_average_is_served() -> None:
    strategy = EdgeStrategy(
        threshold=1,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        average_passes=1.0,
        serve_better=True,
    )
    grid = InProcessGrid(ToyEdge(), 4)
    result = strategy.start(grid, model(0.0), num_rounds=3)
    assert all(m.get("served-global") == 0 for m in result.train_metrics_clientapp.values())


def test_the_edge_preset_serves_the_better_model_and_the_seed_the_global_one() -> None:
    assert EdgeStrategy.preset("edge", threshold=2).serve_better is True
    assert EdgeStrategy.preset("edge-seed", threshold=2).serve_better is False


def test_a_resumed_run_makes_the_same_choices(tmp_path: Path) -> None:
    """Checkpoint and resume: the average and the global model are restored exactly, so the
    choices after the resume are those of the run that never stopped (K = n - 1: no job in
    flight at a checkpoint)."""

    def run(rounds: int, resume: bool) -> Any:
        folder = tmp_path / ("ckpt" if resume or rounds == 3 else "whole")
        _, result, _ = _run(True, rounds=rounds, threshold=3, checkpoint_dir=folder, resume=resume)
        return result

    whole = run(8, False)
    run(3, False)
    resumed = run(8, True)
    assert resumed.evaluate_metrics_serverapp == whole.evaluate_metrics_serverapp
    served = [m.get("served-global") for m in whole.train_metrics_clientapp.values()]
    assert served == [m.get("served-global") for m in resumed.train_metrics_clientapp.values()]
    for a, b in zip(as_numpy(whole.arrays), as_numpy(resumed.arrays), strict=True):
        assert a.tobytes() == b.tobytes()
