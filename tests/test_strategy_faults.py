"""Bad replies, invalid settings, deadlines, lost and restarted nodes."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, flwr_logs, model
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies import (
    EdgeStrategy,
    FedAsync,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ManualClock,
    ShareConfig,
    StopConfig,
    ValuationConfig,
    VirtualClock,
)

EQUAL = ShareConfig(profile=False, total_samples=400, rebalance="off")


def virtual() -> VirtualClock:
    return VirtualClock(wall=ManualClock())


def _reply(msg: Message, arrays: dict[str, np.ndarray] | None, metrics: dict) -> Message:  # type: ignore[type-arg]
    content = RecordDict({wire.METRICS: MetricRecord(metrics)})
    if arrays is not None:
        content[wire.ARRAYS] = ArrayRecord({k: Array(v) for k, v in arrays.items()})
    return Message(content, reply_to=msg)


def _good_arrays() -> dict[str, np.ndarray]:
    return {"w": np.ones(3, dtype=np.float32), "steps": np.array([1], dtype=np.int64)}


def _cfg(msg: Message, key: str) -> int:
    return int(msg.content.config_records[wire.CONFIG][key])  # type: ignore[arg-type]


def _protocol(msg: Message, **over: object) -> dict:  # type: ignore[type-arg]
    metrics = {
        wire.NUM_EXAMPLES: 10,
        wire.DONE: 1,
        wire.JOB_ID: _cfg(msg, wire.JOB_ID),
        wire.BASE_VERSION: _cfg(msg, wire.GLOBAL_VERSION),
        wire.VIRTUAL_SECONDS: 1.0,
    }
    metrics.update(over)  # type: ignore[arg-type]
    return metrics


def _raises(msg: Message, ctx: Context) -> Message:
    raise RuntimeError("disk full")


BAD: dict[str, tuple[Callable[[Message, Context], Message], str]] = {
    "error": (_raises, "client error for node .* disk full"),
    "shape": (
        lambda m, c: _reply(m, {"w": np.ones(4, np.float32), "steps": np.array([1])}, _protocol(m)),
        r"array 0 \('w'\) has shape",
    ),
    "nan": (
        lambda m, c: _reply(
            m, {"w": np.array([1, np.nan, 1], np.float32), "steps": np.array([1])}, _protocol(m)
        ),
        "NaN or Inf",
    ),
    "dtype": (
        lambda m, c: _reply(m, {"w": np.ones(3, np.int32), "steps": np.array([1])}, _protocol(m)),
        "non-float dtype",
    ),
    "names": (
        lambda m, c: _reply(m, {"x": np.ones(3, np.float32)}, _protocol(m)),
        # found by a new-user probe: the message named neither the missing nor the extra array
        r"array names differ .*missing 'w', 'steps'; unexpected 'x'",
    ),
    "missing-examples": (
        lambda m, c: _reply(
            m, _good_arrays(), {k: v for k, v in _protocol(m).items() if k != wire.NUM_EXAMPLES}
        ),
        "'num-examples' is missing",
    ),
    "negative-examples": (
        lambda m, c: _reply(m, _good_arrays(), _protocol(m, **{wire.NUM_EXAMPLES: -5})),
        "num-examples must be >= 0",
    ),
    "absurd-examples": (
        lambda m, c: _reply(m, _good_arrays(), _protocol(m, **{wire.NUM_EXAMPLES: 10**9})),
        "absurd num-examples",
    ),
    "job-id": (
        lambda m, c: _reply(m, _good_arrays(), _protocol(m, **{wire.JOB_ID: 999_999})),
        "job id 999999 but the message was for job",
    ),
    "base-version": (
        lambda m, c: _reply(m, _good_arrays(), _protocol(m, **{wire.BASE_VERSION: 7})),
        "base version 7 was never sent",
    ),
    "no-arrays": (lambda m, c: _reply(m, None, _protocol(m)), "finished update carries no arrays"),
}


def test_bad_replies_are_rejected_with_node_and_reason_and_never_aggregated() -> None:
    n_good = 4
    grid = InProcessGrid(ToyEdge(), n_good + len(BAD))
    bad_nodes = {}
    for offset, (name, (app, _)) in enumerate(BAD.items()):
        node = 1001 + n_good + offset
        grid.set_app(node, app)
        bad_nodes[node] = name
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 3
    for record in strategy.history:
        assert not set(record.participants) & set(bad_nodes)
    rejected = [e for e in strategy.events if e.kind == "rejected"]
    for node, name in bad_nodes.items():
        reasons = [e.detail for e in rejected if e.node_id == node]
        assert reasons, f"{name} was not rejected"
        assert any(__import__("re").search(BAD[name][1], r) for r in reasons), (name, reasons)
        assert f"rejected reply of node {node}" in caplog.text


def test_the_same_rejection_of_a_node_is_warned_three_times_then_logged_at_debug() -> None:
    """A ClientApp that never trains would repeat one WARNING at every job of the run."""
    grid = InProcessGrid(ToyEdge(), 5)
    grid.set_app(1005, BAD["missing-examples"][0])
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs(logging.DEBUG) as caplog:
        strategy.start(grid, model(0.0), num_rounds=8, evaluate_fn=accuracy_fn())
    rejected = [e for e in strategy.events if e.kind == "rejected" and e.node_id == 1005]
    assert len(rejected) > 3  # every rejection is recorded
    lines = [r for r in caplog.records if "rejected reply of node 1005" in r.getMessage()]
    assert len(lines) == len(rejected)
    assert [r.levelno for r in lines] == [logging.WARNING] * 3 + [logging.DEBUG] * (
        len(rejected) - 3
    )
    assert "logged at DEBUG from now on" in lines[2].getMessage()


def test_duplicate_and_foreign_replies_are_rejected() -> None:
    seen: set[str] = set()

    def order(replies: list[Message]) -> list[Message]:
        out = list(replies)
        for reply in replies:
            if reply.metadata.src_node_id == 1001 and reply.metadata.message_id not in seen:
                seen.add(reply.metadata.message_id)
                out.append(reply)  # delivered twice
            if reply.metadata.src_node_id == 1002 and not seen & {"forged"}:
                seen.add("forged")
                reply.metadata.__dict__["_src_node_id"] = 4242  # claims another node
        return out

    grid = InProcessGrid(ToyEdge(), 5, order=order)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    strategy.start(grid, model(0.0), num_rounds=3)
    rejected = [e for e in strategy.events if e.kind == "rejected"]
    assert [e.detail for e in rejected if e.node_id == 1001][:1] == ["unknown or consumed message"]
    assert any("reply from node 4242 to a message for node 1002" in e.detail for e in rejected)
    counted = [
        (n, j) for h in strategy.history for n, j in zip(h.participants, h.job_ids, strict=True)
    ]
    assert len(counted) == len(set(counted))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: EdgeStrategy(threshold=0), "threshold K must be an integer >= 1"),
        (lambda: EdgeStrategy(threshold=2, decay="linear"), "decay must be one of"),
        (lambda: EdgeStrategy(threshold=2, decay_a=0.0), "decay parameter a must be"),
        (lambda: EdgeStrategy(threshold=2, decay="hinge", decay_b=-1.0), "parameter b"),
        (lambda: EdgeStrategy(threshold=2, resume=True), "resume=True needs checkpoint_dir"),
        (lambda: LoopConfig(deadline=0.0), r"deadline must be > 0, got 0\.0"),
        (lambda: LoopConfig(poll_interval=math.nan), "poll_interval must be a finite number > 0"),
        (lambda: LoopConfig(min_nodes=0), "min_nodes must be an integer >= 1, got 0"),
        (lambda: LoopConfig(max_misses=True), "max_misses must be an integer >= 1, got True"),
        (lambda: ShareConfig(total_samples=-1), r"total_samples must be an integer in \[0, "),
        (lambda: ValuationConfig(metric_key=""), "metric_key must be a non-empty string"),
        (lambda: StopConfig(target=math.inf), "target must be a finite number, got inf"),
        (lambda: EdgeStrategy(threshold=2, resume=1), "resume must be a boolean"),  # type: ignore[arg-type]
        (lambda: LoopConfig(staleness_bound=-1), "staleness_bound must be an integer >= 0"),
        (lambda: ShareConfig(rebalance="fast"), "rebalance must be one of seed, optimal, off"),  # type: ignore[arg-type]
        (lambda: ShareConfig(compute_share=1.5), r"compute_share must be in \[0, 1\]"),
        (lambda: ShareConfig(max_share_fraction=0.0), "max_share_fraction must be"),
        (lambda: ValuationConfig(mode="shapley"), "valuation mode must be one of"),  # type: ignore[arg-type]
        (lambda: ValuationConfig(mode="first-order"), "needs gradient_fn"),
        (lambda: StopConfig(patience=0), "patience must be an integer >= 1"),
        (lambda: FedAsync(alpha=0.0), r"alpha must be in \(0, 1\]"),
        (lambda: FedAsync(staleness_fn="exp"), "staleness_fn must be one of"),  # type: ignore[arg-type]
        (lambda: FedBuff(threshold=2, server_lr=-1.0), "server_lr must be"),
        (lambda: EdgeStrategy(2, loop={"slice_budget": 1}), "loop must be a LoopConfig, got dict"),  # type: ignore[arg-type]
        (lambda: EdgeStrategy(2, shares=LoopConfig()), "shares must be a ShareConfig, got Loop"),  # type: ignore[arg-type]
        (lambda: EdgeStrategy(2, stop=3), "stop must be a StopConfig, got int"),  # type: ignore[arg-type]
        (lambda: EdgeStrategy(2, clock="wall"), "clock must be a strategies Clock, got str"),  # type: ignore[arg-type]
        (lambda: EdgeStrategy(2, checkpoint_dir=123), "checkpoint_dir must be a folder name"),  # type: ignore[arg-type]
        (lambda: EdgeStrategy(2, checkpoint_dir="/etc/passwd"), "exists and is not a folder"),
        (lambda: ShareConfig(profile="yes"), "profile must be a boolean"),  # type: ignore[arg-type]
        (lambda: LoopConfig(accept_late="no"), "accept_late must be a boolean"),  # type: ignore[arg-type]
        (
            lambda: ShareConfig(input_shape=(32, -1)),
            r"input_shape must be a tuple .* got \(32, -1\)",
        ),
        (lambda: ShareConfig(input_shape="32,64"), "input_shape must be a tuple"),  # type: ignore[arg-type]
        (
            lambda: ValuationConfig(mode="first-order", gradient_fn=5),
            "gradient_fn must be callable",
        ),  # type: ignore[arg-type]
    ],
)
def test_invalid_settings_raise_a_clear_error(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: FedAsync(threshold=3), "unexpected keyword argument 'threshold'"),  # type: ignore[call-arg]
        (lambda: FedBuff(threshold=2, treshold=3), "unexpected keyword argument 'treshold'"),  # type: ignore[call-arg]
        (lambda: EdgeStrategy(threshold=2, lopo=None), "unexpected keyword argument 'lopo'"),  # type: ignore[call-arg]
    ],
)
def test_a_wrong_constructor_option_is_an_error_not_dropped(
    make: Callable[[], object], match: str
) -> None:
    with pytest.raises(TypeError, match=match):
        make()


def test_each_strategy_validator_names_its_field() -> None:
    with pytest.raises(ConfigError, match=r"server_lr must be in \(0, 1\], got 1.5"):
        EdgeStrategy.validate_options("models", 1.5)
    assert EdgeStrategy.validate_options("deltas", 1.5) == ("deltas", 1.5)
    with pytest.raises(ConfigError, match="aggregate must be one of models, deltas"):
        EdgeStrategy.validate_options("sum", 0.5)
    with pytest.raises(ConfigError, match="server_lr must be > 0, got 0"):
        FedBuff.validate_options(0)
    with pytest.raises(ConfigError, match="staleness_fn must be one of"):
        FedAsync.validate_options(0.5, "exp", 0.5, 4.0)
    assert FedAsync.validate_options(0.5, "hinge", 0.5, 4.0) == "hinge"


def test_threshold_not_below_the_number_of_nodes_raises_before_any_message() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(threshold=4, clock=virtual(), loop=LoopConfig(min_nodes=4))
    with pytest.raises(ConfigError, match=r"threshold K = 4 must be < the number of nodes \(4\)"):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


def test_too_few_nodes_registered_raises_before_any_message() -> None:
    grid = InProcessGrid(ToyEdge(), 3)
    strategy = EdgeStrategy(threshold=3, clock=VirtualClock(wall=ManualClock()))
    with pytest.raises(
        ConfigError, match="only 3 nodes registered within 120.0 s; need at least 4.*threshold K"
    ):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


def test_a_simulated_federation_too_small_fails_within_seconds_naming_the_fix() -> None:
    class InMemoryGrid(InProcessGrid):  # Flower's simulation grid, by name
        pass

    wall = ManualClock()
    grid = InMemoryGrid(ToyEdge(), 2)
    strategy = EdgeStrategy(threshold=2, clock=VirtualClock(wall=wall))
    with pytest.raises(ConfigError) as caught:
        strategy.start(grid, model(0.0), num_rounds=1)
    message = str(caught.value)
    assert "the simulated federation has 2 nodes; this strategy needs at least 3" in message
    assert "set threshold K below the number of nodes" in message
    assert '--federation-config "num-supernodes=3"' in message
    assert wall.real_now() <= 3.5  # not the 120 s registration timeout
    assert grid.pushed == []


def test_share_cap_below_one_over_n_raises_before_any_message() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=2, clock=virtual(), shares=ShareConfig(max_share_fraction=0.2)
    )
    with pytest.raises(ConfigError, match="max_share_fraction = 0.2 must be >= 1 / number"):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


def test_missing_metric_key_raises_before_any_train_message() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=2, clock=virtual(), shares=EQUAL, valuation=ValuationConfig(metric_key="f1")
    )
    with pytest.raises(ConfigError, match="evaluate_fn returned no metric 'f1'"):
        strategy.start(grid, model(0.0), num_rounds=1, evaluate_fn=accuracy_fn())
    assert grid.pushed == []


def test_default_settings_run_on_an_evaluate_fn_that_names_its_metrics_otherwise() -> None:
    """A drop-in app whose evaluate_fn returns no 'accuracy' runs, told what is off and why."""

    def centralized(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        m = accuracy_fn()(rnd, arrays)
        return MetricRecord({"centralized_accuracy": m["accuracy"], "loss": m["loss"]})

    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs() as caplog:
        result = strategy.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3, evaluate_fn=centralized
        )
    assert len(strategy.history) == 3
    assert "returns no 'accuracy' metric (it returns ['centralized_accuracy', 'loss'])" in (
        caplog.text
    )
    assert "ValuationConfig(metric_key=...)" in caplog.text
    assert all(r.values == (1 / 3,) * 3 for r in strategy.history)  # equal values
    assert set(result.evaluate_metrics_serverapp) == {0, 1, 2, 3}
    # with the key named, the same app is valued
    named = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        valuation=ValuationConfig(metric_key="centralized_accuracy"),
    )
    named.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3, evaluate_fn=centralized)
    assert any(r.values != (1 / 3,) * 3 for r in named.history)


def test_a_round_whose_evaluation_lacks_the_metric_is_warned_once() -> None:
    """evaluate_fn returns the valuation metric at round 0 but not at the later rounds (a
    last round that reports only test metrics, say): equal values there, one WARNING."""

    def later_without(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        m = accuracy_fn()(rnd, arrays)
        return m if rnd < 2 else MetricRecord({"test_accuracy": m["accuracy"]})

    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs() as caplog:
        strategy.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=4, evaluate_fn=later_without
        )
    warned = [r for r in caplog.records if "evaluate_fn returned no number for" in r.getMessage()]
    assert len(warned) == 1
    assert "round 2" in warned[0].getMessage()
    assert "'accuracy' (it returned ['test_accuracy'])" in warned[0].getMessage()
    assert strategy.history[0].values != (1 / 3,) * 3  # round 1 is valued
    assert all(r.values == (1 / 3,) * 3 for r in strategy.history[1:])  # equal values after


def test_fedbuff_threshold_may_equal_the_number_of_nodes_but_not_exceed_it() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    FedBuff(threshold=4, clock=virtual(), shares=EQUAL).start(grid, model(0.0), num_rounds=1)
    strategy = FedBuff(threshold=5, clock=virtual(), shares=EQUAL, loop=LoopConfig(min_nodes=4))
    with pytest.raises(ConfigError, match=r"threshold K = 5 must be <= the number of nodes \(4\)"):
        strategy.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=1)


def test_a_late_update_is_counted_exactly_once_with_its_decayed_weight() -> None:
    toy = ToyEdge()  # durations 10.5, 5.5, 3.0, 1.75 s
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        loop=LoopConfig(deadline=6.0, slice_budget=0.0),  # whole jobs: 1001 misses it
    )
    strategy.start(grid, model(0.0), num_rounds=4, evaluate_fn=accuracy_fn())
    late = [e for e in strategy.events if e.kind == "late"]
    assert [(e.node_id, e.time) for e in late][:1] == [(1001, 6.0)]
    counted = [
        (n, j, w, lt, d)
        for h in strategy.history
        for n, j, w, lt, d in zip(
            h.participants, h.job_ids, h.raw_weights, h.late, h.delays, strict=True
        )
    ]
    first_job = [c for c in counted if c[0] == 1001 and c[1] == late[0].job_id]
    assert len(first_job) == 1
    _, _, weight, was_late, delay = first_job[0]
    assert was_late
    assert delay == pytest.approx(10.5)
    assert weight == pytest.approx(100.0 * (1.0 + 10.5) ** -0.5)
    assert len({(c[0], c[1]) for c in counted}) == len(counted)


def test_late_updates_are_rejected_when_accept_late_is_off() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        loop=LoopConfig(deadline=6.0, accept_late=False, slice_budget=0.0),
    )
    strategy.start(grid, model(0.0), num_rounds=3)
    assert not [n for h in strategy.history for n in h.participants if n == 1001]
    assert any(
        e.kind == "rejected" and e.node_id == 1001 and "deadline" in e.detail
        for e in strategy.events
    )


def test_staleness_bound_rejects_old_updates() -> None:
    grid = InProcessGrid(ToyEdge(speeds=[5.0, 50.0, 60.0, 70.0]), 4)
    # whole jobs (no slices): the slow node cannot abandon its stale work, so it arrives stale
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=EQUAL,
        loop=LoopConfig(staleness_bound=1, slice_budget=0.0),
    )
    strategy.start(grid, model(0.0), num_rounds=12)
    assert max(s for h in strategy.history for s in h.staleness) <= 1
    assert any(e.kind == "rejected" and "beyond the bound 1" in e.detail for e in strategy.events)


def test_wall_clock_orders_by_arrival_and_deadlines_fire_on_the_clock() -> None:
    clock = ManualClock()
    delays = {1001: 9.0, 1002: 4.0, 1003: 2.0, 1004: 1.0}
    grid = InProcessGrid(ToyEdge(), 4, clock=clock, latency=lambda n, m: delays[n])
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=EQUAL,
        loop=LoopConfig(deadline=5.0, poll_interval=0.25, slice_budget=0.0),
    )
    strategy.start(grid, model(0.0), num_rounds=2)
    first = strategy.history[0]
    assert first.participants == (1004, 1003, 1002)
    assert first.delays == pytest.approx((1.0, 2.0, 4.0), abs=0.25)
    late = [e for e in strategy.events if e.kind == "late"]
    assert late[0].node_id == 1001
    assert late[0].time == pytest.approx(5.0, abs=0.25)


def test_a_silent_node_is_forgotten_after_the_timeout_and_the_run_goes_on() -> None:
    clock = ManualClock()
    grid = InProcessGrid(ToyEdge(), 4, clock=clock, latency=lambda n, m: 1.0)
    grid.silence(1004)
    strategy = EdgeStrategy(threshold=2, clock=clock, shares=EQUAL)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=12, timeout=3.0)
    assert len(strategy.history) == 12
    assert all(1004 not in h.participants for h in strategy.history)
    assert "node 1004 sent no reply within 3.0 s: message forgotten" in caplog.text
    assert "node 1004 dropped (3 missed messages in a row) until it registers again" in caplog.text
    assert len([e for e in strategy.events if e.kind == "forgotten"]) == 3


def test_too_few_nodes_left_aggregate_what_they_deliver() -> None:
    """Two of four nodes never answer: K = 2 cannot be passed, so at each stall the two
    healthy nodes' buffered updates are aggregated (logged) instead of the run stopping
    with them lost (tests/test_strategy_stall_flush.py)."""
    clock = ManualClock()
    grid = InProcessGrid(ToyEdge(), 4, clock=clock)
    strategy = EdgeStrategy(threshold=2, clock=clock, shares=EQUAL)
    grid.kill(1003)
    grid.kill(1004)
    strategy_min = EdgeStrategy(
        threshold=2, clock=clock, shares=EQUAL, loop=LoopConfig(min_nodes=2)
    )
    with pytest.raises(ConfigError, match="threshold K = 2 must be < the number of nodes"):
        strategy_min.start(grid, model(0.0), num_rounds=3, timeout=10.0)
    grid.restart(1003)
    grid.restart(1004)
    grid.silence(1003)
    grid.silence(1004)
    result = strategy.start(grid, model(0.0), num_rounds=3, timeout=10.0)
    assert len(strategy.history) == 3
    for record in strategy.history:  # only two nodes can answer: the count never passes K
        assert set(record.participants) <= {1001, 1002}
    assert set(result.train_metrics_clientapp) == {1, 2, 3}


def test_a_restarted_node_rejoins_with_a_fresh_job() -> None:
    clock = ManualClock()
    toy = ToyEdge()
    grid = InProcessGrid(toy, 4, clock=clock, latency=lambda n, m: 1.0 if n != 1001 else 50.0)
    strategy = EdgeStrategy(
        threshold=2, clock=clock, shares=EQUAL, loop=LoopConfig(poll_interval=1.0)
    )

    real_push = grid.push_messages
    restarted: list[int] = []

    def push(messages):  # type: ignore[no-untyped-def]
        ids = real_push(messages)
        if clock.now() > 5.0 and not restarted:
            restarted.append(1001)
            grid.restart(1001)  # loses its queued reply and its state
        return ids

    grid.push_messages = push  # type: ignore[method-assign]
    strategy.start(grid, model(0.0), num_rounds=30, timeout=20.0)
    assert restarted
    forgotten = [e for e in strategy.events if e.kind == "forgotten" and e.node_id == 1001]
    assert len(forgotten) == 1
    later = [
        e for e in strategy.events if e.kind == "sent" and e.node_id == 1001 and e.time >= 20.0
    ]
    assert later
    assert later[0].job_id > forgotten[0].job_id


def test_a_node_that_registers_later_joins_with_the_median_share() -> None:
    clock = ManualClock()
    grid = InProcessGrid(ToyEdge(), 5, clock=clock, latency=lambda n, m: 1.0)
    grid.kill(1005)  # not registered at the start
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=ShareConfig(profile=False, total_samples=400, rebalance="off"),
        loop=LoopConfig(min_nodes=4, poll_interval=0.5),
    )
    real_push = grid.push_messages
    joined: list[float] = []

    def push(messages):  # type: ignore[no-untyped-def]
        if clock.now() > 5.0 and not joined:
            joined.append(clock.now())
            grid.restart(1005)  # registers now
        return real_push(messages)

    grid.push_messages = push  # type: ignore[method-assign]
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=20, timeout=30.0)
    assert "node 1005 joined: share 100 (the median)" in caplog.text
    assert any(1005 in h.participants for h in strategy.history)
    assert min(e.time for e in strategy.events if e.node_id == 1005) >= joined[0]


def test_arrays_in_another_order_are_read_by_name() -> None:
    from strategies.records import arrays_from_record

    record = ArrayRecord(
        {"steps": Array(np.array([3], np.int64)), "w": Array(np.ones(3, np.float32))}
    )
    w, steps = arrays_from_record(record, ["w", "steps"])
    assert w.shape == (3,)
    assert steps.tolist() == [3]


def test_zero_time_progress_under_a_virtual_clock_is_rejected_not_a_livelock() -> None:
    def spinner(msg: Message, ctx: Context) -> Message:
        metrics = _protocol(msg, **{wire.DONE: 0, wire.VIRTUAL_SECONDS: 0.0})
        return _reply(msg, None, metrics)

    grid = InProcessGrid(ToyEdge(), 5)
    grid.set_app(1005, spinner)
    strategy = EdgeStrategy(
        threshold=2, clock=virtual(), shares=EQUAL, loop=LoopConfig(slice_budget=1.0)
    )
    strategy.start(grid, model(0.0), num_rounds=3)
    assert len(strategy.history) == 3
    assert any(
        e.kind == "rejected" and e.node_id == 1005 and "virtual-seconds > 0" in e.detail
        for e in strategy.events
    )


def test_non_numeric_initial_arrays_raise_before_any_message() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    bad = ArrayRecord({"w": Array(np.array(["a", "b"]))})
    with pytest.raises(ConfigError, match=r"initial_arrays\['w'\] has dtype '<U1'"):
        EdgeStrategy(threshold=2, clock=virtual()).start(grid, bad, num_rounds=1)
    assert grid.pushed == []


@pytest.mark.parametrize(
    ("start", "match"),
    [
        ({"initial_arrays": None}, "initial_arrays must be a flwr.app.ArrayRecord, got NoneType"),
        ({"evaluate_fn": 5}, "evaluate_fn must be callable, got int"),
        ({"initial_arrays": model([1.0, math.nan, 1.0])}, r"initial_arrays\['w'\] contains NaN"),
    ],
)
def test_bad_start_arguments_raise_before_any_message(start: dict, match: str) -> None:  # type: ignore[type-arg]
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    arguments = {"initial_arrays": model(0.0), **start}
    with pytest.raises(ConfigError, match=match):
        strategy.start(grid, num_rounds=1, **arguments)
    assert grid.pushed == []


def test_a_model_that_does_not_fit_its_input_shape_fails_before_any_message() -> None:
    import torch

    grid = InProcessGrid(ToyEdge(), 4)
    shares = ShareConfig(profile=False, model=lambda: torch.nn.Linear(64, 10), input_shape=(32, 63))
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=shares)
    with pytest.raises(ConfigError, match=r"ShareConfig model and input_shape \(32, 63\)"):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


class _TokenModel:
    """A model of token ids (nn.Embedding): the analysis cannot run it on float zeros."""

    def __new__(cls) -> Any:  # a factory
        import torch

        return torch.nn.Sequential(
            torch.nn.Embedding(100, 16), torch.nn.Flatten(), torch.nn.Linear(12 * 16, 10)
        )


def test_a_model_of_integer_inputs_is_analysed_with_input_dtype_int64() -> None:
    """Found by a new-user probe: ShareConfig ran the operator analysis on float32 zeros
    only, so a model of token ids (nn.Embedding) could not get p_c from the analysis, and
    the error did not say why nor what to do."""
    grid = InProcessGrid(ToyEdge(), 4)
    shares = ShareConfig(profile=False, model=_TokenModel, input_shape=(8, 12))
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=shares)
    with pytest.raises(ConfigError, match=r"float32 zeros failed: .*'float64' or 'int64'"):
        strategy.start(grid, model(0.0), num_rounds=1)
    ints = ShareConfig(profile=False, model=_TokenModel, input_shape=(8, 12), input_dtype="int64")
    from strategies.shares import SharePlanner

    planner = SharePlanner(grid, virtual(), ints, 0.05, "edge")
    planner.check_model()
    assert 0.0 < planner.compute_share() < 1.0
    with pytest.raises(ConfigError, match="input_dtype must be one of"):
        ShareConfig(input_dtype="int32")  # type: ignore[arg-type]


def test_an_unusable_checkpoint_dir_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a-file").write_text("")  # a folder under a file cannot be made, even by root
    grid = InProcessGrid(ToyEdge(), 4)
    folder = tmp_path / "a-file" / "ckpt"
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL, checkpoint_dir=folder)
    with pytest.raises(ConfigError, match="checkpoint_dir .*ckpt' cannot be created or written"):
        strategy.start(grid, model(0.0), num_rounds=1)
    assert grid.pushed == []


def test_a_raising_node_does_not_make_the_others_wait_for_their_deadlines() -> None:
    """Found by a new-user probe: with K = n - 1 and one ClientApp that raises, every
    aggregation after the first waited for the soft deadlines (10 s floor) of messages that
    were answered long before: their deadline events kept the loop from seeing that no other
    update could come."""
    from conftest import make_dropin_app

    plain = make_dropin_app()

    def app(msg: Message, ctx: Context) -> Message:
        if ctx.node_id == 1002:
            raise RuntimeError("broken node")
        return plain(msg, ctx)

    clock = ManualClock()
    grid = InProcessGrid(app, 4, clock=clock, latency=lambda node, msg: 1.0)
    strategy = EdgeStrategy(threshold=3, clock=clock)  # wall clock: deadline "auto", 10 s floor
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    assert "deadline 10.0 s" in caplog.text  # the deadlines were set
    times = [record.time for record in strategy.history]
    assert [len(record.participants) for record in strategy.history] == [3, 3, 3]
    # each aggregation follows its replies (1 s each) without waiting for a deadline
    assert all(later - earlier < 5.0 for earlier, later in zip(times, times[1:], strict=False))


def test_one_registered_node_is_one_node_in_the_message() -> None:
    grid = InProcessGrid(ToyEdge(), 1)
    strategy = EdgeStrategy(threshold=1, clock=VirtualClock(wall=ManualClock()))
    with pytest.raises(ConfigError, match="only 1 node registered within 120.0 s; need at least 2"):
        strategy.start(grid, model(0.0), num_rounds=1)
