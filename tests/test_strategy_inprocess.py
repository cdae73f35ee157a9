"""InProcessGrid on its own and under Flower's own FedAvg."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import as_numpy, make_dropin_app, model
from flwr.app import ConfigRecord, Context, Message, RecordDict

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies import InProcessGrid, ManualClock, VirtualClock


def test_flowers_fedavg_runs_unchanged_on_the_in_process_grid() -> None:
    from flwr.serverapp.strategy import FedAvg

    clock = ManualClock()
    grid = InProcessGrid(make_dropin_app(step=0.1), 3, clock=clock, latency=lambda n, m: 2.0)
    result = FedAvg(fraction_evaluate=0.0).start(grid, model(0.0), num_rounds=2, timeout=10.0)
    # each round: w += 0.1 * (pid + 1), averaged by num-examples 10, 20, 30 -> 0.1 * 14 / 6
    np.testing.assert_allclose(as_numpy(result.arrays)[0], np.full(3, 2 * 0.14 / 0.6), rtol=1e-6)
    assert clock.now() == pytest.approx(2 * 2.0)  # one latency per round, nodes in parallel


def test_send_and_receive_stops_at_the_timeout_and_keeps_late_replies_queued() -> None:
    clock = ManualClock()
    delays = {1001: 1.0, 1002: 50.0}
    grid = InProcessGrid(make_dropin_app(), 2, clock=clock, latency=lambda n, m: delays[n])

    def train(node: int) -> Message:
        content = RecordDict({"arrays": model(0.0), "config": ConfigRecord({})})
        return Message(content, node, "train")

    replies = grid.send_and_receive([train(1001), train(1002)], timeout=10.0)
    assert [r.metadata.src_node_id for r in replies] == [1001]
    assert clock.now() == pytest.approx(10.0)
    assert grid.queued() == 1


def test_one_message_at_a_time_per_node_and_a_per_node_context() -> None:
    clock = ManualClock()
    seen: list[tuple[int, int, int]] = []

    def app(msg: Message, ctx: Context) -> Message:
        count = int(ctx.state.config_records.get("n", ConfigRecord({"n": 0}))["n"]) + 1  # type: ignore[call-overload]
        ctx.state["n"] = ConfigRecord({"n": count})
        seen.append((ctx.node_id, int(ctx.node_config[wire.PARTITION_ID]), count))  # type: ignore[arg-type]
        return Message(RecordDict(), reply_to=msg)

    grid = InProcessGrid(app, node_ids=[77, 88], clock=clock, latency=lambda n, m: 3.0)
    ids = grid.push_messages([Message(RecordDict(), 77, "query") for _ in range(2)])
    assert seen == [(77, 0, 1), (77, 0, 2)]
    clock.advance(3.0)
    assert [r.metadata.reply_to_message_id for r in grid.pull_messages(ids)] == ids[:1]
    clock.advance(3.0)  # the second waited behind the first
    assert [r.metadata.reply_to_message_id for r in grid.pull_messages(ids)] == ids[1:]
    assert grid.pull_messages(ids) == []  # destructive: each reply comes back once
    assert grid.contexts[88].node_config[wire.NUM_PARTITIONS] == 2


def test_faults_kill_silence_restart() -> None:
    grid = InProcessGrid(make_dropin_app(), 2)
    msg = Message(RecordDict({"arrays": model(0.0)}), 1001, "train")
    grid.kill(1001)
    assert grid.get_node_ids() == [1002]
    assert grid.push_messages([msg]) == []  # refused
    grid.restart(1001)
    grid.silence(1001)
    ids = grid.push_messages([Message(RecordDict({"arrays": model(0.0)}), 1001, "train")])
    assert grid.pull_messages(ids) == []
    grid.silence(1001, silent=False)
    ids = grid.push_messages([Message(RecordDict({"arrays": model(0.0)}), 1001, "train")])
    assert len(grid.pull_messages(ids)) == 1


def test_an_exception_in_the_app_becomes_an_error_reply() -> None:
    def app(msg: Message, ctx: Context) -> Message:
        raise ValueError("bad batch")

    grid = InProcessGrid(app, 1)
    ids = grid.push_messages([Message(RecordDict(), 1001, "train")])
    [reply] = grid.pull_messages(ids)
    assert reply.has_error()
    assert reply.error.reason == "ValueError: bad batch"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_nodes": 0}, "num_nodes must be an integer >= 1, got 0"),
        ({}, "num_nodes must be an integer >= 1, got None"),
        ({"node_ids": [1, 1]}, "distinct"),
        ({"num_nodes": 2, "node_ids": [5]}, r"num_nodes \(2\) != len\(node_ids\) \(1\)"),
        ({"num_nodes": 2, "latency": lambda n, m: 1.0}, "latency needs a clock"),
        # each of these was a TypeError/AttributeError, or accepted and failed later
        ({"num_nodes": 2.0}, "num_nodes must be an integer >= 1, got 2.0"),
        ({"node_ids": [0, 5]}, r"node_ids\[0\] must be an integer in \[1, "),
        ({"node_ids": ["a"]}, r"node_ids\[0\] must be an integer"),
        ({"num_nodes": 2, "node_configs": [{}]}, "node_configs must map node ids to configs"),
        ({"num_nodes": 2, "clock": "manual"}, "clock must be a strategies Clock, got str"),
        ({"num_nodes": 2, "clock": ManualClock(), "latency": 3}, "latency must be callable"),
        ({"num_nodes": 2, "order": "random"}, "order must be callable or None, got str"),
        ({"num_nodes": 2, "run_id": -1}, "run_id must be an integer"),
        ({"num_nodes": 2, "isolate": "no"}, "isolate must be a boolean"),
    ],
)
def test_invalid_grid_settings(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=match):
        InProcessGrid(make_dropin_app(), **kwargs)


def test_invalid_grid_app_and_clocks() -> None:
    with pytest.raises(ConfigError, match="app must be a ClientApp or a callable, got NoneType"):
        InProcessGrid(None, 2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="start must be >= 0, got -1"):
        ManualClock(-1)
    with pytest.raises(ConfigError, match="start must be a finite number >= 0, got nan"):
        VirtualClock(float("nan"))
    with pytest.raises(ConfigError, match="wall must be a strategies Clock, got int"):
        VirtualClock(wall=3)  # type: ignore[arg-type]


def test_controls_name_unknown_nodes() -> None:
    grid = InProcessGrid(make_dropin_app(), 2)
    with pytest.raises(ConfigError, match="node_id 9 is not one of this grid's nodes"):
        grid.kill(9)
