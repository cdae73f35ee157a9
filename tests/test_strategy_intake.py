"""Plain ClientApps: absurd num-examples screened, the app's own metrics kept, array names.

A plain Flower ClientApp has no known sample share, so its ``num-examples`` is its weight:
one node that claims 10**9 examples must not take the aggregate over. Its own train metrics
(the quickstart's ``train_loss``) are averaged as Flower's FedAvg averages them.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import accuracy_fn, flwr_logs, model
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge import wire
from strategies import EdgeStrategy, InProcessGrid, ManualClock
from strategies.intake import absurd_examples, averaged_app_metrics, name_array
from strategies.records import AppMetric, Update, app_metrics

LIAR = 1003  # partition 2


def _plain_app(lie_from: int = 0) -> ClientApp:
    """A quickstart-shaped ClientApp; node LIAR claims 10**9 examples from its job ``lie_from``."""
    app = ClientApp()
    calls: dict[int, int] = {}

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        pid = int(ctx.node_config["partition-id"])
        calls[ctx.node_id] = calls.get(ctx.node_id, 0) + 1
        new = {k: Array(v.numpy() + (0.1 if k == "w" else 1)) for k, v in arrays.items()}
        examples = 10 * (pid + 1)
        if ctx.node_id == LIAR and calls[ctx.node_id] > lie_from:
            examples = 10**9
        metrics = {
            "num-examples": examples,
            "train_loss": 1.0 + pid,
            "per_class": [float(pid), 1.0],
            "nan_list": [1.0, math.nan],
        }
        reply = RecordDict({"arrays": ArrayRecord(new), "metrics": MetricRecord(metrics)})
        return Message(reply, reply_to=msg)

    return app


def _brute_absurd(n: int, node: int, reported: dict[int, int], factor: float) -> bool:
    others = sorted(v for k, v in reported.items() if k != node)
    if len(others) < 2:
        return False
    mid = len(others) // 2
    median = others[mid] if len(others) % 2 else (others[mid - 1] + others[mid]) / 2
    return n > factor * median


@pytest.mark.parametrize(
    ("n", "reported"),
    [
        (10**9, {1: 10, 2: 20, 3: 30}),
        (3000, {1: 10, 2: 20, 3: 30}),
        (2001, {1: 10, 2: 20, 3: 30}),
        (2000, {1: 10, 2: 20, 3: 30}),
        (10**9, {1: 10}),
        (10**9, {7: 5, 1: 10}),
        (500, {7: 10**9, 1: 5, 2: 5}),
        (10**9, {7: 10**9, 1: 5, 2: 5}),
    ],
)
def test_absurd_examples_matches_a_brute_force_median(n: int, reported: dict[int, int]) -> None:
    reason = absurd_examples(n, 7, reported, 100.0)
    assert (reason is not None) == _brute_absurd(n, 7, reported, 100.0)
    if reason is not None:
        assert reason.startswith(f"absurd {wire.NUM_EXAMPLES} {n}")


def test_a_plain_app_that_claims_absurd_examples_is_screened_from_the_first_round() -> None:
    grid = InProcessGrid(_plain_app(lie_from=0), 4, clock=ManualClock())
    strategy = EdgeStrategy(threshold=2, clock=ManualClock())
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    assert len(strategy.history) == 3
    for record in strategy.history:  # the honest nodes carry the aggregate, never weight ~0
        assert LIAR not in record.participants
        assert min(record.weights) > 0.1
    rejected = [e for e in strategy.events if e.kind == "rejected" and e.node_id == LIAR]
    assert rejected
    assert all("absurd num-examples 1000000000" in e.detail for e in rejected)
    assert f"rejected reply of node {LIAR}" in caplog.text


def test_a_liar_that_turns_later_is_screened_and_its_honest_updates_count() -> None:
    grid = InProcessGrid(_plain_app(lie_from=1), 4, clock=ManualClock())
    strategy = EdgeStrategy(threshold=2, clock=ManualClock())
    strategy.start(grid, model(0.0), num_rounds=4, evaluate_fn=accuracy_fn())
    participants = [p for r in strategy.history for p in r.participants]
    assert participants.count(LIAR) == 1  # its first, honest update
    assert any(e.kind == "rejected" and e.node_id == LIAR for e in strategy.events)
    for record in strategy.history:
        assert min(record.weights) > 0.1


def test_app_metrics_are_averaged_by_num_examples_like_fedavg() -> None:
    grid = InProcessGrid(_plain_app(lie_from=10**6), 4, clock=ManualClock())
    strategy = EdgeStrategy(threshold=2, clock=ManualClock())
    result = strategy.start(grid, model(0.0), num_rounds=2, evaluate_fn=accuracy_fn())
    for rnd, record in enumerate(strategy.history, start=1):
        pids = [p - 1001 for p in record.participants]
        examples = [10 * (pid + 1) for pid in pids]
        expected = sum((1.0 + pid) * n for pid, n in zip(pids, examples, strict=True))
        metrics = result.train_metrics_clientapp[rnd]
        assert metrics["train_loss"] == pytest.approx(expected / sum(examples))
        # lists element by element, as FedAvg (found by a new-user probe: they were dropped)
        per_class = sum(pid * n for pid, n in zip(pids, examples, strict=True)) / sum(examples)
        assert metrics["per_class"] == pytest.approx([per_class, 1.0])
        assert "nan_list" not in metrics  # not finite: the app's business, no error
        assert metrics["num-examples"] == sum(examples)  # the strategy's own key wins


def test_app_metrics_skip_protocol_keys_and_bad_numbers() -> None:
    record = MetricRecord(
        {
            wire.NUM_EXAMPLES: 5,
            wire.TRAIN_LOSS: 0.5,
            "train_loss": 0.25,
            "acc": 1,
            "nan": math.nan,
            "flag": [1.0, 2.0],
            "nan_list": [1.0, math.nan],
            "empty": [],
        }
    )
    assert app_metrics(record) == (("acc", 1.0), ("flag", (1.0, 2.0)), ("train_loss", 0.25))


def test_averaged_app_metrics_by_hand() -> None:
    def update(n: int, metrics: tuple[tuple[str, AppMetric], ...]) -> Update:
        return Update(
            node_id=n,
            job_id=n,
            base_version=0,
            arrays=(np.zeros(1),),
            num_examples=n,
            share=0,
            delay=0.0,
            received_at=0.0,
            late=False,
            train_loss=None,
            app_metrics=metrics,
        )

    updates = [update(10, (("a", 1.0),)), update(30, (("a", 3.0), ("b", 2.0))), update(5, ())]
    assert averaged_app_metrics(updates) == pytest.approx({"a": 2.5, "b": 2.0})
    assert averaged_app_metrics([]) == {}
    lists = [
        update(10, (("c", (1.0, 0.0)),)),
        update(30, (("c", (3.0, 4.0)),)),
        update(5, (("c", (9.0, 9.0, 9.0)),)),  # another length: left out
        update(7, (("c", 9.0),)),  # a number where lists came first: left out
    ]
    averaged = averaged_app_metrics(lists)
    assert averaged["c"] == pytest.approx([2.5, 3.0])
    assert isinstance(averaged["c"], list)


def test_a_bad_array_is_named_by_its_model_key() -> None:
    assert name_array("array 1 has shape (4,), expected (3,)", ("w", "b")) == (
        "array 1 ('b') has shape (4,), expected (3,)"
    )
    assert name_array("array 5 contains NaN or Inf", ("w",)) == "array 5 contains NaN or Inf"
    assert name_array("expected 2 arrays, got 1", ("w", "b")) == "expected 2 arrays, got 1"


def test_a_plain_run_logs_no_warning_when_every_node_is_honest() -> None:
    grid = InProcessGrid(_plain_app(lie_from=10**6), 4, clock=ManualClock())
    strategy = EdgeStrategy(threshold=2, clock=ManualClock())
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(e.kind == "rejected" for e in strategy.events)


def test_a_client_traceback_is_logged_as_its_last_line_without_colour_codes() -> None:
    from strategies.records import short_error

    reason = (
        "\x1b[91mTraceback (most recent call last):\x1b[0m\n"
        '  File "app.py", line 3, in train\n'
        "    raise RuntimeError('disk full')\n"
        "RuntimeError: disk full\n\n"
    )
    assert short_error(reason) == "RuntimeError: disk full (the node logs the traceback)"
    assert short_error("Node unavailable") == "Node unavailable"
    assert short_error("") == "(no reason given)"
    assert short_error("x" * 1000) == "x" * 297 + "..."


@pytest.mark.parametrize("loss", [math.nan, math.inf, -math.inf])
def test_a_train_loss_that_is_not_a_finite_number_is_dropped_not_the_update(loss: object) -> None:
    from strategies.records import parse_train_reply

    query = Message(RecordDict({}), 1001, "train")
    metrics = MetricRecord({wire.NUM_EXAMPLES: 5})
    metrics[wire.TRAIN_LOSS] = loss  # type: ignore[assignment]
    arrays = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))})
    reply = Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=query)
    parsed = parse_train_reply(reply, ("w",))
    assert parsed.train_loss is None
    assert parsed.arrays is not None
    assert parsed.num_examples == 5


def test_list_app_metrics_of_a_buffered_update_survive_a_checkpoint(tmp_path: Path) -> None:
    from strategies.checkpoint import CheckpointStore, buffer_entry, buffered_updates

    update = Update(
        node_id=7,
        job_id=3,
        base_version=0,
        arrays=(np.ones(2, dtype=np.float32),),
        num_examples=5,
        share=0,
        delay=1.0,
        received_at=11.0,
        late=False,
        train_loss=None,
        app_metrics=(("acc", 0.5), ("per_class", (0.25, 0.75))),
    )
    store = CheckpointStore(tmp_path)
    entry = buffer_entry(update, start_time=10.0)
    store.save_buffered([entry], entry, list(update.arrays))
    (restored,) = buffered_updates(store, [np.zeros(2, dtype=np.float32)], 10.0, None, "edge")
    assert restored.app_metrics == update.app_metrics
    assert averaged_app_metrics([restored]) == {"acc": 0.5, "per_class": [0.25, 0.75]}
