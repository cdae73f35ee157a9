"""The toy edge client of ``conftest.py`` (``ToyEdge``) checked against hand computation."""

from __future__ import annotations

import numpy as np
from conftest import ToyEdge, model
from flwr.app import ConfigRecord, Message, RecordDict

from flower_edge import wire


def test_toy_edge_trains_towards_its_target_in_slices() -> None:
    from strategies import InProcessGrid

    toy = ToyEdge()
    grid = InProcessGrid(toy, 1)
    cfg = {
        wire.JOB_ID: 7,
        wire.GLOBAL_VERSION: 0,
        wire.SAMPLE_SHARE: 20,
        wire.SLICE_BUDGET: 1.0,
        wire.SEND_TIME: 0.0,
    }
    first = Message(
        RecordDict({wire.ARRAYS: model(0.0), wire.CONFIG: ConfigRecord(cfg)}), 1001, "train"
    )
    [msg_id] = grid.push_messages([first])
    [reply] = grid.pull_messages([msg_id])
    metrics = reply.content.metric_records[wire.METRICS]
    assert metrics[wire.DONE] == 0
    assert metrics[wire.SAMPLES_PROCESSED] == 10
    assert metrics[wire.VIRTUAL_SECONDS] == 10 / 10.0 + 0.5
    second = Message(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), 1001, "train")
    [msg_id] = grid.push_messages([second])
    [reply] = grid.pull_messages([msg_id])
    assert reply.content.metric_records[wire.METRICS][wire.DONE] == 1
    w = reply.content.array_records[wire.ARRAYS]["w"].numpy()
    # two half-slices: w = 0 + 0.5 * (1 - 0) * 0.5 = 0.25, then 0.25 + 0.5 * 0.75 * 0.5
    np.testing.assert_allclose(w, np.full(3, 0.25 + 0.5 * 0.75 * 0.5, dtype=np.float32))
