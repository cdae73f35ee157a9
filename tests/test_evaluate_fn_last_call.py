"""The last ``evaluate_fn`` call of each round scores the model the strategy serves.

EdgeStrategy calls ``evaluate_fn`` several times per aggregation with the same
``server_round`` (the leave-one-out models, ``drop_worst``'s full aggregate, the global model
beside its moving average). A Flower ``evaluate_fn`` that saves the model it is given ("save
every round", "save if best so far") must end each round on the served model: the one whose
metrics go into ``Result.evaluate_metrics_serverapp[r]`` and, after the last round, into
``Result.arrays``. A recording ``evaluate_fn`` tags each model with a fingerprint metric.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
from conftest import ToyEdge, make_dropin_app, model, virtual
from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp.strategy import Result

from strategies import EdgeStrategy, InProcessGrid, ShareConfig, StopConfig, ValuationConfig
from strategies.edge import PRESET_SHARES, PRESETS

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="off")


def fingerprint(arrays: ArrayRecord) -> float:
    """Return a number that tells models apart (48 bits of a hash: an exact float)."""
    digest = hashlib.sha256()
    for key in arrays:
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key].numpy()).tobytes())
    return float(int.from_bytes(digest.digest()[:6], "big"))


class Recorder:
    """An ``evaluate_fn`` that records the round and the model of every call.

    ``none_at_start``: return ``None`` for round 0, as an ``evaluate_fn`` that only saves
    models may (the strategy cannot know that round 1 returns the metric).
    """

    def __init__(self, goal: float, *, none_at_start: bool = False) -> None:
        self.goal = goal
        self.none_at_start = none_at_start
        self.calls: list[tuple[int, float]] = []

    def __call__(self, rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        fp = fingerprint(arrays)
        self.calls.append((rnd, fp))
        if rnd == 0 and self.none_at_start:
            return None
        err = abs(float(arrays["w"].numpy().astype(np.float64).mean()) - self.goal)
        return MetricRecord({"accuracy": 1.0 / (1.0 + err), "fp": fp})

    def per_round(self) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for rnd, fp in self.calls:
            out.setdefault(rnd, []).append(fp)
        return out


def check_last_calls(recorder: Recorder, result: Result, rounds: int) -> dict[int, int]:
    """Assert that each round's last call scored the served model; return the call counts."""
    per_round = recorder.per_round()
    assert sorted(per_round) == list(range(rounds + 1))
    assert [rnd for rnd, _ in recorder.calls] == sorted(rnd for rnd, _ in recorder.calls)
    for rnd in range(1, rounds + 1):
        served = result.evaluate_metrics_serverapp[rnd]["fp"]
        assert per_round[rnd][-1] == served, f"round {rnd}: the last call is not the served model"
    assert recorder.calls[-1][1] == fingerprint(result.arrays)
    return {rnd: len(fps) for rnd, fps in per_round.items()}


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
    strategy = EdgeStrategy(
        threshold=1,
        **{**PRESETS["edge"], **plain},
        clock=virtual(),
        shares=dataclasses.replace(SHARES, **PRESET_SHARES["edge"]),
        stop=StopConfig(),
        valuation=ValuationConfig(drop_worst=drop_worst),
    )
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
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
