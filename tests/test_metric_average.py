"""Metrics of several nodes averaged by example count: no order dependence, nothing silent.

Found by a probe: the first reply's list length won. In client-side evaluation a node whose
``per_class`` list had another length than the others', if its reply came first, made every
other node's value be skipped (each with a WARNING that blamed the honest nodes); the train
metrics (``Result.train_metrics_clientapp``) dropped such values without a word, and kept the
first reply's shape the same way. Flower's FedAvg raises on lists of different lengths
(``zip(strict=True)``) and skips the round when the replies' keys differ.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
from conftest import flwr_logs
from flwr.app import Message, MetricRecord, RecordDict
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from flower_edge import wire
from strategies.client_eval import aggregate_evaluate_replies
from strategies.intake import averaged_app_metrics
from strategies.metric_average import average_metrics
from strategies.records import AppMetric, Update

BAD = 1001  # the node of a malformed evaluate reply
#: (node, examples, per_class): node 7's list is one longer, and it has the fewest examples
ROWS: list[tuple[int, int, list[float]]] = [
    (7, 10, [1.0, 1.0, 1.0]),
    (8, 100, [0.5, 0.5]),
    (9, 300, [1.0, 0.0]),
]
EXPECTED = [(100 * 0.5 + 300 * 1.0) / 400, (100 * 0.5) / 400]


def _reply(node: int, examples: int, metrics: dict[str, object]) -> Message:
    query = Message(RecordDict(), dst_node_id=node, message_type="evaluate")
    record = MetricRecord({wire.NUM_EXAMPLES: examples, **metrics})  # type: ignore[dict-item]
    out = Message(RecordDict({wire.METRICS: record}), reply_to=query)
    out.metadata.__dict__["_src_node_id"] = node
    return out


def _warnings(logs: object) -> list[str]:
    return [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]  # type: ignore[attr-defined]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_shape_most_examples_sent_wins_in_any_order(order: tuple[int, ...]) -> None:
    rows = [ROWS[i] for i in order]
    with flwr_logs() as logs:
        got = aggregate_evaluate_replies(
            [_reply(n, w, {"per_class": v, "acc": 0.5}) for n, w, v in rows]
        )
    assert got is not None
    assert got["per_class"] == pytest.approx(EXPECTED)
    assert got["acc"] == 0.5
    assert _warnings(logs) == [
        "evaluate metric 'per_class' of node 7 skipped: a list of 3 values where the other "
        "replies (400 examples) sent a list of 2 values"
    ]


def test_train_metrics_of_another_shape_are_logged_and_the_majority_is_kept() -> None:
    def update(node: int, examples: int, value: AppMetric) -> Update:
        return Update(
            node_id=node,
            job_id=node,
            base_version=0,
            arrays=(np.zeros(1),),
            num_examples=examples,
            share=0,
            delay=0.0,
            received_at=0.0,
            late=False,
            train_loss=None,
            app_metrics=(("per_class", value),),
        )

    updates = [update(n, w, tuple(v)) for n, w, v in ROWS] + [update(6, 5, 2.0)]
    with flwr_logs() as logs:
        got = averaged_app_metrics(updates)
    assert got["per_class"] == pytest.approx(EXPECTED)
    assert sorted(_warnings(logs)) == [
        "train metric 'per_class' of node 6 skipped: a number where the other replies (400 "
        "examples) sent a list of 2 values",
        "train metric 'per_class' of node 7 skipped: a list of 3 values where the other "
        "replies (400 examples) sent a list of 2 values",
    ]


def test_a_tie_is_broken_by_nodes_then_a_number_then_the_shorter_list() -> None:
    with flwr_logs():
        assert average_metrics([(1, 10, {"m": [1.0]}), (2, 10, {"m": 3.0})], "evaluate") == {
            "m": 3.0
        }
        rows = [(1, 10, {"m": [1.0, 1.0, 1.0]}), (2, 10, {"m": [2.0, 2.0]})]
        assert average_metrics(rows, "evaluate") == {"m": [2.0, 2.0]}
        rows = [(1, 20, {"m": [1.0, 1.0, 1.0]}), (2, 10, {"m": [2.0]}), (3, 10, {"m": [4.0]})]
        assert average_metrics(rows, "evaluate") == {"m": [3.0]}  # 2 nodes beat 1 at 20


def test_replies_of_one_shape_average_as_flowers_fedavg() -> None:
    rows = [(n, w, v[:2]) for n, w, v in ROWS]
    replies = [_reply(n, w, {"per_class": v, "acc": n / 10}) for n, w, v in rows]
    ours = aggregate_evaluate_replies(replies)
    flowers = aggregate_metricrecords([m.content for m in replies], wire.NUM_EXAMPLES)
    assert ours is not None
    assert set(ours) == set(flowers) == {"per_class", "acc"}
    assert ours["acc"] == pytest.approx(flowers["acc"])
    assert ours["per_class"] == pytest.approx(flowers["per_class"])
    with pytest.raises(ValueError, match="zip"):  # Flower's own: lists of another length
        aggregate_metricrecords(
            [_reply(n, w, {"per_class": v}).content for n, w, v in ROWS], wire.NUM_EXAMPLES
        )


def test_a_metric_missing_from_some_replies_is_averaged_over_the_others_and_logged() -> None:
    """Found by a probe: the average silently covered fewer nodes (a train metric that one
    node sent as NaN, which the reply's parse drops, too). Flower's FedAvg skips the round."""
    rows = [(1, 10, {"acc": 0.2, "loss": 1.0}), (2, 30, {"loss": 3.0}), (3, 10, {"loss": 1.0})]
    with flwr_logs() as logs:
        got = average_metrics(rows, "train")
    assert got == {"acc": 0.2, "loss": pytest.approx(2.2)}
    assert _warnings(logs) == [
        "train metric 'acc' is missing from the replies of node(s) [2, 3]: averaged over the others"
    ]


# ---------------------------------------------------------------- malformed evaluate replies


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (
            RecordDict({"metrics": MetricRecord({wire.NUM_EXAMPLES: 2**62, "acc": 0.9})}),
            "absurd num-examples 4611686018427387904: more than 100x the median (10)",
        ),
        (
            RecordDict(
                {
                    "a": MetricRecord({wire.NUM_EXAMPLES: 10, "acc": 0.9}),
                    "b": MetricRecord({wire.NUM_EXAMPLES: 5, "acc": 0.1}),
                }
            ),
            "it has 2 MetricRecords ['a', 'b'] and none named 'metrics'",
        ),
        (
            RecordDict({"metrics": MetricRecord({wire.NUM_EXAMPLES: -10, "acc": 0.9})}),
            "num-examples must be an integer > 0 within int64",
        ),
    ],
)
def test_a_malformed_evaluate_reply_is_skipped_naming_why(content: RecordDict, needle: str) -> None:
    """Found by a probe: an evaluate reply claiming 2**62 examples took the round's average
    over (train replies are screened against 100x the others' median), and one with two
    MetricRecords, neither named ``metrics``, was read for the first (a train reply's is
    rejected)."""
    query = Message(RecordDict(), dst_node_id=BAD, message_type="evaluate")
    bad = Message(content, reply_to=query)
    bad.metadata.__dict__["_src_node_id"] = BAD
    good = [_reply(n, 10, {"acc": 0.5}) for n in (1002, 1003)]
    with flwr_logs() as logs:
        got = aggregate_evaluate_replies([good[0], bad, good[1]])
    assert got is not None
    assert dict(got) == {"acc": 0.5}
    (line,) = _warnings(logs)
    assert line.startswith(f"evaluate reply of node {BAD} skipped: ")
    assert needle in line


def test_the_absurd_screen_of_evaluate_replies_follows_absurd_factor() -> None:
    replies = [_reply(1001, 5000, {"acc": 1.0})] + [_reply(n, 10, {"acc": 0.0}) for n in (2, 3)]
    with flwr_logs():
        assert aggregate_evaluate_replies(replies)["acc"] == 0.0  # type: ignore[index]
        loose = aggregate_evaluate_replies(replies, absurd_factor=1000.0)
    assert loose is not None
    assert loose["acc"] == pytest.approx(5000 / 5020)
