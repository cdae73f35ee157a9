"""Fault tolerance of EdgeStrategy on the in-process Grid, with faults at exact clock times.

Each test drives ``EdgeStrategy.start`` on :class:`~strategies.InProcessGrid` with a
:class:`ScriptedClock` (a manual clock that kills / restarts nodes or "kills the server" when
its reading passes given times), so the faults happen at known points and a run of many
aggregations takes milliseconds. The same faults on Flower's real runtime are in
``test_faults_deployment.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from fault_clients import (
    HONEST_PROFILE,
    ScriptedClock,
    ServerKilled,
    capture_flwr_logs,
    edge_app,
    error_app,
    initial_model,
    train_config,
)
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode

from flower_edge import wire
from strategies import CheckpointStore, EdgeStrategy, InProcessGrid, LoopConfig, ShareConfig

pytestmark = pytest.mark.timeout(60)  # a hang fails the test instead of blocking the suite

NODES = [1001, 1002, 1003, 1004]
K = 2


def latency(node: int, msg: Message) -> float:
    """Node 100i takes i seconds per message."""
    return float(node % 100)


class Globals:
    """``evaluate_fn`` that remembers the global model of every version (its last call)."""

    def __init__(self) -> None:
        self.by_version: dict[int, dict[str, np.ndarray]] = {}

    def __call__(self, rnd: int, arrays: ArrayRecord) -> MetricRecord:
        self.by_version[rnd] = {k: arrays[k].numpy().copy() for k in arrays}
        return MetricRecord({"accuracy": 0.5})


def make_strategy(clock: ScriptedClock, **loop: float | int | bool | None) -> EdgeStrategy:
    options: dict[str, object] = {"deadline": 6.0, "poll_interval": 0.25}
    options.update(loop)
    return EdgeStrategy(
        threshold=K,
        clock=clock,
        loop=LoopConfig(**options),  # type: ignore[arg-type]
    )


def sent_to(grid: InProcessGrid, node: int, after: float, times: dict[str, float]) -> list[Message]:
    return [
        m
        for m in grid.pushed
        if m.metadata.dst_node_id == node
        and m.metadata.message_type == "train"
        and times[m.metadata.message_id] > after
    ]


def push_times(grid: InProcessGrid, clock: ScriptedClock) -> dict[str, float]:
    """Wrap ``grid.push_messages`` to record the clock reading of each pushed message."""
    times: dict[str, float] = {}
    push = grid.push_messages

    def timed(messages):  # type: ignore[no-untyped-def]
        ids = push(messages)
        for msg_id in ids:
            times[msg_id] = clock.real_now()
        return ids

    grid.push_messages = timed  # type: ignore[method-assign]
    return times


# ---------------------------------------------------------------------- killed node
def test_node_killed_mid_training_is_skipped_then_rejoins_with_the_current_global() -> None:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    times = push_times(grid, clock)
    kill_at, restart_at = 9.0, 20.0
    clock.actions = {kill_at: lambda: grid.kill(1004), restart_at: lambda: grid.restart(1004)}
    strategy = make_strategy(clock)
    globals_ = Globals()
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=12, timeout=20.0, evaluate_fn=globals_)

    # node 1004 was mid-training when killed: a train message was out and never answered
    first_jobs = sent_to(grid, 1004, after=0.0, times=times)
    assert any(times[m.metadata.message_id] < kill_at for m in first_jobs)
    # the server went on after that node's deadline: aggregations while it was down
    down = [h for h in strategy.history if kill_at < h.time < restart_at]
    assert len(down) >= 2, [(h.round, h.time) for h in strategy.history]
    assert all(1004 not in h.participants for h in down)
    late = [e for e in strategy.events if e.node_id == 1004 and e.kind in ("late", "forgotten")]
    assert late, "the dead node's deadline was never noticed"
    assert logs.matching("1004", level=logging.INFO)
    # restarted: it gets a fresh job that carries the then-current global model ...
    rejoin = sent_to(grid, 1004, after=restart_at, times=times)
    assert rejoin, "the restarted node never got a message"
    msg = rejoin[0]
    version = int(train_config(msg)[wire.GLOBAL_VERSION])
    sent_at = times[msg.metadata.message_id]
    assert version >= max([0, *(h.round for h in strategy.history if h.time < sent_at)])
    sent = msg.content[wire.ARRAYS]
    assert isinstance(sent, ArrayRecord)
    expected = globals_.by_version[version]
    assert all(np.array_equal(sent[k].numpy(), expected[k]) for k in expected)
    # ... and takes part in aggregations again
    assert any(1004 in h.participants for h in strategy.history if h.time > restart_at)
    assert len(strategy.history) == 12


@pytest.mark.parametrize("restart_at", [60.0, 200.0])
def test_node_back_after_being_given_up_rejoins(restart_at: float) -> None:
    """A device that is down longer than the message timeout (or several) still rejoins."""
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    times = push_times(grid, clock)
    clock.actions = {9.0: lambda: grid.kill(1004), restart_at: lambda: grid.restart(1004)}
    strategy = make_strategy(clock)
    strategy.start(grid, initial_model(), num_rounds=200, timeout=20.0)
    assert sent_to(grid, 1004, after=restart_at, times=times), "never sent anything again"
    assert any(1004 in h.participants for h in strategy.history if h.time > restart_at)


def test_node_registering_after_the_start_gets_jobs() -> None:
    """A SuperNode restarted without node auth comes back under a new node id."""
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=[*NODES, 1005], clock=clock, latency=latency)
    grid.kill(1005)  # not registered when the run starts
    clock.actions = {20.0: lambda: grid.restart(1005)}
    strategy = make_strategy(clock)
    strategy.start(grid, initial_model(), num_rounds=30, timeout=20.0)
    assert any(1005 in h.participants for h in strategy.history)


# ---------------------------------------------------------------------- node unavailable
def two_seconds(node: int, msg: Message) -> float:
    """Every node takes 2 s per message: replies and aggregations come at the same times."""
    return 2.0


def test_a_lapsed_node_is_answered_node_unavailable_by_the_grid() -> None:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=two_seconds)
    owed = grid.push_messages([Message(RecordDict({}), 1004, "train")])
    grid.lapse(1004)
    assert 1004 not in grid.get_node_ids()
    later = grid.push_messages([Message(RecordDict({}), 1004, "train")])  # accepted
    replies = grid.pull_messages([*owed, *later])
    assert [r.metadata.reply_to_message_id for r in replies] == [*owed, *later]
    assert all(r.has_error() and r.error.code == ErrorCode.NODE_UNAVAILABLE for r in replies)
    assert all(r.metadata.src_node_id == SUPERLINK_NODE_ID for r in replies)
    grid.restart(1004)
    assert 1004 in grid.get_node_ids()


@pytest.mark.parametrize("lapse_at", [0.5, 1.0, 2.0, 3.5, 5.5, 9.0])
def test_node_flower_reports_unavailable_gets_no_job_until_it_is_listed_again(
    lapse_at: float,
) -> None:
    """Found by a deployment probe: a SIGKILLed SuperNode's job came back as Flower's "Node
    Unavailable" error; it was rejected like a ClientApp's error, so the node only waited for
    the next global version, and was sent a job with it (accepted by the SuperLink, answered
    with the same error) until membership was next re-read (every 5 s here)."""
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=two_seconds)
    times = push_times(grid, clock)
    restart_at = 30.0
    clock.actions = {lapse_at: lambda: grid.lapse(1004), restart_at: lambda: grid.restart(1004)}
    strategy = make_strategy(clock)
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=20, timeout=20.0)
    down = [
        times[m.metadata.message_id]
        for m in sent_to(grid, 1004, after=lapse_at, times=times)
        if times[m.metadata.message_id] < restart_at
    ]
    assert down == [], "jobs sent to a node that Flower reported unavailable"
    noticed = [e for e in strategy.events if e.node_id == 1004 and e.time == lapse_at]
    assert [e.kind for e in noticed] == ["forgotten"]
    assert "node unavailable" in noticed[0].detail
    assert logs.matching("node 1004 is unavailable", level=logging.WARNING)
    # restarted: listed again, it gets a job with the full model and takes part again
    assert sent_to(grid, 1004, after=restart_at, times=times)
    assert logs.matching("node 1004 is back")
    assert any(1004 in h.participants for h in strategy.history if h.time > restart_at)
    assert len(strategy.history) == 20


def test_a_server_resumed_while_a_node_is_unavailable_takes_it_back_once_listed(
    tmp_path: Path,
) -> None:
    """The server is killed while a node is gone on Flower's node-unavailable error; the
    resumed run gets no job to it while the grid does not list it, and takes it back after."""
    ckpt, restart_at = tmp_path / "ckpt", 10.0
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=two_seconds)
    first = make_strategy(clock)
    first.checkpoint_dir = ckpt

    def kill_after_four() -> None:
        if len(first.history) >= 4:
            raise ServerKilled

    clock.actions = {3.5: lambda: grid.lapse(1004)}
    clock.actions.update({t / 4: kill_after_four for t in range(20, 400)})
    with pytest.raises(ServerKilled):
        first.start(grid, initial_model(), num_rounds=12, timeout=20.0)
    assert [e.kind for e in first.events if e.node_id == 1004 and e.time == 3.5] == ["forgotten"]

    clock2 = ScriptedClock({restart_at: lambda: grid2.restart(1004)})
    grid2 = InProcessGrid(edge_app(), node_ids=NODES, clock=clock2, latency=two_seconds)
    grid2.lapse(1004)  # still down when the server comes back
    times = push_times(grid2, clock2)
    second = make_strategy(clock2)
    second.checkpoint_dir, second.resume = ckpt, True
    with capture_flwr_logs() as logs:
        second.start(grid2, initial_model(), num_rounds=12, timeout=20.0)
    assert logs.matching("resumed", "round 4")
    assert len(second.history) == 12
    sent = [times[m.metadata.message_id] for m in sent_to(grid2, 1004, after=0.0, times=times)]
    assert sent, "the node was not taken back once listed"
    assert min(sent) >= restart_at, "a job went to a node the grid did not list"
    assert any(1004 in h.participants for h in second.history[4:])


def test_node_whose_clientapp_raised_still_gets_the_next_job() -> None:
    """Only Flower's node-unavailable error makes a node gone; a ClientApp's exception is a
    rejected reply, and the node gets a job with the next global version."""
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=two_seconds)
    times = push_times(grid, clock)
    honest = edge_app()
    calls: list[int] = []

    def raises_once(msg: Message, context: Context) -> Message:
        calls.append(1)
        if len(calls) == 3:  # its second job
            raise RuntimeError("disk full")
        return honest(msg, context)

    grid.set_app(1004, raises_once)
    strategy = make_strategy(clock)
    strategy.start(grid, initial_model(), num_rounds=6, timeout=20.0)
    rejected = [e for e in strategy.events if e.node_id == 1004 and e.kind == "rejected"]
    assert len(rejected) == 1
    assert "disk full" in rejected[0].detail
    after = sent_to(grid, 1004, after=rejected[0].time, times=times)
    assert after, "the node whose ClientApp raised got no new job"
    assert any(1004 in h.participants for h in strategy.history if h.time > rejected[0].time)


# ---------------------------------------------------------------------- server killed
def _audit_is_exact(store: CheckpointStore, rounds: int) -> None:
    audit = store.audit()
    by_round: dict[int, list[tuple[int, int]]] = {}
    for entry in audit:
        by_round.setdefault(int(entry["round"]), []).append((int(entry["node"]), int(entry["job"])))
    assert sorted(by_round) == list(range(1, rounds + 1)), sorted(by_round)
    assert all(len(v) == K + 1 for v in by_round.values()), {
        k: v for k, v in by_round.items() if len(v) != K + 1
    }
    pairs = [p for v in by_round.values() for p in v]
    assert len(pairs) == len(set(pairs)), "an update was counted twice"


@pytest.mark.parametrize(
    "crash",
    ["between-rounds", "mid-checkpoint"],
)
def test_server_killed_after_round_r_resumes_at_r_plus_1(
    tmp_path: Path, crash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, total = 4, 9
    ckpt = tmp_path / "ckpt"

    # first server: killed (no cleanup, like SIGKILL) after aggregation r
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    first = make_strategy(clock)
    first.checkpoint_dir = ckpt
    killed_at: list[float] = []

    def kill_if_past_r() -> None:
        if len(first.history) >= r:
            killed_at.append(clock.real_now())
            raise ServerKilled

    if crash == "between-rounds":
        clock.actions = {float(t) / 4: kill_if_past_r for t in range(1, 4000)}
    else:  # killed after writing round r+1's audit lines but before its state
        save = CheckpointStore.save

        def dying_save(self: CheckpointStore, round_: int, *args: object, **kw: object) -> None:
            if round_ == r + 1:
                raise ServerKilled
            save(self, round_, *args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(CheckpointStore, "save", dying_save)
    with pytest.raises(ServerKilled):
        first.start(grid, initial_model(), num_rounds=total, timeout=20.0)
    monkeypatch.undo()
    store = CheckpointStore(ckpt)
    assert store.load().round == r
    if crash == "mid-checkpoint":
        assert any(int(e["round"]) == r + 1 for e in store.audit())  # the torn write

    # second server process: same nodes (their SuperNodes survived), new run, resume
    clock2 = ScriptedClock()
    grid2 = InProcessGrid(edge_app(), node_ids=NODES, clock=clock2, latency=latency)
    second = make_strategy(clock2)
    second.checkpoint_dir, second.resume = ckpt, True
    with capture_flwr_logs() as logs:
        result = second.start(grid2, initial_model(), num_rounds=total, timeout=20.0)
    assert logs.matching("resumed", f"round {r}")
    assert [h.round for h in second.history] == list(range(1, total + 1))
    resumed = [h for h in second.history if h.round > r]
    assert [h.round for h in resumed][0] == r + 1
    # nothing aggregated before the kill is aggregated again ...
    before = {
        (n, j)
        for h in first.history
        if h.round <= r
        for n, j in zip(h.participants, h.job_ids, strict=True)
    }
    after = {(n, j) for h in resumed for n, j in zip(h.participants, h.job_ids, strict=True)}
    assert not before & after, "an update aggregated before the kill was aggregated again"
    _audit_is_exact(store, total)
    # ... and nothing the first server accepted is lost: every update it accepted is audited,
    # or still buffered (persisted) when the second run reached its round budget
    audited = {(int(e["node"]), int(e["job"])) for e in store.audit()}
    buffered = {(int(e["node"]), int(e["job"])) for e, _ in store.buffered(2)}
    accepted = {(e.node_id, e.job_id) for e in first.events if e.kind == "finished"}
    assert accepted <= audited | buffered, sorted(accepted - audited - buffered)
    assert not audited & buffered
    assert sorted(result.train_metrics_clientapp) == list(range(1, total + 1))


# ---------------------------------------------------------------------- lost / expired
def test_expired_and_missing_replies_are_handled_by_deadlines() -> None:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    grid.silence(1003)  # swallows every message: its replies never come
    grid.set_app(1004, error_app())  # every reply is the SuperLink's "message expired" error
    strategy = EdgeStrategy(
        threshold=1, clock=clock, loop=LoopConfig(deadline=6.0, poll_interval=0.25)
    )
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=20, timeout=15.0)
    assert len(strategy.history) == 20
    assert all(set(h.participants) <= {1001, 1002} for h in strategy.history)
    kinds_1003 = {e.kind for e in strategy.events if e.node_id == 1003}
    assert {"late", "forgotten"} <= kinds_1003, kinds_1003
    rejected = [e for e in strategy.events if e.node_id == 1004 and e.kind == "rejected"]
    assert rejected
    assert "expired" in rejected[0].detail
    assert logs.matching("1003", level=logging.INFO)
    assert logs.matching("1004", "expired", level=logging.WARNING)


def test_no_reply_ever_stops_the_run_instead_of_hanging() -> None:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    for node in NODES:
        grid.silence(node)
    strategy = make_strategy(clock, time_budget=3600.0)
    result = strategy.start(grid, initial_model(), num_rounds=5, timeout=15.0)
    assert strategy.history == []
    assert np.array_equal(result.arrays["w"].numpy(), np.zeros(3, dtype=np.float32))
    assert clock.real_now() <= 3600.0 + 15.0


# ---------------------------------------------------------------------- hostile client
def _nan(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**a, "w": np.array([np.nan, 0, 0], dtype=np.float32)}


def _inf(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**a, "m": np.full((2, 2), np.inf, dtype=np.float32)}


def _shape(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**a, "w": np.zeros(4, dtype=np.float32)}


def _missing(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"w": a["w"]}


def _dtype(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**a, "w": np.array(["a", "b", "c"])}


HOSTILE_ARRAYS: dict[str, Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]] = {
    "nan": _nan,
    "inf": _inf,
    "wrong-shape": _shape,
    "missing-array": _missing,
    "non-numeric": _dtype,
}


def _run_with_hostile(
    app: Callable[..., Message], **shares: object
) -> tuple[EdgeStrategy, list[str], InProcessGrid]:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    grid.set_app(1003, app)
    strategy = EdgeStrategy(
        threshold=K,
        clock=clock,
        loop=LoopConfig(deadline=6.0, poll_interval=0.25),
        shares=ShareConfig(**shares) if shares else None,  # type: ignore[arg-type]
    )
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=4, timeout=20.0)
    return strategy, logs.messages(logging.WARNING), grid


@pytest.mark.parametrize("name", sorted(HOSTILE_ARRAYS))
def test_hostile_arrays_are_rejected_and_logged_with_the_node_id(name: str) -> None:
    strategy, warnings, _ = _run_with_hostile(edge_app(corrupt=HOSTILE_ARRAYS[name]))
    assert len(strategy.history) == 4, "the honest nodes were held up"
    assert all(1003 not in h.participants for h in strategy.history)
    assert [e for e in strategy.events if e.node_id == 1003 and e.kind == "rejected"]
    assert [w for w in warnings if "1003" in w and "reject" in w]
    # the others are unaffected: every honest update is global + 1, so version 1 is exactly 1
    first = strategy.history[0]
    assert first.base_versions == (0,) * (K + 1)


def test_first_global_of_honest_nodes_is_exact() -> None:
    globals_ = Globals()
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=latency)
    grid.set_app(1003, edge_app(corrupt=_nan))
    EdgeStrategy(threshold=K, clock=clock, loop=LoopConfig(deadline=6.0)).start(
        grid, initial_model(), num_rounds=1, timeout=20.0, evaluate_fn=globals_
    )
    assert np.array_equal(globals_.by_version[1]["w"], np.ones(3, dtype=np.float32))
    assert all(np.isfinite(v).all() for g in globals_.by_version.values() for v in g.values())


@pytest.mark.parametrize("claim", [10**9, -5, 0])
def test_absurd_num_examples_is_rejected(claim: int) -> None:
    strategy, warnings, _ = _run_with_hostile(edge_app(num_examples=lambda share: claim))
    assert len(strategy.history) == 4
    assert all(1003 not in h.participants for h in strategy.history)
    assert [w for w in warnings if "1003" in w]


def test_profile_claiming_1000x_the_best_honest_node_is_capped() -> None:
    boast = tuple(1000.0 * v for v in HONEST_PROFILE)
    strategy, _, grid = _run_with_hostile(
        edge_app(profile=boast),
        max_share_fraction=0.4,
        total_samples=400,  # type: ignore[arg-type]
    )
    shares = {
        m.metadata.dst_node_id: int(train_config(m)[wire.SAMPLE_SHARE])
        for m in grid.pushed
        if m.metadata.message_type == "train" and wire.SAMPLE_SHARE in train_config(m)
    }
    assert shares[1003] <= 0.4 * 400
    assert all(shares[n] > 0 for n in NODES)
    assert len(strategy.history) == 4


def test_profile_boast_is_logged_with_the_node_id() -> None:
    boast = tuple(1000.0 * v for v in HONEST_PROFILE)
    _, warnings, _ = _run_with_hostile(
        edge_app(profile=boast), max_share_fraction=0.4, total_samples=400
    )  # type: ignore[arg-type]
    assert [w for w in warnings if "1003" in w and ("cap" in w or "clamp" in w)], warnings
