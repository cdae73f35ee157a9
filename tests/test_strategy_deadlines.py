"""Default soft deadlines from the observed round trips (wall clock), and a dead node noticed."""

from __future__ import annotations

import pytest
from conftest import EQUAL, ToyEdge, flwr_logs, model, virtual
from flwr.app import Message

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, InProcessGrid, LoopConfig, ManualClock
from strategies.deadlines import WINDOW, DeadlinePolicy

# wall-clock latencies per node (seconds per message; whole jobs: one message per job)
LATENCY = {1001: 1.0, 1002: 2.0, 1003: 3.0, 1004: 4.0}


def _run(kill_after: int | None, silence_after: int | None):  # type: ignore[no-untyped-def]
    clock = ManualClock()
    calls: dict[int, int] = {}
    grid: InProcessGrid

    def latency(node: int, msg: Message) -> float:
        calls[node] = calls.get(node, 0) + 1
        if node == 1001 and kill_after is not None and calls[node] > kill_after:
            grid.kill(1001)
            return 1e6
        if node == 1001 and silence_after is not None and calls[node] > silence_after:
            return 1e6  # registered, but never answers again
        return LATENCY[node]

    grid = InProcessGrid(ToyEdge(), 4, clock=clock, latency=latency)
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=EQUAL,
        loop=LoopConfig(slice_budget=0.0, poll_interval=0.25),
    )
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=8, timeout=3600.0)
    return strategy, grid, caplog.text


def _sends(strategy: EdgeStrategy, node: int) -> list[float]:
    return [e.time for e in strategy.events if e.kind == "sent" and e.node_id == node]


def test_a_silent_node_misses_a_deadline_of_three_round_trips_with_a_floor() -> None:
    strategy, _, text = _run(kill_after=None, silence_after=2)
    late = [e for e in strategy.events if e.kind == "late" and e.node_id == 1001]
    assert len(late) == 1
    # its third message went out at some t; 1001's round trips were 1 s: max(10, 3 x 1) = 10
    third_send = _sends(strategy, 1001)[2]
    assert late[0].time == pytest.approx(third_send + 10.0, abs=0.3)
    assert "node 1001 deadline 10.0 s" in text
    assert "node 1001 missed its 10.0 s deadline" in text
    # the first message of every node had no deadline (no round trip known yet)
    assert all(e.time > 0 for e in strategy.events if e.kind == "late")


def test_a_node_gone_at_its_deadline_is_forgotten_there_not_after_the_timeout() -> None:
    strategy, grid, text = _run(kill_after=2, silence_after=None)
    forgotten = [e for e in strategy.events if e.kind == "forgotten" and e.node_id == 1001]
    third_send = _sends(strategy, 1001)[2]
    assert [e.time for e in forgotten] == pytest.approx([third_send + 10.0], abs=0.3)
    assert 1001 not in grid.get_node_ids()
    assert len(strategy.history) == 8  # the others go on
    assert "sent no reply within" not in text  # not the 3600 s timeout


def test_auto_deadlines_grow_with_slow_round_trips() -> None:
    from strategies.deadlines import DeadlinePolicy

    policy = DeadlinePolicy(LoopConfig(), virtual=False, name="t")
    assert policy.for_node(1) is None  # nothing observed yet
    policy.observe(2, 4.0)
    assert policy.for_node(1) == pytest.approx(12.0)  # every node's: 3 x 4 s
    policy.observe(1, 1.0)
    assert policy.for_node(1) == pytest.approx(10.0)  # its own, floored
    policy.observe(1, 20.0)
    assert policy.for_node(1) == pytest.approx(60.0)
    fixed = DeadlinePolicy(LoopConfig(deadline=7.0), virtual=True, name="t")
    assert fixed.for_node(1) == 7.0
    virtual_auto = DeadlinePolicy(LoopConfig(), virtual=True, name="t")
    virtual_auto.observe(1, 5.0)
    assert virtual_auto.for_node(1) is None
    assert DeadlinePolicy(LoopConfig(deadline=None), virtual=False, name="t").for_node(1) is None


def test_the_virtual_clock_default_sets_no_deadline() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    strategy.start(grid, model(0.0), num_rounds=3)
    assert not [e for e in strategy.events if e.kind == "late"]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"deadline": "soon"}, "deadline must be a number > 0, 'auto' or None"),
        ({"deadline_factor": 0.5}, r"deadline_factor must be >= 1, got 0\.5"),
        ({"deadline_floor": 0.0}, "deadline_floor must be > 0"),
    ],
)
def test_bad_deadline_settings_name_the_field(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        LoopConfig(**options)  # type: ignore[arg-type]


def test_the_end_of_a_run_sends_no_new_work_and_collects_the_last_slices() -> None:
    clock = ManualClock()
    latency = {1001: 2.5, 1002: 1.5, 1003: 1.0, 1004: 0.5}
    grid = InProcessGrid(ToyEdge(), 4, clock=clock, latency=lambda n, m: latency[n])
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=EQUAL,
        loop=LoopConfig(slice_budget=1.0, deadline=None, poll_interval=0.25),
    )
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=3)
    end = strategy.history[-1].time
    final = strategy.history[-1].round
    # nothing goes out with (or after) the final global model
    assert not [e for e in strategy.events if e.kind == "sent" and e.version == final]
    assert not [e for e in strategy.events if e.kind == "sent" and e.time > end]
    # the slices still out at the end were collected (none left queued), and not answered
    assert grid.queued() == 0
    assert "1 message was out at the end; jobs in slices stop at their slice end" in caplog.text
    assert "0 still out after waiting" in caplog.text
    assert "of at most 2.5 s" in caplog.text  # 1001: 2.5 s round trips


def test_auto_deadline_rule_by_hand() -> None:
    # deadline = max(floor, factor * longest of the node's last WINDOW round trips); a node
    # without any takes the longest of every node's; a 0 s round trip is a round trip
    loop = LoopConfig(deadline_factor=3.0, deadline_floor=1.0)
    policy = DeadlinePolicy(loop, virtual=False, name="t")
    assert policy.for_node(1) is None  # nothing observed yet
    policy.observe(1, 0.0)
    assert policy.for_node(1) == 1.0  # floor, from its own (zero) round trip
    for seconds in (2.0, 5.0, 1.5):
        policy.observe(1, seconds)
    assert policy.for_node(1) == 15.0  # 3 x its longest (5.0), not its latest (1.5)
    policy.observe(2, 0.5)
    assert policy.for_node(2) == 1.5  # its own round trips only
    assert policy.for_node(3) == 15.0  # no round trip of its own: the longest of all
    for _ in range(WINDOW):
        policy.observe(1, 1.0)
    assert policy.for_node(1) == 3.0  # 5.0 has left the window
