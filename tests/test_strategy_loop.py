"""EdgeStrategy on the in-process grid: trigger, weights, staleness, values, determinism."""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest
from conftest import (
    DUR,
    EQUAL,
    ToyEdge,
    accuracy_fn,
    as_numpy,
    asks_profile,
    flwr_logs,
    model,
    run_edge,
    virtual,
)
from flwr.app import ConfigRecord, Context, Message

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
    ValuationConfig,
)


def hand_mean(updates: list[list[np.ndarray]], weights: list[float]) -> np.ndarray:
    total = sum(weights)
    acc = sum(w * u[0].astype(np.float64) for u, w in zip(updates, weights, strict=True))
    return (acc / total).astype(np.float32)


def test_aggregates_exactly_when_the_count_passes_k_with_hand_weights() -> None:
    toy = ToyEdge()
    strategy, result, grid = run_edge(toy)
    first, second = strategy.history
    # K = 2: the third finished update (node 1002 at 5.5 s) triggers, not the second
    assert first.participants == (1004, 1003, 1002)
    assert first.time == pytest.approx(5.5)
    assert first.delays == pytest.approx((1.75, 3.0, 5.5))
    weights = [100.0 * (1.0 + DUR[n]) ** -0.5 for n in first.participants]
    assert first.raw_weights == pytest.approx(weights, rel=1e-12)
    assert first.weights == pytest.approx([w / sum(weights) for w in weights], rel=1e-12)
    updates = [toy.returned[(n, j)] for n, j in zip(first.participants, first.job_ids, strict=True)]
    [global1] = {
        m.content.array_records[wire.ARRAYS]["w"].numpy().tobytes(): m
        for m in grid.pushed
        if m.content.config_records[wire.CONFIG][wire.GLOBAL_VERSION] == 1
        and wire.ARRAYS in m.content.array_records
    }.values()
    np.testing.assert_allclose(
        global1.content.array_records[wire.ARRAYS]["w"].numpy(),
        hand_mean(updates, weights),
        rtol=1e-6,
    )
    # round 2: new jobs at 5.5 s; node 1001 (sent at 0, base 0) arrives at 10.5 s, stale by 1
    assert second.participants == (1004, 1003, 1001)
    assert second.staleness == (0, 0, 1)
    assert second.delays == pytest.approx((1.75, 3.0, 10.5))
    weights2 = [100.0 * (1.0 + d) ** -0.5 for d in (1.75, 3.0, 10.5)]
    assert second.raw_weights == pytest.approx(weights2, rel=1e-12)
    updates2 = [
        toy.returned[(n, j)] for n, j in zip(second.participants, second.job_ids, strict=True)
    ]
    final = as_numpy(result.arrays)
    np.testing.assert_allclose(final[0], hand_mean(updates2, weights2), rtol=1e-6)
    assert result.train_metrics_clientapp[2]["participants"] == 3
    assert result.train_metrics_clientapp[2]["clock-time"] == pytest.approx(10.5)
    assert set(result.evaluate_metrics_serverapp) == {0, 1, 2}


def test_fedbuff_aggregates_when_the_buffer_holds_k() -> None:
    toy = ToyEdge()
    grid = InProcessGrid(toy, 4)
    strategy = FedBuff(threshold=2, clock=virtual(), shares=EQUAL)
    result = strategy.start(grid, model(0.0), num_rounds=2)
    first, second = strategy.history
    assert first.participants == (1004, 1003)
    assert first.time == pytest.approx(3.0)
    assert first.raw_weights == (1.0, 1.0)
    # round 2 at 3 + 1.75 (1004) then 5.5 (1002, base 0, staleness 1)
    assert second.participants == (1004, 1002)
    assert second.raw_weights == pytest.approx((1.0, 1.0 / math.sqrt(2.0)))
    # x2 = x1 + (1/K) sum_i s_i (x_i - base_i)
    x0 = np.zeros(3)
    x1 = (
        x0
        + sum(
            toy.returned[(n, j)][0].astype(np.float64) - x0
            for n, j in zip(first.participants, first.job_ids, strict=True)
        )
        / 2
    )
    x1 = x1.astype(np.float32).astype(np.float64)
    u_fresh = toy.returned[(1004, second.job_ids[0])][0].astype(np.float64)
    u_stale = toy.returned[(1002, second.job_ids[1])][0].astype(np.float64)
    x2 = x1 + ((u_fresh - x1) + (u_stale - x0) / math.sqrt(2.0)) / 2
    np.testing.assert_allclose(as_numpy(result.arrays)[0], x2.astype(np.float32), rtol=1e-6)
    # the integer array is averaged too and stays an integer
    assert as_numpy(result.arrays)[1].dtype == np.int64


def test_fedasync_mixes_each_update_with_a_decayed_alpha() -> None:
    toy = ToyEdge()
    grid = InProcessGrid(toy, 4)
    strategy = FedAsync(alpha=0.5, staleness_fn="polynomial", a=1.0, clock=virtual(), shares=EQUAL)
    result = strategy.start(grid, model(0.0), num_rounds=3)
    mixes = [h.raw_weights[0] for h in strategy.history]
    expected = [0.5 * (1.0 + h.staleness[0]) ** -1.0 for h in strategy.history]
    assert mixes == pytest.approx(expected)
    assert [h.participants[0] for h in strategy.history] == [1004, 1003, 1004]
    x = np.zeros(3)
    for h in strategy.history:
        u = toy.returned[(h.participants[0], h.job_ids[0])][0].astype(np.float64)
        x = ((1 - h.raw_weights[0]) * x + h.raw_weights[0] * u).astype(np.float32).astype(float)
    np.testing.assert_allclose(as_numpy(result.arrays)[0], x, rtol=1e-6)


def test_leave_one_out_values_match_brute_force_reaggregation() -> None:
    toy = ToyEdge(speeds=[10.0, 12.0, 14.0, 80.0])
    strategy, result, _ = run_edge(toy, rounds=2)
    evaluate = accuracy_fn()
    for record in strategy.history:
        updates = [
            toy.returned[(n, j)] for n, j in zip(record.participants, record.job_ids, strict=True)
        ]
        w = list(record.raw_weights)
        full = evaluate(0, model(hand_mean(updates, w).tolist()))["accuracy"]
        contributions = []
        for i in range(len(updates)):
            others = [u for k, u in enumerate(updates) if k != i]
            wo = [x for k, x in enumerate(w) if k != i]
            without = evaluate(0, model(hand_mean(others, wo).tolist()))["accuracy"]
            contributions.append(full - without)
        assert record.contributions == pytest.approx(contributions, abs=1e-6)
        clamped = [max(c, 0.0) for c in contributions]
        values = [c / sum(clamped) for c in clamped] if sum(clamped) > 0 else [1 / 3] * 3
        assert record.values == pytest.approx(values, abs=1e-5)
        metrics = result.train_metrics_clientapp[record.round]
        for node, value in zip(record.participants, record.values, strict=True):
            assert metrics[f"value-{node}"] == pytest.approx(value)


def test_leave_one_out_values_on_a_loss_match_brute_force_reaggregation() -> None:
    # a loss: node i's contribution is loss(x_{-i}) - loss(x) (removing a helper raises it)
    toy = ToyEdge(speeds=[10.0, 12.0, 14.0, 80.0])
    by_loss = ValuationConfig(metric_key="loss", higher_is_better=False)
    strategy, _, _ = run_edge(toy, rounds=2, valuation=by_loss)
    evaluate = accuracy_fn()
    for record in strategy.history:
        updates = [
            toy.returned[(n, j)] for n, j in zip(record.participants, record.job_ids, strict=True)
        ]
        w = list(record.raw_weights)
        full = evaluate(0, model(hand_mean(updates, w).tolist()))["loss"]
        contributions = []
        for i in range(len(updates)):
            others = [u for k, u in enumerate(updates) if k != i]
            wo = [x for k, x in enumerate(w) if k != i]
            without = evaluate(0, model(hand_mean(others, wo).tolist()))["loss"]
            contributions.append(without - full)
        assert record.contributions == pytest.approx(contributions, abs=1e-6)
        clamped = [max(c, 0.0) for c in contributions]
        assert sum(clamped) > 0
        assert record.values == pytest.approx([c / sum(clamped) for c in clamped], abs=1e-5)


def test_values_reach_the_next_train_messages() -> None:
    toy = ToyEdge()
    strategy, _, grid = run_edge(toy, rounds=2)
    first = strategy.history[0]
    after = [
        m.content.config_records[wire.CONFIG]
        for m in grid.pushed
        if m.content.config_records[wire.CONFIG][wire.VALUES_ROUND] == 1
    ]
    assert after, "messages after round 1 carry its values"
    cfg = after[0]
    assert list(cfg[wire.VALUE_NODE_IDS]) == sorted(first.participants)  # type: ignore[arg-type]
    by_node = dict(zip(first.participants, first.values, strict=True))
    assert list(cfg[wire.VALUES]) == pytest.approx(  # type: ignore[arg-type]
        [by_node[n] for n in sorted(by_node)]
    )


def test_without_evaluate_fn_every_participant_gets_the_same_value() -> None:
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=1)
    assert strategy.history[0].values == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert "no evaluate_fn: no leave-one-out values" in caplog.text


def _shuffled(seed: int):  # type: ignore[no-untyped-def]
    rng = random.Random(seed)

    def order(replies: list[Message]) -> list[Message]:
        replies = list(replies)
        rng.shuffle(replies)
        return replies[: max(1, len(replies) // 2)]  # and hold some back for later pulls

    return order


def test_virtual_clock_history_is_identical_whatever_the_arrival_order() -> None:
    runs = []
    for seed in (1, 2, 3):
        toy = ToyEdge(speeds=[7.0, 13.0, 29.0, 61.0, 11.0, 17.0])
        grid = InProcessGrid(toy, 6, order=_shuffled(seed))
        strategy = EdgeStrategy(
            threshold=2,
            clock=virtual(),
            loop=LoopConfig(slice_budget=2.0),
            shares=ShareConfig(total_samples=600, rebalance="seed"),
        )
        result = strategy.start(grid, model(0.0), num_rounds=5, evaluate_fn=accuracy_fn())
        runs.append(([h.to_json() for h in strategy.history], as_numpy(result.arrays)))
    for history, arrays in runs[1:]:
        assert history == runs[0][0]
        for a, b in zip(arrays, runs[0][1], strict=True):
            assert a.tobytes() == b.tobytes()


def test_dropin_unmodified_flower_clientapp_runs() -> None:
    from conftest import make_dropin_app

    clock = ManualClock()
    grid = InProcessGrid(make_dropin_app(), 4, clock=clock)
    strategy = EdgeStrategy(threshold=2, clock=clock)
    with flwr_logs() as caplog:
        result = strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 3
    # no query the app cannot answer: the profile request rides on the first train message,
    # which the plain app just trains on; one INFO line per node, nothing like a failure
    assert {m.metadata.message_type for m in grid.pushed} == {"train"}
    for node in (1001, 1002, 1003, 1004):
        assert f"node {node} runs with equal shares: no flower-edge profile" in caplog.text
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert "total 0 samples" not in caplog.text
    assert "share 0" not in caplog.text
    # no shares known: no sample-share key, so the app trains on its own default
    train = [m for m in grid.pushed if m.metadata.message_type == "train"]
    assert all(wire.SAMPLE_SHARE not in m.content.config_records[wire.CONFIG] for m in train)
    # weights fall back to num-examples (10 * (partition + 1)) times a decay of ~1
    first = strategy.history[0]
    assert first.participants == (1001, 1002, 1003)
    assert first.raw_weights == pytest.approx((10.0, 20.0, 30.0))
    assert not np.allclose(as_numpy(result.arrays)[0], 0.0)


def test_a_busy_node_never_gets_a_second_train_message() -> None:
    toy = ToyEdge(speeds=[3.0, 50.0, 60.0, 70.0])
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(
        threshold=1, clock=virtual(), shares=EQUAL, loop=LoopConfig(slice_budget=1.0)
    )
    strategy.start(grid, model(0.0), num_rounds=6, evaluate_fn=accuracy_fn())
    # every reply answers exactly one message and every message gets a reply before the next
    per_node: dict[int, list[str]] = {}
    for msg in grid.pushed:
        per_node.setdefault(msg.metadata.dst_node_id, []).append(msg.metadata.message_id)
    sent_events = [e for e in strategy.events if e.kind == "sent"]
    replies = [e for e in strategy.events if e.kind in ("progress", "finished", "rejected")]
    assert len(sent_events) - len(replies) <= 4  # at most one outstanding per node at the end
    assert sum(len(v) for v in per_node.values()) == len(sent_events)
    assert not [e for e in strategy.events if e.kind == "rejected"]


def test_slices_carry_the_newest_global_only_when_newer_and_the_client_abandons() -> None:
    toy = ToyEdge(speeds=[2.0, 40.0, 50.0, 60.0])  # node 1001 needs 50 s for its job
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(
        threshold=2, clock=virtual(), shares=EQUAL, loop=LoopConfig(slice_budget=4.0)
    )
    strategy.start(grid, model(0.0), num_rounds=12, evaluate_fn=accuracy_fn())
    slow = [m for m in grid.pushed if m.metadata.dst_node_id == 1001]
    job_ids = [m.content.config_records[wire.CONFIG][wire.JOB_ID] for m in slow]
    assert len(slow) > 3
    assert len(set(job_ids)) < len(job_ids)
    carried = [
        int(m.content.config_records[wire.CONFIG][wire.GLOBAL_VERSION])  # type: ignore[arg-type]
        for m in slow
        if wire.ARRAYS in m.content.array_records
    ]
    assert carried == sorted(set(carried))  # each version sent at most once, in order
    abandoned = [r for r in toy.replies if r["node"] == 1001 and r["abandoned"]]
    assert abandoned, "the slow node abandoned its stale job when a newer global came"
    assert [e for e in strategy.events if e.kind == "abandoned" and e.node_id == 1001]


def test_progress_replies_are_answered_with_the_same_job_and_no_arrays_when_current() -> None:
    toy = ToyEdge(speeds=[1.0, 1.0, 1.0, 1.0])
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(
        threshold=3, clock=virtual(), shares=EQUAL, loop=LoopConfig(slice_budget=30.0)
    )
    strategy.start(grid, model(0.0), num_rounds=1)
    # each node: job of 100 samples at 1/s in 30 s slices -> 4 messages, arrays only first
    for node in (1001, 1002, 1003, 1004):
        msgs = [
            m
            for m in grid.pushed
            if m.metadata.dst_node_id == node
            and m.content.config_records[wire.CONFIG][wire.GLOBAL_VERSION] == 0
        ]
        assert len(msgs) == 4
        assert {m.content.config_records[wire.CONFIG][wire.JOB_ID] for m in msgs} == {
            msgs[0].content.config_records[wire.CONFIG][wire.JOB_ID]
        }
        assert [wire.ARRAYS in m.content.array_records for m in msgs] == [True, False, False, False]
    assert strategy.history[0].delays == pytest.approx([100.0 + 4 * 0.5] * 4)


def test_shares_follow_the_profiles_and_are_capped() -> None:
    toy = ToyEdge(evaluations=lambda pid: (1.0 + 10 * pid, 0.0, 1.0, 1.0))
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=ShareConfig(max_share_fraction=0.4, rebalance="off"),
    )
    strategy.start(grid, model(0.0), num_rounds=1)
    first = {  # the first jobs after the profile replies
        m.metadata.dst_node_id: m.content.config_records[wire.CONFIG][wire.SAMPLE_SHARE]
        for m in grid.pushed[4:8]
    }
    assert all(wire.PROFILE_MODE in m.content[wire.CONFIG] for m in grid.pushed[:4])
    assert sum(first.values()) == 400  # type: ignore[arg-type]  # mean local samples x nodes
    assert max(first.values()) <= 160  # type: ignore[type-var]  # 0.4 x 400
    assert first[1001] < first[1002] < first[1003]  # type: ignore[operator]


@pytest.mark.parametrize("method", ["seed", "optimal"])
def test_rebalance_moves_samples_to_faster_nodes(method: str) -> None:
    toy = ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0], overhead=0.0)
    grid = InProcessGrid(toy, 4)
    shares = ShareConfig(profile=False, total_samples=400, rebalance=method)  # type: ignore[arg-type]
    strategy = EdgeStrategy(threshold=3, clock=virtual(), shares=shares)
    strategy.start(grid, model(0.0), num_rounds=3)
    by_round: dict[int, dict[int, int]] = {}
    for m in grid.pushed:
        cfg = m.content.config_records[wire.CONFIG]
        by_round.setdefault(int(cfg[wire.GLOBAL_VERSION]), {})[m.metadata.dst_node_id] = int(  # type: ignore[arg-type]
            cfg[wire.SAMPLE_SHARE]  # type: ignore[arg-type]
        )
    assert by_round[0] == {1001: 100, 1002: 100, 1003: 100, 1004: 100}
    later = by_round[1]
    assert sum(later.values()) == 400
    assert later[1001] < later[1002] < later[1003] < later[1004]
    # T = k f with k = 1/speed: equal finish means f proportional to speed, but the cap
    # (max_share_fraction 0.5 -> 200) holds node 1004; the rest split 10 : 20 : 40
    exact = {1001: 28.57, 1002: 57.14, 1003: 114.29, 1004: 200.0}
    assert all(abs(later[n] - exact[n]) <= 1.5 for n in exact), later
    # so round 2's updates arrive (almost) together: makespan down from 10 s to ~2.9 s
    assert strategy.history[1].time - strategy.history[0].time < 2.91


def _first_messages(grid: InProcessGrid) -> dict[int, Message]:
    first: dict[int, Message] = {}
    for m in grid.pushed:
        first.setdefault(m.metadata.dst_node_id, m)
    return first


def _wall_clock_run(*, with_job: bool, rounds: int) -> tuple[EdgeStrategy, InProcessGrid]:
    """Four toy nodes profiled 1 : 11 : 21 : 31, K = 3, on a (manual) wall clock."""
    toy = ToyEdge(evaluations=lambda pid: (1.0 + 10 * pid, 0.0, 1.0, 1.0), with_job=with_job)
    clock = ManualClock()
    grid = InProcessGrid(toy, 4, clock=clock)
    strategy = EdgeStrategy(
        threshold=3, clock=clock, shares=ShareConfig(total_samples=400, rebalance="off")
    )
    strategy.start(grid, model(0.0), num_rounds=rounds, timeout=30.0)
    return strategy, grid


def test_under_a_wall_clock_the_profile_comes_with_the_first_job() -> None:
    # a wall clock pays a round trip per message: the first message asks for the profile
    # *and* a job, so every node's first update counts and nobody waits for the plan
    with flwr_logs() as caplog:
        strategy, grid = _wall_clock_run(with_job=True, rounds=2)
    first = _first_messages(grid)
    for m in first.values():
        cfg = m.content.config_records[wire.CONFIG]
        assert cfg[wire.PROFILE_MODE] == "quick"
        assert cfg[wire.PROFILE_WITH_JOB] is True
        assert wire.SAMPLE_SHARE not in cfg  # unknown before the plan: the client's default
    # the first aggregation is made of the four first jobs (no profile-only round trip)
    assert sorted(strategy.history[0].participants) == [1001, 1002, 1003, 1004]
    assert "total 400 samples per round" in caplog.text
    later = {
        m.metadata.dst_node_id: int(m.content.config_records[wire.CONFIG][wire.SAMPLE_SHARE])  # type: ignore[arg-type]
        for m in grid.pushed
        if wire.SAMPLE_SHARE in m.content.config_records[wire.CONFIG]
    }
    assert later[1001] < later[1002] < later[1003]  # the plan follows the profiles
    assert sum(1 for e in strategy.events if e.kind == "profiled") == 4


def test_a_client_without_profile_with_job_still_answers_with_its_profile_only() -> None:
    strategy, grid = _wall_clock_run(with_job=False, rounds=1)
    first = _first_messages(grid)
    assert all(
        m.content.config_records[wire.CONFIG][wire.PROFILE_WITH_JOB] is True for m in first.values()
    )
    # the profile-only answers hold the nodes until the plan; then every job has a share
    jobs = [m for m in grid.pushed if wire.SAMPLE_SHARE in m.content.config_records[wire.CONFIG]]
    assert len(jobs) >= 4
    assert sorted(strategy.history[0].participants) == [1001, 1002, 1003, 1004]


def test_a_plain_apps_rejected_first_reply_is_one_warning_not_a_profile_failure() -> None:
    """Found by a new-user probe: a plain ClientApp whose first reply lacked ``num-examples``
    got two WARNINGs, the second about a "usable profile" that a plain app never sends."""
    from conftest import make_dropin_app

    plain = make_dropin_app()

    def no_examples(msg: Message, ctx: Context) -> Message:
        reply = plain(msg, ctx)
        if reply.has_content():
            del reply.content["metrics"]
        return reply

    clock = ManualClock()
    grid = InProcessGrid(plain, 4, clock=clock)
    grid.set_app(1002, no_examples)
    strategy = EdgeStrategy(threshold=1, clock=clock)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=2, timeout=30.0)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    about_1002 = [w for w in warned if "1002" in w]
    assert about_1002
    assert all("rejected reply of node 1002" in w for w in about_1002)
    assert "usable profile" not in caplog.text
    assert "node 1002 runs with equal shares: its first reply was rejected" in caplog.text


def test_a_bad_profile_beside_an_update_loses_the_profile_not_the_update() -> None:
    toy = ToyEdge(with_job=True)

    def bad_profile(msg: Message, ctx: Context) -> Message:
        reply = toy(msg, ctx)
        if wire.PROFILE in reply.content.config_records:
            reply.content[wire.PROFILE] = ConfigRecord({wire.EVAL_CPU: float("nan")})
        return reply

    clock = ManualClock()
    grid = InProcessGrid(toy, 4, clock=clock)
    grid.set_app(1002, bad_profile)
    strategy = EdgeStrategy(
        threshold=3, clock=clock, shares=ShareConfig(total_samples=400, rebalance="off")
    )
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=1, timeout=30.0)
    assert (
        "node 1002 gets an equal share: its answer carried no usable profile "
        "(bad profile beside the update: profile " in caplog.text
    )
    assert "'evaluation-cpu' must be finite" in caplog.text
    assert 1002 in strategy.history[0].participants  # its update was aggregated


def test_a_virtual_clock_keeps_the_profile_only_first_message() -> None:
    # in a simulation the profile answer takes no virtual time: plan before any work
    toy = ToyEdge(with_job=True)
    grid = InProcessGrid(toy, 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=ShareConfig(total_samples=400))
    strategy.start(grid, model(0.0), num_rounds=1)
    for m in _first_messages(grid).values():
        cfg = m.content.config_records[wire.CONFIG]
        assert wire.PROFILE_MODE in cfg
        assert wire.PROFILE_WITH_JOB not in cfg
    forced = ShareConfig(total_samples=400, profile_with_job=True)
    grid = InProcessGrid(toy, 4)
    EdgeStrategy(threshold=2, clock=virtual(), shares=forced).start(grid, model(0.0), num_rounds=1)
    assert all(
        m.content.config_records[wire.CONFIG][wire.PROFILE_WITH_JOB] is True
        for m in _first_messages(grid).values()
    )


def test_a_profile_that_comes_after_the_plan_sets_that_nodes_share() -> None:
    # node 1004 (the fastest by its profile) answers its first message after the profile
    # timeout: the plan is made without it, and its late profile then gives it its share
    toy = ToyEdge(evaluations=lambda pid: (1.0 + 10 * pid, 0.0, 1.0, 1.0), with_job=True)
    clock = ManualClock()
    first_seen: set[int] = set()

    def latency(node_id: int, msg: Message) -> float:
        slow_first = node_id == 1004 and node_id not in first_seen
        first_seen.add(node_id)
        return 10.0 if slow_first else 1.0

    grid = InProcessGrid(toy, 4, clock=clock, latency=latency)
    shares = ShareConfig(total_samples=400, profile_timeout=5.0, rebalance="off")
    strategy = EdgeStrategy(threshold=2, clock=clock, shares=shares)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=15, timeout=60.0)
    assert "node 1004 sent no profile within 5.0 s" in caplog.text
    assert "node 1004's profile came after the plan: share" in caplog.text
    sent: dict[int, list[int]] = {}
    for m in grid.pushed:
        cfg = m.content.config_records[wire.CONFIG]
        if wire.SAMPLE_SHARE in cfg:
            sent.setdefault(m.metadata.dst_node_id, []).append(int(cfg[wire.SAMPLE_SHARE]))  # type: ignore[arg-type]
    # planned without it: 1004 gets the equal share (100), the others split 300 by ratio
    assert "shares {1001: 69, 1002: 100, 1003: 131, 1004: 100}" in caplog.text
    # its first share-carrying job comes after its late profile: more than any other node,
    # as its profile says; the others keep their planned shares
    late = f"node 1004's profile came after the plan: share {sent[1004][0]} by"
    assert late in caplog.text
    assert sent[1004][0] > 131
    assert [sent[n][0] for n in (1001, 1002, 1003)] == [69, 100, 131]


def test_profile_with_job_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="profile_with_job must be a boolean"):
        ShareConfig(profile_with_job=1)  # type: ignore[arg-type]


def test_nodes_without_a_usable_profile_get_equal_shares() -> None:
    from flwr.app import ConfigRecord, RecordDict

    def bad_profile(msg: Message, ctx: Context) -> Message:
        if asks_profile(msg):
            rec = ConfigRecord({wire.EVAL_CPU: -1.0, wire.EVAL_GPU: 0.0})
            return Message(RecordDict({wire.PROFILE: rec}), reply_to=msg)
        return toy(msg, ctx)

    toy = ToyEdge(evaluations=lambda pid: (1.0 + pid, 0.0, 1.0, 1.0))
    clock = ManualClock()
    grid = InProcessGrid(toy, 4, clock=clock)
    grid.set_app(1003, bad_profile)
    grid.silence(1004)  # answers nothing, not even the profile query
    strategy = EdgeStrategy(
        threshold=1,
        clock=clock,
        shares=ShareConfig(total_samples=400, profile_timeout=5.0, rebalance="off"),
    )
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=1, timeout=30.0)
    assert (
        "node 1003 gets an equal share: its answer carried no usable profile "
        "(bad profile reply: profile 'evaluation-cpu'" in caplog.text
    )
    assert "node 1004 sent no profile within 5.0 s: it runs with an equal share" in caplog.text
    shares = {
        m.metadata.dst_node_id: m.content.config_records[wire.CONFIG][wire.SAMPLE_SHARE]
        for m in grid.pushed
        if wire.SAMPLE_SHARE in m.content.config_records[wire.CONFIG]
    }
    # two of four nodes unprofiled: 100 each; the other 200 split 1 : 2 by match ratio (the
    # silent node 1004 never gets a second message in this run: its share is in the log)
    assert shares.get(1003, 100) == 100
    assert "1003: 100, 1004: 100}" in caplog.text
    assert shares[1001] + shares[1002] == 200
    assert shares[1001] < shares[1002]


def test_the_share_cap_rounds_up_so_the_shares_always_add_up() -> None:
    grid = InProcessGrid(ToyEdge(), 3)
    strategy = EdgeStrategy(
        threshold=2,
        clock=virtual(),
        shares=ShareConfig(
            profile=False, total_samples=10, max_share_fraction=0.34, rebalance="off"
        ),
    )
    strategy.start(grid, model(0.0), num_rounds=1)
    shares = [
        m.content.config_records[wire.CONFIG][wire.SAMPLE_SHARE]
        for m in grid.pushed
        if m.content.config_records[wire.CONFIG][wire.GLOBAL_VERSION] == 0
    ]
    assert sorted(shares) == [3, 3, 4]  # type: ignore[type-var]
