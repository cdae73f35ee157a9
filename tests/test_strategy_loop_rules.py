"""Loop rules checked from outside the loop: ``dt`` after an abandon, one message per node, a
node twice in one aggregation.

Both tests read what the grid saw (messages pushed, replies pulled) and the client's own
replies, not the loop's bookkeeping, so that a change in the loop cannot also change what the
test expects.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, model, virtual
from fault_clients import edge_app, initial_model
from flwr.app import Context, Message, MetricRecord

from flower_edge import wire
from strategies import EdgeStrategy, FedBuff, InProcessGrid, LoopConfig, ManualClock


def _config(msg: Message) -> dict[str, object]:
    return dict(msg.content.config_records[wire.CONFIG])


class AbandonsOnce(ToyEdge):
    """A ToyEdge that abandons stale work the first time only, then finishes its job."""

    def train(self, msg: Message, ctx: Context, pid: int) -> Message:
        """Train a slice; stop abandoning once it has abandoned."""
        reply = super().train(msg, ctx, pid)
        if self.replies[-1]["abandoned"]:
            self.abandon = False
        return reply


def test_dt_after_an_abandon_runs_from_the_send_of_the_global_it_restarted_from() -> None:
    # node 1001 (20 samples/s: 7.5 virtual s per job) is overtaken by the first aggregation
    # (4.5 s), abandons, restarts from version 1 and finishes; the others never abandon
    speeds = [20.0, 40.0, 80.0, 80.0]
    grid = InProcessGrid(ToyEdge(speeds=speeds, abandon=False), 4)
    once = AbandonsOnce(speeds=speeds)
    grid.set_app(1001, once)
    strategy = EdgeStrategy(
        threshold=2, clock=virtual(), shares=EQUAL, loop=LoopConfig(slice_budget=1.0)
    )
    strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
    # when each (node, job) first got each global version, from the messages themselves
    delivered: dict[tuple[int, int, int], float] = {}
    first_send: dict[tuple[int, int], float] = {}
    for msg in grid.pushed:
        cfg = _config(msg)
        key = (msg.metadata.dst_node_id, int(cfg[wire.JOB_ID]))  # type: ignore[call-overload]
        first_send.setdefault(key, float(cfg[wire.SEND_TIME]))  # type: ignore[arg-type]
        if wire.ARRAYS in msg.content.array_records:
            version = int(cfg[wire.GLOBAL_VERSION])  # type: ignore[call-overload]
            delivered.setdefault((*key, version), float(cfg[wire.SEND_TIME]))  # type: ignore[arg-type]
    finished = {(e.node_id, e.job_id): e.time for e in strategy.events if e.kind == "finished"}
    abandoned = {(r["node"], r["job"]) for r in once.replies if r["abandoned"]}
    assert abandoned, "node 1001 never abandoned: the scenario does not test the rule"
    checked_restarts = 0
    for record in strategy.history:
        for node, job, base, delay in zip(
            record.participants, record.job_ids, record.base_versions, record.delays, strict=True
        ):
            expected = finished[(node, job)] - delivered[(node, job, base)]
            assert delay == pytest.approx(expected, abs=1e-9)
            if (node, job) in abandoned:
                checked_restarts += 1
                # the restarted job's dt is shorter than the time since its first message
                assert delay < finished[(node, job)] - first_send[(node, job)] - 1.0
    assert checked_restarts >= 1, "no aggregated update came from an abandoned-and-restarted job"


class RecordingGrid(InProcessGrid):
    """An InProcessGrid that checks, per node, that no train message is pushed while another
    one to the same node has no reply pulled yet."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.out: dict[int, set[str]] = {}
        self.violations: list[tuple[int, str]] = []
        self.train_pushes = 0
        self.replies_pulled = 0

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Push, then check each accepted train message against the node's open ones."""
        batch = list(messages)
        accepted = super().push_messages(batch)
        seen: set[int] = set()
        for msg in batch:
            if msg.metadata.message_type != "train" or msg.metadata.message_id not in accepted:
                continue
            node = msg.metadata.dst_node_id
            if self.out.get(node) or node in seen:
                self.violations.append((node, msg.metadata.message_id))
            seen.add(node)
            self.out.setdefault(node, set()).add(msg.metadata.message_id)
            self.train_pushes += 1
        return accepted

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """Pull, and close the messages answered."""
        replies = super().pull_messages(message_ids)
        for reply in replies:
            node = reply.metadata.src_node_id
            self.out.get(node, set()).discard(reply.metadata.reply_to_message_id)
            self.replies_pulled += 1
        return replies


@pytest.mark.parametrize("strategy_name", ["edge", "fedbuff"])
def test_a_node_never_has_two_train_messages_out_at_once(strategy_name: str) -> None:
    # slices (1 s + 0.5 s overhead), abandons (ToyEdge restarts on a newer global) and soft
    # deadlines (1.45 s: every full slice is late, short last slices are not)
    toy = ToyEdge(speeds=[4.0, 20.0, 40.0, 80.0])
    grid = RecordingGrid(toy, 4)
    loop = LoopConfig(slice_budget=1.0, deadline=1.45)
    strategy = (
        EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL, loop=loop)
        if strategy_name == "edge"
        else FedBuff(threshold=2, clock=virtual(), shares=EQUAL, loop=loop)
    )
    strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
    kinds = {e.kind for e in strategy.events}
    assert {"progress", "late", "finished"} <= kinds
    if strategy_name == "edge":
        assert "abandoned" in kinds
    assert grid.train_pushes > 20  # many slices went out
    assert grid.violations == []
    # and every slice report was answered by exactly one message to the same job
    progress = [r for r in toy.replies if not r["done"]]
    assert len(progress) >= 10


def test_the_recording_grid_catches_a_second_message_to_a_busy_node() -> None:
    grid = RecordingGrid(ToyEdge(), 2)
    first = Message(_train_content(0), 1001, "train")
    second = Message(_train_content(0), 1001, "train")
    grid.push_messages([first])
    grid.push_messages([second])
    assert [node for node, _ in grid.violations] == [1001]


def _train_content(version: int):  # type: ignore[no-untyped-def]
    from flwr.app import ConfigRecord, RecordDict

    cfg = ConfigRecord({wire.JOB_ID: 1, wire.GLOBAL_VERSION: version, wire.SLICE_BUDGET: 0.0})
    return RecordDict({wire.CONFIG: cfg, wire.ARRAYS: model(0.0)})


def test_a_node_twice_in_one_aggregation_has_two_updates_and_its_sums() -> None:
    """A node appears twice in an aggregation when its first update came from an older global
    (it got a job on the current one at once) and its second arrived before the trigger.
    Each update has its own weight and leave-one-out value; the node's ``value-<id>`` and
    ``weight-<id>``, and the value sent back to the clients, are the sums (docs/strategy.md)."""

    def latency(node: int, msg: Message) -> float:
        cfg = _config(msg)
        if wire.PROFILE_MODE in cfg:
            return 0.0
        if node == 1001:  # its job on version 0 ends after the first aggregation
            return 1.5 if cfg[wire.GLOBAL_VERSION] == 0 else 0.2
        return 1.0

    clock = ManualClock()
    grid = InProcessGrid(edge_app(), 4, clock=clock, latency=latency)
    strategy = EdgeStrategy(threshold=2, clock=clock, loop=LoopConfig(poll_interval=0.25))
    result = strategy.start(
        grid,
        initial_model(),
        num_rounds=3,
        timeout=30.0,
        evaluate_fn=lambda _, a: MetricRecord({"accuracy": float(a["w"].numpy().sum())}),
    )
    twice = strategy.history[1]
    assert twice.participants == (1001, 1001, 1002)
    assert twice.job_ids[0] != twice.job_ids[1]
    assert twice.base_versions[:2] == (0, 1)  # from an older global, then from the current
    assert len(twice.values) == len(twice.contributions) == 3  # one leave-one-out per update
    assert sum(twice.values) == pytest.approx(1.0)
    metrics = result.train_metrics_clientapp[2]
    assert metrics["participants"] == 3  # updates, not distinct nodes
    assert metrics["value-1001"] == pytest.approx(twice.values[0] + twice.values[1])
    assert metrics["weight-1001"] == pytest.approx(twice.weights[0] + twice.weights[1])
    assert metrics["value-1001"] + metrics["value-1002"] == pytest.approx(1.0)
    sent = [_config(m) for m in grid.pushed if _config(m).get(wire.VALUES_ROUND) == 2]
    assert sent, "no train message carried the values of aggregation 2"
    assert sent[0][wire.VALUE_NODE_IDS] == [1001, 1002]
    assert sent[0][wire.VALUES] == pytest.approx([metrics["value-1001"], metrics["value-1002"]])
