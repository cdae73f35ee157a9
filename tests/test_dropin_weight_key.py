"""Drop-in: FedAvg's ``weighted_by_key`` carries over to the semi-asynchronous strategies.

Found by a new-user probe: a plain Flower ClientApp whose replies give their example count as
``num_examples`` runs with ``FedAvg(weighted_by_key="num_examples")``; swapping in
``EdgeStrategy(threshold=K, weighted_by_key="num_examples")`` raised a TypeError, and without
the argument every train reply was rejected with ``reply metric 'num-examples' is missing``,
which did not say what the reply held nor how to name another key.
"""

from __future__ import annotations

import logging

import pytest
from conftest import accuracy_fn, flwr_logs, model
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import FedAvg

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, FedAsync, FedBuff, InProcessGrid

KEY = "num_examples"


def _app() -> ClientApp:
    """A plain ClientApp that counts its examples in ``num_examples`` (10 x (partition + 1))."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])  # type: ignore[arg-type]
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        step = {"w": 0.1 * (pid + 1), "steps": 1}
        new = {k: Array(v.numpy() + step[k]) for k, v in arrays.items()}
        metrics = MetricRecord({KEY: 10 * (pid + 1), "train_loss": float(pid)})
        return Message(RecordDict({"arrays": ArrayRecord(new), "metrics": metrics}), reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])  # type: ignore[arg-type]
        metrics = MetricRecord({KEY: 10 * (pid + 1), "eval_acc": pid / 10})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    return app


def _expected_eval(grid: InProcessGrid, rnd: int) -> float:
    """FedAvg's weighted mean of ``eval_acc`` over the nodes asked to evaluate round ``rnd``."""
    pids = [
        int(m.metadata.dst_node_id) - 1001
        for m in grid.pushed
        if m.metadata.message_type == "evaluate" and m.metadata.group_id == str(rnd)
    ]
    weights = [10 * (p + 1) for p in pids]
    return sum(w * p / 10 for w, p in zip(weights, pids, strict=True)) / sum(weights)


def test_weighted_by_key_weights_train_and_evaluate_replies_as_fedavg() -> None:
    grid = InProcessGrid(_app(), 4)
    strategy = EdgeStrategy(
        threshold=3,  # every node in each aggregation: the weights are the counts' shares
        weighted_by_key=KEY,
        decay="constant",
        fraction_evaluate=1.0,
    )
    with flwr_logs() as caplog:
        result = strategy.start(grid, model(0.0), num_rounds=2, evaluate_fn=accuracy_fn())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert len(strategy.history) == 2
    first = strategy.history[0]
    expected = {node: 10 * (node - 1000) / 100 for node in first.participants}
    assert dict(zip(first.participants, first.weights, strict=True)) == pytest.approx(expected)
    train = result.train_metrics_clientapp[1]
    assert train["num-examples"] == 100
    assert KEY not in train  # the weighting key is left out of the app's metrics, as FedAvg
    assert train["train_loss"] == pytest.approx(sum(10 * (p + 1) * p for p in range(4)) / 100)
    for rnd, metrics in result.evaluate_metrics_clientapp.items():
        assert KEY not in metrics
        assert metrics["eval_acc"] == pytest.approx(_expected_eval(grid, rnd))
    # Flower's FedAvg reads the same key the same way
    fedavg = FedAvg(weighted_by_key=KEY).start(InProcessGrid(_app(), 4), model(0.0), num_rounds=1)
    assert fedavg.evaluate_metrics_clientapp[1]["eval_acc"] == pytest.approx(
        sum(10 * (p + 1) * p / 10 for p in range(4)) / 100
    )


def test_a_missing_count_names_the_replys_metrics_and_weighted_by_key() -> None:
    grid = InProcessGrid(_app(), 4)
    strategy = EdgeStrategy(threshold=2)
    with flwr_logs() as caplog:
        result = strategy.start(grid, model(0.0), num_rounds=1)
    assert result.train_metrics_clientapp == {}
    rejected = [r.getMessage() for r in caplog.records if "rejected reply" in r.getMessage()]
    assert rejected
    assert (
        "reply metric 'num-examples' is missing (its metrics: 'num_examples', 'train_loss'); "
        "name your ClientApp's key of the example count with weighted_by_key=..."
    ) in rejected[0]


def test_a_reply_without_the_named_key_falls_back_to_num_examples_or_says_both() -> None:
    plain = InProcessGrid(_app(), 4)
    with flwr_logs() as caplog:
        FedBuff(threshold=2, weighted_by_key="examples").start(plain, model(0.0), num_rounds=1)
    assert (
        "reply metric 'examples' (weighted_by_key) or 'num-examples' is missing (its metrics: "
        "'num_examples', 'train_loss')"
    ) in caplog.text


@pytest.mark.parametrize("bad", ["", "  ", 3, None, "done", "job-id"])
def test_weighted_by_key_must_name_a_metric_of_the_app(bad: object) -> None:
    with pytest.raises(ConfigError, match="weighted_by_key"):
        EdgeStrategy(threshold=2, weighted_by_key=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="weighted_by_key"):
        FedAsync(weighted_by_key=bad)  # type: ignore[arg-type]


def test_an_empty_metricrecord_is_not_pointed_to_weighted_by_key() -> None:
    """Found by a new-user probe of Flower's ``examples/whisper-federated-finetuning``: a node
    whose data is too small to train replies with an empty MetricRecord (and a ConfigRecord
    ``{"trained": False}`` that its ``ExclusiveFedAvg`` filters on). Each such reply was
    rejected with "name your ClientApp's key of the example count with weighted_by_key=...",
    which sent the user looking for a key the app never had."""
    from flower_edge.errors import InputError
    from strategies import parse_train_reply

    msg = Message(RecordDict({"arrays": model(0.0)}), dst_node_id=1, message_type="train")
    trained = ConfigRecord({"trained": False})
    content = RecordDict({"arrays": model(0.0), "metrics": MetricRecord({}), "config": trained})
    reply = Message(content, reply_to=msg)
    with pytest.raises(InputError) as info:
        parse_train_reply(reply, ["w", "steps"], "num-examples")
    assert str(info.value) == (
        "reply metric 'num-examples' is missing (its MetricRecord is empty): an update without "
        "an example count is left out of the aggregation"
    )
    assert "weighted_by_key" not in str(info.value)


def test_a_reply_without_metrics_names_the_key_it_needs() -> None:
    from flower_edge.errors import InputError
    from strategies import parse_train_reply

    msg = Message(RecordDict({"arrays": model(0.0)}), dst_node_id=1, message_type="train")
    reply = Message(RecordDict({"arrays": model(0.0)}), reply_to=msg)
    with pytest.raises(InputError, match=r"reply has no MetricRecord \(needs 'num_examples'\)"):
        parse_train_reply(reply, ["w", "steps"], KEY)


def test_an_evaluate_reply_without_the_count_names_weighted_by_key() -> None:
    """Found by a code review: with weighted_by_key="n" an evaluate reply holding neither
    'n' nor 'num-examples' was skipped naming only num-examples (a train reply names both)."""
    from strategies.client_eval import aggregate_evaluate_replies

    query = Message(RecordDict({}), 1001, "evaluate")
    reply = Message(RecordDict({"m": MetricRecord({"eval_acc": 0.5, "count": 10})}), reply_to=query)
    with flwr_logs() as caplog:
        assert aggregate_evaluate_replies([reply], weight_key="n") is None
    assert "skipped: 'n' (weighted_by_key) or num-examples must be an integer > 0" in caplog.text
    assert "(its metrics: ['count', 'eval_acc'])" in caplog.text


def test_a_protocol_reply_without_num_examples_is_not_pointed_to_weighted_by_key() -> None:
    """Found by a code review: weighted_by_key applies to a plain ClientApp's replies only,
    yet a flower-edge protocol reply (done, job-id) without num-examples was told to name
    its count key with weighted_by_key."""
    from clients.testing import instruction
    from flower_edge import wire
    from flower_edge.errors import InputError
    from strategies.records import parse_train_reply

    query = instruction(RecordDict({}), "train", 1001)
    metrics = MetricRecord({wire.DONE: 1, wire.JOB_ID: 3, wire.BASE_VERSION: 0})
    reply = Message(RecordDict({wire.METRICS: metrics}), reply_to=query)
    with pytest.raises(InputError) as info:
        parse_train_reply(reply, ["w"], "examples")
    assert str(info.value) == (
        "reply metric 'num-examples' is missing (its metrics: 'base-version', 'done', 'job-id')"
    )
