"""Checkpoints keep every array's shape and dtype (0-d arrays such as BatchNorm's counter).

``np.ascontiguousarray`` turned a 0-d array into a 1-d one, so a resumed run served
``num_batches_tracked`` as shape (1,): a torch model cannot load that state dict. A resume
onto a model with the same array names but other shapes was not detected either.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import accuracy_fn, virtual
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge.errors import ConfigError, InputError
from strategies import CheckpointStore, EdgeStrategy, InProcessGrid, ShareConfig
from strategies.checkpoint import RunState
from strategies.resume import conform_arrays


def _app() -> ClientApp:
    """A plain ClientApp: w moves towards its partition, the 0-d counter counts jobs."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        pid = int(ctx.node_config["partition-id"])
        w = arrays["w"].numpy()
        count = arrays["count"].numpy()
        assert count.shape == ()  # what a torch model's num_batches_tracked needs
        new = {
            "w": Array(np.asarray(w + 0.1 * (pid + 1), dtype=np.float32)),
            "count": Array(np.asarray(count + 1, dtype=np.int64)),
        }
        return Message(
            RecordDict({"arrays": ArrayRecord(new), "metrics": MetricRecord({"num-examples": 10})}),
            reply_to=msg,
        )

    return app


def _model(width: int = 3) -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(np.zeros(width, np.float32)),
            "count": Array(np.array(0, dtype=np.int64)),
        }
    )


def _run(rounds: int, directory: Path | str, resume: bool = False, width: int = 3):  # type: ignore[no-untyped-def]
    grid = InProcessGrid(_app(), 4)
    strategy = EdgeStrategy(
        threshold=3,
        clock=virtual(),
        shares=ShareConfig(profile=False),
        checkpoint_dir=directory,
        resume=resume,
    )
    result = strategy.start(grid, _model(width), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return strategy, result, grid


def test_a_resumed_run_keeps_a_0d_array_0d(tmp_path: Path) -> None:
    _, whole, _ = _run(4, "")
    _run(2, tmp_path)
    resumed_strategy, resumed, _ = _run(4, tmp_path, resume=True)
    assert len(resumed_strategy.history) == 4
    for key in ("w", "count"):
        a, b = whole.arrays[key].numpy(), resumed.arrays[key].numpy()
        assert (a.shape, a.dtype) == (b.shape, b.dtype)
        assert a.tobytes() == b.tobytes()
    assert resumed.arrays["count"].numpy().shape == ()


def test_checkpoint_store_round_trips_shapes_and_dtypes(tmp_path: Path) -> None:
    arrays: list[np.ndarray[Any, Any]] = [
        np.array(3.5, dtype=np.float16),
        np.zeros((0, 3), dtype=np.float32),
        np.array([True, False]),
        np.arange(6, dtype=np.uint8).reshape(2, 3).T,  # Fortran-ordered
        np.array([np.nan, np.inf, -0.0]),
    ]
    store = CheckpointStore(tmp_path)
    store.save(3, ["a", "b", "c", "d", "e"], arrays, {}, average=arrays)
    loaded = store.load()
    assert loaded.average is not None
    for got in (loaded.arrays, loaded.average):
        for want, have in zip(arrays, got, strict=True):
            assert (have.shape, have.dtype) == (want.shape, want.dtype)
            np.testing.assert_array_equal(have, want)


def test_a_checkpoint_of_other_shapes_is_refused(tmp_path: Path) -> None:
    _run(1, tmp_path)
    with pytest.raises(
        ConfigError, match=r"array 'w' is float32\[3\], the model's is float32\[4\]"
    ):
        _run(2, tmp_path, resume=True, width=4)


def test_conform_arrays_reads_0d_arrays_of_older_checkpoints() -> None:
    old: list[np.ndarray[Any, Any]] = [np.array([7], dtype=np.int64), np.ones(2, np.float32)]
    model: list[np.ndarray[Any, Any]] = [np.array(0, dtype=np.int64), np.zeros(2, np.float32)]
    out = conform_arrays(old, model, ["count", "w"], "ckpt")
    assert out[0].shape == ()
    assert int(out[0]) == 7
    with pytest.raises(ConfigError, match=r"array 'w' is float64\[2\]"):
        conform_arrays([old[0], np.ones(2)], model, ["count", "w"], "ckpt")
    # the moving average is float64 whatever the model's dtypes: shapes only
    average = conform_arrays([old[0], np.ones(2)], model, ["count", "w"], "ckpt", same_dtypes=False)
    assert average[1].dtype == np.float64


@pytest.mark.parametrize(
    ("field", "value"),
    [("values", []), ("nodes", [1]), ("train_metrics", []), ("version", float("inf"))],
)
def test_a_malformed_state_is_an_input_error(field: str, value: object) -> None:
    # these were AttributeError / OverflowError out of RunState.from_json
    good: dict[str, Any] = {
        "strategy": "edge",
        "version": 1,
        "clock": 0.0,
        "elapsed": 0.0,
        "jobs": 3,
        "best": None,
        "since_best": 0,
        "abandoned_total": 0,
        "values": {},
        "last_values": [0, [], []],
        "nodes": {},
        "history": [],
        "train_metrics": {},
        "evaluate_metrics": {},
    }
    assert RunState.from_json(good).version == 1
    with pytest.raises(InputError, match="checkpoint state is malformed"):
        RunState.from_json({**good, field: value})
