"""Hostile and broken clients against EdgeStrategy and the baselines (new-user probe, session 13).

Each test drives a strategy on the in-process grid with one misbehaving node among honest
numpy clients (``fault_clients.edge_app``) on a manual wall clock, so that a run of several
aggregations takes milliseconds and every fault happens at a known point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from fault_clients import ScriptedClock, capture_flwr_logs, edge_app, initial_model
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict

from flower_edge import wire
from strategies import EdgeStrategy, FedAsync, FedBuff, InProcessGrid, LoopConfig
from strategies.base import SemiAsyncStrategy

pytestmark = pytest.mark.timeout(60)

NODES = [1001, 1002, 1003, 1004]
BAD = 1003


def _latency(node: int, msg: Message) -> float:
    """Node 100i takes i seconds per message."""
    return float(node % 100)


def _strategy(kind: str, clock: ScriptedClock) -> SemiAsyncStrategy:
    loop = LoopConfig(deadline=6.0, poll_interval=0.25)  # slice_budget "auto": adaptive
    if kind == "edge":
        return EdgeStrategy.preset("edge", threshold=2, clock=clock, loop=loop)
    if kind == "fedbuff":
        return FedBuff(2, clock=clock, loop=loop)
    return FedAsync(clock=clock, loop=loop)


def _run(
    kind: str, app: Callable[[Message, Context], Message], rounds: int = 4
) -> tuple[SemiAsyncStrategy, list[str]]:
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=_latency)
    grid.set_app(BAD, app)
    strategy = _strategy(kind, clock)
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=rounds, timeout=20.0)
    return strategy, logs.messages(logging.WARNING)


def _slicer(train_seconds: Sequence[float]) -> Callable[[Message, Context], Message]:
    """Answer each train message with a progress report of the next ``train_seconds``."""
    count = {"n": 0}
    honest = edge_app()

    def app(msg: Message, ctx: Context) -> Message:
        cfg = msg.content.config_records[wire.CONFIG]
        if wire.PROFILE_MODE in cfg:
            return honest(msg, ctx)
        seconds = train_seconds[count["n"] % len(train_seconds)]
        count["n"] += 1
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: 1,
                wire.DONE: 0,
                wire.JOB_ID: int(cfg[wire.JOB_ID]),  # type: ignore[arg-type]
                wire.BASE_VERSION: int(cfg[wire.GLOBAL_VERSION]),  # type: ignore[arg-type]
                wire.SAMPLES_PROCESSED: 1,
                wire.TRAIN_SECONDS: seconds,
            }
        )
        return Message(RecordDict({wire.METRICS: metrics}), reply_to=msg)

    return app


@pytest.mark.parametrize("kind", ["edge", "fedbuff", "fedasync"])
def test_negative_then_huge_train_seconds_is_rejected_not_a_crash(kind: str) -> None:
    # -1.7e308 then 1.7e308: the slice budget's difference was inf, and message_overhead's
    # InputError ("compute[1] must be a finite number >= 0, got inf") stopped the whole run
    strategy, warnings = _run(kind, _slicer([-1.7e308, 1.7e308, 1.0]))
    assert len(strategy.history) == 4
    assert all(BAD not in h.participants for h in strategy.history)
    named = [w for w in warnings if f"node {BAD}" in w and "train-seconds must be >= 0" in w]
    assert named, warnings


@pytest.mark.parametrize(
    ("key", "value"),
    [(wire.SAMPLES_PROCESSED, -100), (wire.ABANDONED_JOBS, -1), (wire.TRAIN_SECONDS, -0.5)],
)
def test_a_negative_count_or_duration_is_rejected_naming_the_field(key: str, value: float) -> None:
    honest = edge_app()

    def app(msg: Message, ctx: Context) -> Message:
        reply = honest(msg, ctx)
        if wire.METRICS in reply.content.metric_records:
            reply.content.metric_records[wire.METRICS][key] = value
        return reply

    strategy, warnings = _run("edge", app)
    assert len(strategy.history) == 4
    assert all(BAD not in h.participants for h in strategy.history)
    rejected = [e.detail for e in strategy.events if e.kind == "rejected" and e.node_id == BAD]
    assert rejected
    assert all(f"{key} must be >= 0" in r for r in rejected), rejected


def _plain(claim: float) -> Callable[[Message, Context], Message]:
    """An unmodified ClientApp (arrays + num-examples + its own train_loss) claiming ``claim``."""

    def app(msg: Message, ctx: Context) -> Message:
        arrays = msg.content.array_records["arrays"]
        new = {k: Array(v.numpy() + np.float32(0.1)) for k, v in arrays.items()}
        metrics = MetricRecord({"num-examples": claim, "train_loss": 0.5})
        return Message(RecordDict({"arrays": ArrayRecord(new), "metrics": metrics}), reply_to=msg)

    return app


@pytest.mark.parametrize("kind", ["edge", "fedbuff", "fedasync"])
def test_two_nodes_claiming_1e308_examples_are_rejected_not_an_overflow(kind: str) -> None:
    # 1e308 is an integer-valued double, so it passed as num-examples; two of them in one
    # median or one average made "OverflowError: int too large to convert to float"
    clock = ScriptedClock()
    grid = InProcessGrid(_plain(10), node_ids=NODES, clock=clock, latency=_latency)
    for node in (1001, 1002):  # the two fastest: they fill the first buffer
        grid.set_app(node, _plain(1e308))
    strategy = _strategy(kind, clock)
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=4, timeout=20.0)
    assert len(strategy.history) == 4
    assert all(not {1001, 1002} & set(h.participants) for h in strategy.history)
    named = logs.matching("node 1001", "'num-examples' must be an integer within int64")
    assert named, logs.messages(logging.WARNING)


def test_evaluate_replies_claiming_1e308_examples_are_skipped_not_an_overflow() -> None:
    from strategies.client_eval import aggregate_evaluate_replies

    def reply(node: int, claim: float, loss: float) -> Message:
        msg = Message(RecordDict(), dst_node_id=node, message_type="evaluate")
        metrics = MetricRecord({"num-examples": claim, "loss": loss})
        out = Message(RecordDict({"metrics": metrics}), reply_to=msg)
        out.metadata.__dict__["_src_node_id"] = node
        return out

    replies = [reply(1001, 1e308, 9.0), reply(1002, 1e308, 9.0), reply(1003, 10, 0.5)]
    with capture_flwr_logs() as logs:
        metrics = aggregate_evaluate_replies(replies)
    assert metrics is not None
    assert dict(metrics) == {"loss": 0.5}
    assert len(logs.matching("skipped", "within int64")) == 2


def test_an_uncapped_1000x_profile_boast_is_a_warning_naming_the_nodes_left_out() -> None:
    # edge-seed (the seed's uncapped shares): node 1004 claimed 1000x the honest evaluations,
    # took all 400 samples, the three others got none and never trained; nothing was logged
    from fault_clients import HONEST_PROFILE

    from strategies import ShareConfig

    boast = tuple(1000.0 * v for v in HONEST_PROFILE)
    clock = ScriptedClock()
    grid = InProcessGrid(edge_app(), node_ids=NODES, clock=clock, latency=_latency)
    grid.set_app(1004, edge_app(profile=boast))  # type: ignore[arg-type]
    loop = LoopConfig(deadline=6.0, poll_interval=0.25)
    strategy = EdgeStrategy.preset(
        "edge-seed", threshold=2, clock=clock, loop=loop, shares=ShareConfig(total_samples=400)
    )
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=2, timeout=20.0)
    warned = logs.matching(
        "node 1004's profile claims", "best other node's match ratio", level=logging.WARNING
    )
    assert len(warned) == 1, logs.messages(logging.WARNING)
    assert "nodes [1001, 1002, 1003] get no samples and no job" in warned[0]


def test_log_capped_warns_of_an_absurd_ratio_only_beyond_the_gap() -> None:
    from strategies.shares import SUSPECT_RATIO_GAP, log_capped

    with capture_flwr_logs() as logs:
        log_capped(
            "edge", [1, 2, 3], [1.0, 1.0, 0.9 * SUSPECT_RATIO_GAP], 400, 400, 1.0, [4, 4, 392]
        )
    assert logs.messages(logging.WARNING) == []  # 90x: a fast device, not a boast
    with capture_flwr_logs() as logs:
        log_capped("edge", [1, 2, 3], [1.0, 1.0, 2 * SUSPECT_RATIO_GAP], 400, 400, 1.0, [0, 0, 400])
    (line,) = logs.messages(logging.WARNING)
    assert "node 3's profile claims 200x" in line
    assert "nodes [1, 2] get no samples" in line


def test_an_evaluate_metric_that_overflows_its_weighted_sum_is_skipped() -> None:
    # 1e300 x 2**62 examples is inf: the round's client-side loss was inf, the honest 0.5 lost
    from strategies.client_eval import aggregate_evaluate_replies

    def reply(node: int, claim: int, loss: float) -> Message:
        msg = Message(RecordDict(), dst_node_id=node, message_type="evaluate")
        out = Message(
            RecordDict({"metrics": MetricRecord({"num-examples": claim, "loss": loss})}),
            reply_to=msg,
        )
        out.metadata.__dict__["_src_node_id"] = node
        return out

    with capture_flwr_logs() as logs:
        metrics = aggregate_evaluate_replies([reply(1001, 2**62, 1e300), reply(1002, 10, 0.5)])
    assert metrics is not None
    assert dict(metrics) == {"loss": 0.5}
    assert logs.matching("'loss' of node 1001 skipped", "overflows the average")


def test_train_metrics_that_overflow_their_weighted_sum_are_left_out() -> None:
    from strategies.history import AggregationRecord
    from strategies.intake import train_metrics
    from strategies.records import Update

    def update(node: int, examples: int, value: float) -> Update:
        return Update(
            node_id=node,
            job_id=node,
            base_version=0,
            arrays=(),
            num_examples=examples,
            share=0,
            delay=0.0,
            received_at=0.0,
            late=False,
            train_loss=value,
            app_metrics=(("acc", value),),
        )

    updates = [update(1001, 2**62, 1e300), update(1002, 10, 0.5)]
    record = AggregationRecord.build(1, 0.0, updates, [1.0, 1.0], ([0.0, 0.0], [0.5, 0.5]), None)
    out = dict(train_metrics(record, updates, 0))
    assert out["train-loss"] == 0.5  # the honest node's values, not inf
    assert out["acc"] == 0.5


@pytest.mark.parametrize("kind", ["edge", "fedbuff", "fedasync"])
def test_a_node_that_answers_every_job_with_its_profile_gets_one_job_per_version(
    kind: str,
) -> None:
    # a profile-only reply ended the job silently and the node got a new job (with the whole
    # model) at once: a node answering in 10 ms got about one job per 10 ms, none rejected
    from fault_clients import HONEST_PROFILE, _profile_reply

    def profile_only(msg: Message, ctx: Context) -> Message:
        return _profile_reply(msg, HONEST_PROFILE, 100)

    clock = ScriptedClock()
    fast = {BAD: 0.01}
    grid = InProcessGrid(
        edge_app(),
        node_ids=NODES,
        clock=clock,
        latency=lambda node, msg: fast.get(node, float(node % 100)),
    )
    grid.set_app(BAD, profile_only)
    strategy = _strategy(kind, clock)
    with capture_flwr_logs() as logs:
        strategy.start(grid, initial_model(), num_rounds=6, timeout=20.0)
    assert len(strategy.history) == 6
    jobs = [m for m in grid.pushed if m.metadata.dst_node_id == BAD]
    assert len(jobs) <= 6 + 1  # one per global version (and the profile request)
    rejected = [e for e in strategy.events if e.kind == "rejected" and e.node_id == BAD]
    assert len(rejected) >= len(jobs) - 2  # the profile request and the last job out
    assert logs.matching(f"rejected reply of node {BAD}", "did not ask for it")
