"""The last ``evaluate_fn`` call of each round scores the model the strategy serves.

EdgeStrategy calls ``evaluate_fn`` several times per aggregation with the same
``server_round`` (the leave-one-out models, ``drop_worst``'s full aggregate, the global model
beside its moving average). A Flower ``evaluate_fn`` that saves the model it is given ("save
every round", "save if best so far") must end each round on the served model: the one whose
metrics go into ``Result.evaluate_metrics_serverapp[r]`` and, after the last round, into
``Result.arrays``. A recording ``evaluate_fn`` tags each model with a fingerprint metric.
"""

from __future__ import annotations

import pytest
from conftest import Recorder, check_last_calls, edge_preset_on_toy, make_dropin_app, model

from strategies import EdgeStrategy, InProcessGrid, ValuationConfig


@pytest.mark.parametrize("none_at_start", [False, True])
def test_the_dropin_edge_strategy_ends_each_round_on_the_global_model(
    none_at_start: bool,
) -> None:
    recorder = Recorder(2.0, none_at_start=none_at_start)
    strategy = EdgeStrategy(threshold=2)
    result = strategy.start(
        InProcessGrid(make_dropin_app(), 3), model(0.0), num_rounds=3, evaluate_fn=recorder
    )
    counts = check_last_calls(recorder, result, 3)
    # K + 1 = 3 leave-one-out models and the global model: 1 + 3 calls (docs/dropin.md);
    # after a round 0 without the metric, the global model first and once more at the end
    assert counts == {0: 1, 1: 5 if none_at_start else 4, 2: 4, 3: 4}
    assert all(len(set(h.values)) > 1 for h in strategy.history)  # valued, not equal


@pytest.mark.parametrize(("drop_worst", "sign_step"), [(True, True), (False, True), (True, False)])
def test_the_edge_preset_ends_each_round_on_the_served_model(
    drop_worst: bool, sign_step: bool
) -> None:
    """The preset, and the preset with the plain step (``sign_step=False``): on this toy
    every update points the same way, so the sign step's leave-one-out models equal the
    global model and ``drop_worst`` never drops; the plain step exercises the drop."""
    recorder = Recorder(3.5)  # the toy's models pass near it: both models get served
    plain = {} if sign_step else {"server_opt": None, "server_lr": 1.0}
    strategy, grid = edge_preset_on_toy(ValuationConfig(drop_worst=drop_worst), **plain)
    result = strategy.start(grid, model(0.0), num_rounds=8, evaluate_fn=recorder)
    counts = check_last_calls(recorder, result, 8)
    metrics = result.train_metrics_clientapp
    served_global = [int(str(metrics[r]["served-global"])) for r in range(1, 9)]
    assert 0 in served_global  # both choices are exercised
    assert 1 in served_global
    if drop_worst and not sign_step:
        assert any(int(str(metrics[r]["dropped-updates"])) for r in range(1, 9))
    # K + 1 = 2 leave-one-out models, the global model, the average, and the global model
    # once more where it is served
    assert [counts[r] for r in range(1, 9)] == [4 + g for g in served_global]
