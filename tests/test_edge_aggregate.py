"""EdgeStrategy's ``aggregate`` ("models" / "deltas") and ``server_lr`` options."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import (
    DUR,
    EQUAL,
    ToyEdge,
    accuracy_fn,
    as_numpy,
    flwr_logs,
    model,
    run_edge,
    virtual,
)
from flwr.app import ArrayRecord, MetricRecord

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, ValuationConfig
from strategies.inprocess import InProcessGrid
from strategies.records import Update


def _update(node: int, base: int, w: list[float], share: int = 1, delay: float = 0.0) -> Update:
    arrays = (np.asarray(w, dtype=np.float32), np.array([node], dtype=np.int64))
    return Update(
        node_id=node,
        job_id=node,
        base_version=base,
        arrays=arrays,
        num_examples=share,
        share=share,
        delay=delay,
        received_at=0.0,
        late=False,
        train_loss=None,
    )


def test_defaults_are_the_seed_rule() -> None:
    strategy = EdgeStrategy(threshold=2)
    assert (strategy.aggregate, strategy.server_lr, strategy.needs_bases) == ("models", 1.0, False)


def test_models_with_a_server_lr_move_part_of_the_way() -> None:
    s = EdgeStrategy(threshold=1, aggregate="models", server_lr=0.25, decay="constant")
    g = [np.full(2, 4.0, dtype=np.float32), np.array([0], dtype=np.int64)]
    ups = [_update(1, 0, [0.0, 0.0], share=1), _update(2, 0, [8.0, 8.0], share=3)]
    out = s.combine(g, ups, 0, {0: g})
    # mean = (0 + 3 * 8) / 4 = 6; x + 0.25 (6 - 4) = 4.5
    np.testing.assert_allclose(out.arrays[0], [4.5, 4.5])
    assert out.arrays[0].dtype == np.float32
    assert out.arrays[1].dtype == np.int64
    assert out.weights == (1.0, 3.0)
    # leave-one-out: without node 2 the mean is 0, so 4 + 0.25 (0 - 4) = 3
    assert out.total is not None
    np.testing.assert_allclose(out.total.mean_without((2, 2))[0], [3.0, 3.0])


def test_deltas_are_taken_from_each_update_s_own_base() -> None:
    s = EdgeStrategy(threshold=1, aggregate="deltas", server_lr=0.5, decay="constant")
    assert s.needs_bases
    base0 = [np.zeros(2, dtype=np.float32), np.array([0], dtype=np.int64)]
    base1 = [np.full(2, 10.0, dtype=np.float32), np.array([0], dtype=np.int64)]
    g = [np.full(2, 20.0, dtype=np.float32), np.array([0], dtype=np.int64)]
    # stale update from version 0 moved +2; fresh update from version 1 moved +6
    ups = [_update(1, 0, [2.0, 2.0]), _update(2, 1, [16.0, 16.0])]
    out = s.combine(g, ups, 2, {0: base0, 1: base1})
    # x + 0.5 * mean(2, 6) = 20 + 2 = 22 (the seed's rule would give mean(2, 16) = 9)
    np.testing.assert_allclose(out.arrays[0], [22.0, 22.0])
    assert out.total is not None
    np.testing.assert_allclose(out.total.mean_without((1, 1))[0], [23.0, 23.0])
    np.testing.assert_allclose(out.total.mean_without((2, 2))[0], [21.0, 21.0])
    # a base no longer known counts as a delta from the current global
    lost = s.combine(g, ups, 2, {1: base1})
    np.testing.assert_allclose(lost.arrays[0], [20.0 + 0.5 * (-18.0 + 6.0) / 2] * 2)


def test_deltas_in_a_run_match_a_hand_computation() -> None:
    toy = ToyEdge()
    strategy, result, _ = run_edge(toy, aggregate="deltas", server_lr=0.5)
    first, second = strategy.history
    x0 = np.zeros(3)

    def step(h, bases):  # type: ignore[no-untyped-def]
        weights = [100.0 * (1.0 + d) ** -0.5 for d in h.delays]
        deltas = [
            toy.returned[(n, j)][0].astype(np.float64) - bases[b]
            for n, j, b in zip(h.participants, h.job_ids, h.base_versions, strict=True)
        ]
        return sum(w * d for w, d in zip(weights, deltas, strict=True)) / sum(weights)

    x1 = (x0 + 0.5 * step(first, {0: x0})).astype(np.float32).astype(np.float64)
    assert second.base_versions == (1, 1, 0)
    assert second.delays == pytest.approx((DUR[1004], DUR[1003], DUR[1001]))
    x2 = x1 + 0.5 * step(second, {0: x0, 1: x1})
    np.testing.assert_allclose(as_numpy(result.arrays)[0], x2.astype(np.float32), rtol=1e-6)
    # values are computed (leave-one-out on the new global) and sum to 1
    metrics = result.train_metrics_clientapp[2]
    values = [metrics[f"value-{n}"] for n in set(second.participants)]
    assert sum(values) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"aggregate": "sum"}, "aggregate must be"),
        ({"server_lr": 0.0}, "server_lr must be"),
        ({"server_lr": 1.5}, "server_lr must be in"),
        ({"aggregate": "deltas", "server_lr": float("nan")}, "server_lr must be"),
        ({"server_lr": True}, "server_lr must be"),
    ],
)
def test_bad_options_are_refused(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EdgeStrategy(threshold=2, **options)  # type: ignore[arg-type]


def test_deltas_allow_a_server_lr_above_one() -> None:
    assert EdgeStrategy(threshold=2, aggregate="deltas", server_lr=2.0).server_lr == 2.0


def test_values_read_the_metric_key_so_a_validation_metric_can_steer_training() -> None:
    """An app that reports ``accuracy`` on its test set and values on ``val_accuracy``.

    The reported metric is constant here, so leave-one-out on it would give equal values;
    with ``metric_key="val_accuracy"`` the values come from the validation metric, are not
    all equal, and the reported ``accuracy`` is what the Result keeps.
    """
    validation = accuracy_fn(goal=2.0)

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        val = float(validation(rnd, arrays)["accuracy"])  # type: ignore[arg-type]
        return MetricRecord({"accuracy": 0.5, "val_accuracy": val})

    def values_of(key: str) -> list[float]:
        grid = InProcessGrid(ToyEdge(), 4)
        strategy = EdgeStrategy(
            threshold=2, clock=virtual(), shares=EQUAL, valuation=ValuationConfig(metric_key=key)
        )
        result = strategy.start(grid, model(0.0), num_rounds=2, evaluate_fn=evaluate)
        assert result.evaluate_metrics_serverapp[2]["accuracy"] == 0.5
        last = strategy.history[-1]
        metrics = result.train_metrics_clientapp[2]
        return [float(metrics[f"value-{n}"]) for n in sorted(set(last.participants))]  # type: ignore[arg-type]

    on_test = values_of("accuracy")
    assert on_test == pytest.approx([1.0 / len(on_test)] * len(on_test))
    on_validation = values_of("val_accuracy")
    assert sum(on_validation) == pytest.approx(1.0)
    assert max(on_validation) - min(on_validation) > 1e-3


def test_the_quickstarts_fedavg_arguments_carry_over_with_a_warning() -> None:
    """Found by a new-user probe: Flower's quickstart-pytorch builds
    ``FedAvg(fraction_train=fraction_train)``; swapping in ``EdgeStrategy(threshold=K, ...)``
    raised a TypeError and the ServerApp exited with code 700."""
    from strategies import FedBuff

    with flwr_logs() as caplog:
        strategy = EdgeStrategy(
            threshold=2,
            fraction_train=0.5,  # type: ignore[call-arg]
            min_train_nodes=2,
            min_available_nodes=4,
            weighted_by_key="num-examples",  # FedAvg's defaults: accepted silently
            arrayrecord_key="arrays",
            configrecord_key="config",
            train_metrics_aggr_fn=None,
            fraction_evaluate=1.0,
        )
    assert strategy.fraction_evaluate == 1.0
    assert strategy.min_nodes() == 4  # min_available_nodes: the nodes to wait for
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2
    assert "EdgeStrategy: fraction_train=0.5 is ignored: every idle node trains" in warned[0]
    assert "EdgeStrategy: min_train_nodes=2 is ignored: every idle node trains" in warned[1]
    for bad, match in ((1.5, "fraction_train"), ("x", "fraction_train")):
        with pytest.raises(ConfigError, match=match):
            FedBuff(threshold=2, fraction_train=bad)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="min_train_nodes"):
        EdgeStrategy(threshold=2, min_train_nodes=-1)  # type: ignore[call-arg]


def test_evaluate_fn_calls_per_aggregation_are_as_the_dropin_guide_says() -> None:
    """docs/dropin.md warns FedAvg users that ``evaluate_fn`` runs (K + 1) + 1 times per
    aggregation with the same ``server_round`` (leave-one-out models), the last call on the
    served model, and once with ``ValuationConfig(mode="off")``."""
    from pathlib import Path

    from conftest import make_dropin_app

    guide = (Path(__file__).resolve().parents[1] / "docs" / "dropin.md").read_text()
    assert "`evaluate_fn` is called **more than once per aggregation**" in guide
    assert "with `threshold=2` it runs 3 + 1 times per" in guide
    assert "The last call of a round" in guide
    score = accuracy_fn()
    calls: list[tuple[int, np.ndarray]] = []

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        calls.append((rnd, arrays["w"].numpy().copy()))
        return score(rnd, arrays)

    for valuation, per_round in ((None, 4), (ValuationConfig(mode="off"), 1)):
        calls.clear()
        strategy = EdgeStrategy(threshold=2, valuation=valuation)
        result = strategy.start(
            InProcessGrid(make_dropin_app(), 3), model(0.0), num_rounds=2, evaluate_fn=evaluate
        )
        rounds = [rnd for rnd, _ in calls]
        assert rounds == [0] + [1] * per_round + [2] * per_round
        last_of_last = [w for rnd, w in calls if rnd == 2][-1]
        assert np.array_equal(last_of_last, result.arrays["w"].numpy())
