"""Rejected replies must not end a run: at a stall the buffered updates are aggregated.

A rejected node waits for a newer global model, and so does a node whose update is buffered.
When fewer healthy nodes than the rule's "more than K" remain (K = 2 of 4 nodes with two
nodes failing every job, or 3 nodes with one failing once), no aggregation could ever fire:
the run used to stop as "stalled" after 0 aggregations, dropping the accepted updates. Now
the buffer is aggregated at the stall (logged) and the run goes on. A stall with an empty
buffer (every node's first job failed at once) asks the rejected nodes again on the same
model, at most ``MAX_RETRIES`` times in a row each; only a run in which nothing at all can
arrive still stops, with an ERROR that names the rejections.
"""

from __future__ import annotations

import logging

import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, flwr_logs, model, virtual
from flwr.app import Context, Message

from strategies import EdgeStrategy, FedAsync, FedBuff, InProcessGrid, LoopConfig, ManualClock
from strategies.liveness import MAX_RETRIES

FLUSH = "aggregating them now, fewer than the rule wants"


def _failing(toy: ToyEdge, bad: set[int], times: int | None = None):  # type: ignore[no-untyped-def]
    """``toy``, except that the nodes in ``bad`` raise (``times`` times each, or always)."""
    failures: dict[int, int] = {}

    def app(msg: Message, ctx: Context) -> Message:
        if ctx.node_id in bad and (times is None or failures.get(ctx.node_id, 0) < times):
            failures[ctx.node_id] = failures.get(ctx.node_id, 0) + 1
            raise RuntimeError("device error")
        return toy(msg, ctx)

    return app


@pytest.mark.parametrize("strategy_cls", [EdgeStrategy, FedBuff])
def test_two_of_four_nodes_failing_every_job_do_not_stop_the_run(strategy_cls: type) -> None:
    toy = ToyEdge()
    grid = InProcessGrid(_failing(toy, {1001, 1002}), 4)
    if strategy_cls is EdgeStrategy:
        strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    else:
        strategy = FedBuff(3, clock=virtual())
    with flwr_logs(logging.INFO) as logs:
        strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 5
    for record in strategy.history:
        assert set(record.participants) <= {1003, 1004}
    assert logs.matching(FLUSH, level=logging.WARNING)
    assert not logs.matching("stopping, stalled")
    # what the healthy nodes delivered was aggregated, but for at most one update each that
    # came after the last aggregation (the round budget ends the run, not a stall)
    delivered = sum(1 for k in toy.returned if k[0] in {1003, 1004})
    aggregated = sum(len(r.participants) for r in strategy.history)
    assert delivered - 2 <= aggregated <= delivered


def test_one_transient_failure_of_three_nodes_does_not_stop_the_run() -> None:
    toy = ToyEdge(speeds=[10.0, 20.0, 40.0])
    grid = InProcessGrid(_failing(toy, {1003}, times=1), 3)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    strategy.start(grid, model(0.0), num_rounds=6, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 6
    assert 1003 in {n for r in strategy.history for n in r.participants}  # it came back


def test_a_run_where_nothing_can_arrive_still_stops() -> None:
    grid = InProcessGrid(_failing(ToyEdge(), {1001, 1002, 1003, 1004}), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs(logging.INFO) as logs:
        strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
    assert strategy.history == []
    assert logs.matching("stopping, stalled", level=logging.WARNING)
    # the rejections are named, and each node was asked 1 + MAX_RETRIES times, no more
    (error,) = logs.matching("last reply of every waiting node was rejected", level=logging.ERROR)
    assert "device error" in error
    jobs = [e for e in strategy.events if e.kind == "rejected"]
    assert len(jobs) == 4 * (1 + MAX_RETRIES)


@pytest.mark.parametrize("name", ["edge", "fedbuff", "fedasync"])
def test_every_node_failing_its_first_job_at_once_does_not_end_the_run(name: str) -> None:
    """A transient error on every node at the start (found by a new-user probe: the run
    ended after 0 aggregations with the untrained model, where FedAvg goes on with its next
    round): the rejected nodes are asked again on the same model."""
    toy = ToyEdge()
    nodes = {1001, 1002, 1003, 1004}
    grid = InProcessGrid(_failing(toy, nodes, times=1), 4)
    strategy = {
        "edge": lambda: EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL),
        "fedbuff": lambda: FedBuff(3, clock=virtual()),
        "fedasync": lambda: FedAsync(clock=virtual()),
    }[name]()
    with flwr_logs(logging.INFO) as logs:
        strategy.start(grid, model(0.0), num_rounds=12, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 12
    assert {n for r in strategy.history for n in r.participants} == nodes
    assert logs.matching("asking node(s) 1001, 1002, 1003, 1004 again", level=logging.WARNING)
    assert not logs.matching("stopping, stalled")


def test_no_round_to_run_sends_no_job() -> None:
    """``num_rounds=0`` (found by a new-user probe: every node got a train job whose
    work was thrown away)."""
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    result = strategy.start(grid, model(0.0), num_rounds=0, evaluate_fn=accuracy_fn())
    assert strategy.history == []
    assert not [e for e in strategy.events if e.kind == "sent"]
    assert 0 in result.evaluate_metrics_serverapp


def test_a_node_past_its_deadline_is_not_waited_on_until_the_timeout() -> None:
    """A registered node that never answers (a SuperNode holding a reply after a SuperLink
    restart): once its soft deadline has passed and the others wait, the buffer is
    aggregated, instead of every aggregation waiting for the 600 s timeout."""
    clock = ManualClock()
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0]), 3, clock=clock)
    grid.silence(1003)
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=EQUAL,
        loop=LoopConfig(deadline=5.0, poll_interval=0.5),
    )
    with flwr_logs(logging.INFO) as logs:
        strategy.start(grid, model(0.0), num_rounds=3, timeout=600.0)
    assert len(strategy.history) == 3
    assert strategy.history[-1].time < 60.0  # not 3 x 600 s
    assert logs.matching("past their deadline", level=logging.WARNING)
