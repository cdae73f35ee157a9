"""Drop-in with numpy apps: arrays that are not float32, as Flower's numpy and sklearn apps send.

Found by a helper's probe of Flower's own ``examples/quickstart-numpy`` and
``quickstart-sklearn`` (float64 parameters) and of a numpy app with FedAvg's custom
arguments, whose model also holds an int64 step counter, a bool feature mask, a uint8 array,
0-d and zero-size arrays (Flower 1.42, ``FedAvg(...)`` swapped for ``EdgeStrategy(...)``):

- the ``edge`` preset (``aggregate="deltas"``) summed the deltas of a non-float array in the
  array's own dtype: a uint8 value that went down (a delta of -1) stopped the run with an
  ``InputError`` ("values beyond the range of the reference dtype uint8"), and a bool mask that
  every node turned off stayed on (the mean delta -1 was stored as bool ``True``);
- a step past a non-float dtype's range wrapped around: ``FedBuff(server_lr=3)`` turned a bool
  that every node turned off back on, and took a uint8 1 one below 0 to 254;
- an integer initial model that the ClientApp trains as float (``np.array([1, 2])``) had every
  reply rejected, where FedAvg averages it into float64: the rejection now says how to fix it.

Float arrays (float64, float16, 0-d, zero-size) come back in the dtypes and shapes of FedAvg's
Result; non-float arrays keep their dtype (FedAvg's become float64), rounded and clipped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest
from conftest import flwr_logs
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg, Strategy

from flower_edge.arrays import cast_like, delta_reference
from strategies import EdgeStrategy, FedAsync, FedBuff, InProcessGrid
from strategies.intake import INTEGER_MODEL_HINT, INTEGER_REPLY_HINT

Arrays = dict[str, np.ndarray]


def _app(step: Callable[[Arrays, int], Arrays]) -> ClientApp:
    """A plain numpy ClientApp: ``step(arrays, partition_id)`` is its training."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        record = msg.content["arrays"]
        assert isinstance(record, ArrayRecord)
        new = step({k: v.numpy() for k, v in record.items()}, int(ctx.node_config["partition-id"]))
        arrays = ArrayRecord({k: Array(np.asarray(v)) for k, v in new.items()})
        metrics = MetricRecord({"num-examples": 10})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return app


def _run(strategy: Strategy, app: ClientApp, model: Arrays, rounds: int = 3) -> Arrays:
    result = strategy.start(
        grid=InProcessGrid(app, 2),
        initial_arrays=ArrayRecord({k: Array(v) for k, v in model.items()}),
        num_rounds=rounds,
    )
    return {k: v.numpy() for k, v in result.arrays.items()}


def _turn_off_and_count_down(arrays: Arrays, _: int) -> Arrays:
    """Train w; turn every mask entry off; take 1 off u8 (not below 0, as uint8 cannot)."""
    u8 = arrays["u8"]
    return {
        "w": arrays["w"] + 1,
        "mask": np.zeros_like(arrays["mask"]),
        "u8": np.where(u8 > 0, u8 - 1, 0).astype(np.uint8),
    }


def _mixed() -> Arrays:
    return {
        "w": np.zeros(2, np.float32),
        "mask": np.array([True, True, False]),
        "u8": np.array([10, 1], np.uint8),
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: EdgeStrategy.preset("edge", threshold=1),
        lambda: EdgeStrategy(threshold=1, aggregate="deltas", server_lr=2.0),
        lambda: FedBuff(threshold=2, server_lr=3.0),
        lambda: EdgeStrategy(threshold=1),
    ],
    ids=["edge-preset", "edge-deltas-lr2", "fedbuff-lr3", "edge"],
)
def test_non_float_arrays_that_go_down_stay_in_range(make: Callable[[], Strategy]) -> None:
    out = _run(make(), _app(_turn_off_and_count_down), _mixed())
    assert out["mask"].dtype == np.bool_
    assert out["mask"].tolist() == [False, False, False]  # every node turned it off
    assert out["u8"].dtype == np.uint8
    assert out["u8"][1] == 0  # saturates at 0, never wraps to 254
    assert 0 < out["u8"][0] < 10


def _train_floats(arrays: Arrays, pid: int) -> Arrays:
    """Train the float arrays (node i adds 1 + i); send the others back unchanged."""
    return {
        k: (v + 1 + pid).astype(v.dtype) if v.dtype.kind == "f" else v for k, v in arrays.items()
    }


def _numpy_model() -> Arrays:
    return {
        "w64": np.zeros((3, 2)),
        "f16": np.zeros(2, np.float16),
        "scalar": np.array(0.5),
        "empty": np.zeros((0, 3), np.float32),
        "steps": np.array(7, np.int64),
        "classes": np.arange(4, dtype=np.int64),
        "mask": np.array([True, False]),
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda: EdgeStrategy(threshold=1),
        lambda: EdgeStrategy.preset("edge", threshold=1),
        lambda: FedBuff(threshold=2),
        lambda: FedAsync(),
    ],
    ids=["edge", "edge-preset", "fedbuff", "fedasync"],
)
def test_arrays_come_back_in_fedavgs_float_dtypes_and_the_models_other_dtypes(
    make: Callable[[], Strategy],
) -> None:
    fedavg = _run(FedAvg(fraction_evaluate=0.0), _app(_train_floats), _numpy_model())
    ours = _run(make(), _app(_train_floats), _numpy_model())
    assert list(ours) == list(fedavg)
    for key, ref in _numpy_model().items():
        assert ours[key].shape == fedavg[key].shape == ref.shape, key
        assert ours[key].dtype == ref.dtype, key  # FedAvg's non-float arrays become float64
        if ref.dtype.kind == "f":
            assert fedavg[key].dtype == ref.dtype, key
        else:  # arrays every node sends back unchanged come back unchanged
            assert ours[key].tolist() == ref.tolist(), key


def test_an_integer_model_trained_as_float_is_refused_with_the_fix() -> None:
    def noisy(arrays: Arrays, _: int) -> Arrays:
        return {k: v + 0.25 for k, v in arrays.items()}

    with flwr_logs() as logs:
        out = _run(EdgeStrategy(threshold=1), _app(noisy), {"w": np.array([1, 2])}, rounds=1)
    assert out["w"].tolist() == [1, 2]  # nothing aggregated: the run stalled
    rejected = logs.matching("array 0 ('w') has float dtype float64", level=logging.WARNING)
    assert rejected, logs.text
    assert all(INTEGER_MODEL_HINT in line for line in rejected)
    assert logs.matching("no update can arrive", INTEGER_MODEL_HINT, level=logging.ERROR)


def test_an_integer_reply_for_a_float_model_is_refused_with_the_fix() -> None:
    def counted(arrays: Arrays, _: int) -> Arrays:
        return {"seen": np.array([3, 4]), "w": arrays["w"] + 1}

    model = {"seen": np.zeros(2), "w": np.zeros(2, np.float32)}
    with flwr_logs() as logs:
        _run(EdgeStrategy(threshold=1), _app(counted), model, rounds=1)
    rejected = logs.matching("array 0 ('seen') has non-float dtype int64", level=logging.WARNING)
    assert rejected, logs.text
    assert all(INTEGER_REPLY_HINT in line for line in rejected)
    assert not logs.matching(INTEGER_MODEL_HINT)


def test_quickstart_numpys_list_metric_and_an_evaluate_fn_that_skips_rounds() -> None:
    # as docs/dropin.md says of quickstart-numpy: its evaluate handler's list metric is averaged
    # element by element, and rounds whose evaluate_fn returns None are left out of the Result
    app = _app(_train_floats)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])
        metrics = MetricRecord({"random_metric": [float(pid), 1.0, 2.0], "num-examples": 1})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    def every_other(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        return None if rnd % 2 else MetricRecord({"accuracy": 0.5})

    with flwr_logs() as logs:
        result = EdgeStrategy(threshold=1, fraction_evaluate=1.0).start(
            grid=InProcessGrid(app, 2),
            initial_arrays=ArrayRecord({"w": Array(np.ones((1, 1)))}),
            num_rounds=4,
            evaluate_fn=every_other,
        )
    assert sorted(result.evaluate_metrics_serverapp) == [0, 2, 4]
    assert logs.matching("└──> MetricRecord: None")
    final = result.evaluate_metrics_clientapp[4]["random_metric"]
    assert isinstance(final, list)
    assert final == pytest.approx([0.5, 1.0, 2.0])  # both nodes asked once training stopped


@pytest.mark.parametrize(
    ("ref_dtype", "values", "expected"),
    [
        (np.bool_, [-1.0, -0.4, 2.0], [False, False, True]),
        (np.uint8, [-1.0, 300.0], [0, 255]),
        (np.int8, [-200.0, 127.4], [-128, 127]),
        (np.int64, [1e30, -1e30], [2**63 - 1024, -(2**63)]),
        (np.uint64, [1e30], [2**64 - 2048]),
    ],
)
def test_cast_like_clips_to_the_range_of_the_dtype(
    ref_dtype: type[np.generic], values: list[float], expected: list[int]
) -> None:
    out = cast_like(np.asarray(values), np.zeros(len(values), dtype=ref_dtype))
    assert out.dtype == ref_dtype
    assert out.tolist() == expected


@pytest.mark.parametrize("ref_dtype", [np.float16, np.float32])
def test_cast_like_saturates_floats_beyond_a_narrower_dtype(ref_dtype: type[np.generic]) -> None:
    top = float(np.finfo(ref_dtype).max)
    values = np.array([1e300, -1e300, 2.5, np.nan, top, -top * 1.0000001])
    out = cast_like(values, np.zeros(len(values), dtype=ref_dtype))
    assert out.dtype == ref_dtype
    for got, value in zip(out.tolist(), values.tolist(), strict=True):  # element by element
        want = value if np.isnan(value) else min(max(value, -top), top)
        if np.isnan(want):
            assert np.isnan(got)
        else:
            assert got == float(np.asarray(want).astype(ref_dtype))
    assert np.isfinite(out[[0, 1, 2, 4, 5]]).all()


def test_a_float16_model_stepped_past_its_range_stays_finite() -> None:
    """``server_lr`` 3 on float16 weights near 65504: the step saturates, never Inf."""
    model = {"w": np.array([30000.0, 1.0], np.float16)}

    def double(arrays: Arrays, _: int) -> Arrays:
        return {"w": (arrays["w"] * np.float16(1.5)).astype(np.float16)}

    for strategy in (
        EdgeStrategy(threshold=1, aggregate="deltas", server_lr=3.0),
        FedBuff(threshold=2, server_lr=3.0),
    ):
        out = _run(strategy, _app(double), model, rounds=2)
        assert out["w"].dtype == np.float16
        assert np.isfinite(out["w"]).all(), out["w"]
        assert out["w"][0] == np.finfo(np.float16).max


def test_cast_like_gives_an_array_for_a_0d_model_array() -> None:
    # numpy's arithmetic on 0-d arrays gives scalars, which flwr's Array refuses
    for ref in (np.array(0, np.int64), np.array(0.0), np.array(False)):
        out = cast_like(np.float64(0.75) + np.array(0.5), ref)
        assert isinstance(out, np.ndarray), ref.dtype
        assert out.shape == ()
        assert out.dtype == ref.dtype
        Array(out)  # an ArrayRecord takes it


def test_delta_reference_holds_non_float_arrays_as_int64() -> None:
    model = [np.zeros(2, np.float32), np.zeros(3, bool), np.zeros((), np.uint8)]
    ref = delta_reference(model)
    assert ref[0] is model[0]
    assert [(r.dtype, r.shape) for r in ref[1:]] == [(np.int64, (3,)), (np.int64, ())]
