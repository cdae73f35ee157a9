"""Client-side evaluation (fraction_evaluate), as Flower's strategies do it."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, flwr_logs, model, virtual
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict

from flower_edge import wire
from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, InProcessGrid
from strategies.client_eval import aggregate_evaluate_replies


class EvaluatingToy(ToyEdge):
    """ToyEdge plus an ``evaluate`` handler: accuracy = partition / 10, 10 x (partition + 1)
    examples; it records which node evaluated which round."""

    def __call__(self, msg: Message, ctx: Context) -> Message:
        """Answer evaluate messages; everything else as ToyEdge."""
        if msg.metadata.message_type != "evaluate":
            return super().__call__(msg, ctx)
        pid = int(ctx.node_config[wire.PARTITION_ID])  # type: ignore[arg-type]
        assert wire.ARRAYS in msg.content.array_records
        metrics = MetricRecord({wire.NUM_EXAMPLES: 10 * (pid + 1), "accuracy": pid / 10})
        return Message(RecordDict({wire.METRICS: metrics}), reply_to=msg)


def _expected(grid: InProcessGrid, rnd: int) -> dict[str, float]:
    nodes = [
        m.metadata.dst_node_id
        for m in grid.pushed
        if m.metadata.message_type == "evaluate" and m.metadata.group_id == str(rnd)
    ]
    weights = [10 * (n - 1000) for n in nodes]  # partition = node - 1001
    accuracy = sum(w * (n - 1001) / 10 for w, n in zip(weights, nodes, strict=True))
    return {"accuracy": accuracy / sum(weights)}  # the weighting key left out, as FedAvg


def _run(order_seed: int | None = None, **options):  # type: ignore[no-untyped-def]
    order = None
    if order_seed is not None:
        rng = random.Random(order_seed)

        def order(replies: list[Message]) -> list[Message]:
            shuffled = list(replies)
            rng.shuffle(shuffled)
            return shuffled[: max(1, len(shuffled) // 2)]

    grid = InProcessGrid(EvaluatingToy(), 4, order=order)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL, **options)
    result = strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    return strategy, result, grid


def test_idle_nodes_evaluate_each_new_global_and_replies_are_averaged_by_examples() -> None:
    strategy, result, grid = _run(fraction_evaluate=0.5, min_evaluate_nodes=2)
    assert set(result.evaluate_metrics_clientapp) == {1, 2, 3}
    for rnd in (1, 2, 3):
        sent = [
            m
            for m in grid.pushed
            if m.metadata.message_type == "evaluate" and m.metadata.group_id == str(rnd)
        ]
        assert len(sent) == 2  # max(2, ceil(0.5 x 4))
        got = dict(result.evaluate_metrics_clientapp[rnd])
        assert got == pytest.approx(_expected(grid, rnd))
    assert len(strategy.history) == 3


def test_evaluation_keeps_the_history_independent_of_arrival_order() -> None:
    runs = [_run(seed, fraction_evaluate=1.0) for seed in (None, 1, 2)]
    histories = [[h.to_json() for h in s.history] for s, _, _ in runs]
    assert histories[1] == histories[0]
    assert histories[2] == histories[0]
    metrics = [
        {r: dict(m) for r, m in res.evaluate_metrics_clientapp.items()} for _, res, _ in runs
    ]
    assert metrics[1] == metrics[0] == metrics[2]


def test_without_fraction_evaluate_nothing_is_sent_and_the_log_says_so() -> None:
    with flwr_logs() as caplog:
        _, result, grid = _run()
    assert result.evaluate_metrics_clientapp == {}
    assert {m.metadata.message_type for m in grid.pushed} == {"train"}
    assert "client-side evaluation: off (fraction_evaluate=0.0" in caplog.text
    lines = [r.getMessage() for r in caplog.records]
    rule = next(i for i, line in enumerate(lines) if line.startswith("\t├── aggregate: "))
    last = next(i for i, line in enumerate(lines) if line.startswith("\t└── client-side"))
    assert rule < last  # the edge rule's line sits inside the settings tree, which ends last


def test_an_evaluate_config_without_fraction_evaluate_is_warned_about() -> None:
    grid = InProcessGrid(EvaluatingToy(), 4)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), shares=EQUAL)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=1, evaluate_config=ConfigRecord({"x": 1}))
    assert "evaluate_config given but fraction_evaluate is 0" in caplog.text


def test_aggregate_evaluate_matches_a_hand_weighted_mean_and_skips_bad_replies() -> None:
    from flwr.app import Error

    strategy = EdgeStrategy(threshold=2)
    query = Message(RecordDict({}), 1001, "evaluate")
    good = [(30, 0.9, 0.1), (10, 0.5, 0.7)]
    replies = [
        Message(
            RecordDict({"m": MetricRecord({wire.NUM_EXAMPLES: n, "accuracy": acc, "loss": loss})}),
            reply_to=query,
        )
        for n, acc, loss in good
    ]
    replies.append(Message(Error(0, "boom"), reply_to=query))
    replies.append(Message(RecordDict({"m": MetricRecord({"accuracy": 1.0})}), reply_to=query))
    got = strategy.aggregate_evaluate(1, replies)
    assert got is not None
    assert got["accuracy"] == pytest.approx((30 * 0.9 + 10 * 0.5) / 40)
    assert got["loss"] == pytest.approx((30 * 0.1 + 10 * 0.7) / 40)
    assert wire.NUM_EXAMPLES not in got  # as Flower's aggregate_metricrecords
    assert aggregate_evaluate_replies([]) is None


def test_evaluate_num_examples_follow_the_train_replies_rule() -> None:
    """140 and 140.0 are counts (as in train replies); 140.5, 0, nan and "140" are not."""
    query = Message(RecordDict({}), 1001, "evaluate")

    def reply(n: object, accuracy: float = 0.5) -> Message:
        metrics = MetricRecord({"accuracy": accuracy})
        metrics[wire.NUM_EXAMPLES] = n  # type: ignore[assignment]
        return Message(RecordDict({"m": metrics}), reply_to=query)

    got = aggregate_evaluate_replies([reply(140, 1.0), reply(60.0, 0.0)])
    assert got is not None
    assert got["accuracy"] == pytest.approx(140 / 200)
    for bad in (140.5, 0, -3, float("nan")):
        assert aggregate_evaluate_replies([reply(bad)]) is None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"fraction_evaluate": 1.5}, r"fraction_evaluate must be in \[0, 1\], got 1.5"),
        ({"min_evaluate_nodes": -1}, "min_evaluate_nodes must be an integer >= 0"),
    ],
)
def test_bad_evaluation_options_name_the_field(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EdgeStrategy(threshold=2, **options)  # type: ignore[arg-type]


def test_fewer_idle_nodes_than_wanted_is_said_once() -> None:
    with flwr_logs() as caplog:
        _, result, grid = _run(fraction_evaluate=1.0)  # wants all 4: some are always training
    sent = {
        rnd: sum(
            1
            for m in grid.pushed
            if m.metadata.message_type == "evaluate" and m.metadata.group_id == str(rnd)
        )
        for rnd in (1, 2, 3)
    }
    assert min(sent.values()) < 4
    assert caplog.text.count("only idle nodes are asked") == 1
    assert "of the 4 nodes that fraction_evaluate" in caplog.text
    assert set(result.evaluate_metrics_clientapp) == {1, 2, 3}


def test_client_side_evaluation_metrics_survive_a_resume(tmp_path: Path) -> None:
    def run(rounds: int):  # type: ignore[no-untyped-def]
        grid = InProcessGrid(EvaluatingToy(), 4)
        strategy = EdgeStrategy(
            threshold=2,
            clock=virtual(),
            shares=EQUAL,
            fraction_evaluate=0.5,
            min_evaluate_nodes=2,
            checkpoint_dir=tmp_path,
            resume=True,
        )
        return strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())

    first = run(3)
    assert set(first.evaluate_metrics_clientapp) == {1, 2, 3}
    resumed = run(5)  # the finished run continues under a larger budget
    assert set(resumed.evaluate_metrics_clientapp) >= {1, 2, 3, 4}
    for rnd in (1, 2, 3):
        assert dict(resumed.evaluate_metrics_clientapp[rnd]) == dict(
            first.evaluate_metrics_clientapp[rnd]
        )


def test_an_error_reply_made_by_the_superlink_names_the_node_that_was_asked() -> None:
    """Found by a deployment probe: the SuperLink's "Node Unavailable" reply carries the
    SuperLink's id (1) as its source; the log named "node 1", not the node asked."""
    from flwr.app import Error

    from strategies.client_eval import ClientEvaluation

    evaluation = ClientEvaluation(1.0, 1, ConfigRecord({}), timeout=60.0)
    query = Message(RecordDict({}), 5566619429570181239, "evaluate")
    evaluation.sent(query.metadata.message_id, 1, 5566619429570181239)
    reply = Message(Error(5, "Error: Node Unavailable"), reply_to=query)
    reply.metadata.__dict__["_src_node_id"] = 1  # as the SuperLink sends it (no setter)
    with flwr_logs() as caplog:
        assert evaluation.received(reply, query.metadata.message_id) == 1
        assert evaluation.result(1) is None
    assert "evaluate reply of node 5566619429570181239 skipped: Error: Node Unavailable" in (
        caplog.text
    )
    assert "node 1 " not in caplog.text


def _reference(replies: list[tuple[int, dict[str, object]]]) -> dict[str, object]:
    """Brute force: each key averaged over the replies whose value of it is usable."""
    out: dict[str, object] = {}
    keys = sorted({k for _, m in replies for k in m})
    for key in keys:
        rows = [(n, m[key]) for n, m in replies if key in m]
        good = []
        for n, v in rows:
            vals = v if isinstance(v, list) else [v]
            if all(isinstance(x, float | int) and math.isfinite(x) for x in vals):
                if (
                    good
                    and len(vals) != len(good[0][1])
                    or good
                    and isinstance(v, list) != good[0][2]
                ):
                    continue
                good.append((n, vals, isinstance(v, list)))
        if not good:
            continue
        w = sum(n for n, _, _ in good)
        avg = [sum(n * vals[i] for n, vals, _ in good) / w for i in range(len(good[0][1]))]
        out[key] = avg if good[0][2] else avg[0]
    return out


def test_each_metric_is_averaged_over_the_nodes_that_sent_it() -> None:
    """Found by a new-user probe: a node sending ``nan`` (or leaving a metric out) halved the
    others' average, silently (0.8 and nan over 100 examples each gave 0.4)."""
    query = Message(RecordDict({}), 1001, "evaluate")
    replies: list[tuple[int, dict[str, object]]] = [
        (100, {"acc": 0.8, "loss": 0.3, "per_class": [0.5, 1.0]}),
        (100, {"acc": float("nan"), "loss": 0.5, "per_class": [1.0, 1.0]}),
        (50, {"loss": 1.0, "per_class": [0.0, 0.5, 0.2]}),  # no acc; a list of another length
        (30, {"acc": 0.2, "loss": float("inf"), "per_class": [0.1, 0.1]}),
    ]
    messages = []
    for n, metrics in replies:
        record = MetricRecord({wire.NUM_EXAMPLES: n})
        for k, v in metrics.items():
            record[k] = v  # type: ignore[assignment]
        messages.append(Message(RecordDict({"m": record}), reply_to=query))
    with flwr_logs() as caplog:
        got = aggregate_evaluate_replies(messages)
    assert got is not None
    expected = _reference(replies)
    assert set(got) == set(expected)
    assert got["acc"] == pytest.approx((100 * 0.8 + 30 * 0.2) / 130)
    assert got["loss"] == pytest.approx(expected["loss"])
    assert got["per_class"] == pytest.approx(expected["per_class"])
    assert "evaluate metric 'acc' of node" in caplog.text
    assert "is not finite" in caplog.text
    assert "a list of 3 values where the other replies (230 examples)" in caplog.text


def test_the_final_round_is_evaluated_on_the_nodes_it_wants_once_training_stops() -> None:
    """Found by a new-user probe: with ``fraction_evaluate=1.0`` the final round's client-side
    metric came from 1 of 4 nodes (the others were training at its aggregation), below
    ``min_evaluate_nodes``, although every node was free once the run had stopped."""
    grid = InProcessGrid(EvaluatingToy(), 4)
    strategy = EdgeStrategy(
        threshold=1, clock=virtual(), shares=EQUAL, fraction_evaluate=1.0, checkpoint_dir=""
    )
    with flwr_logs() as caplog:
        result = strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    final = len(strategy.history)
    sent = [
        m.metadata.dst_node_id
        for m in grid.pushed
        if m.metadata.message_type == "evaluate" and m.metadata.group_id == str(final)
    ]
    assert sorted(sent) == [1001, 1002, 1003, 1004]  # each node once
    line = next(r.getMessage() for r in caplog.records if "of the final round" in r.getMessage())
    asked = len(sent) - int(line.split(": ")[1].split(" more")[0])
    assert f"({len(sent)} of the 4 that fraction_evaluate" in line
    assert 0 < asked < 4  # some were idle at the aggregation, the rest asked at the end
    assert dict(result.evaluate_metrics_clientapp[final]) == pytest.approx(_expected(grid, final))
    earlier = [
        m
        for m in grid.pushed
        if m.metadata.message_type == "evaluate" and m.metadata.group_id == "1"
    ]
    assert len(earlier) < 4  # rounds during training still ask only the idle nodes


def test_a_clientapp_without_an_evaluate_handler_gets_a_hint() -> None:
    """Found by a new-user probe: with ``fraction_evaluate > 0`` and a ClientApp that has no
    ``@app.evaluate()``, every evaluation was skipped with Flower's bare ``No evaluate function
    registered with name 'default'``, which did not say what to change."""
    from conftest import make_dropin_app

    grid = InProcessGrid(make_dropin_app(), 4)
    strategy = EdgeStrategy(threshold=2, fraction_evaluate=0.5)
    with flwr_logs() as caplog:
        result = strategy.start(grid, model(0.0), num_rounds=2, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 2  # training is unaffected
    assert result.evaluate_metrics_clientapp == {}
    skipped = [r.getMessage() for r in caplog.records if "evaluate reply of node" in r.getMessage()]
    assert skipped
    for line in skipped:
        assert "No evaluate function registered" in line
        assert "no @app.evaluate() handler: pass fraction_evaluate=0.0" in line
