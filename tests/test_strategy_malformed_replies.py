"""Malformed train replies of an unmodified ClientApp: each a logged rejection naming the field.

A probe sent, from one node of four, NaN and infinite arrays, arrays of another shape or
dtype, a missing, negative, zero, fractional, NaN or list ``num-examples``, a missing or an
extra array key, no ArrayRecord, an empty reply, and extra ArrayRecords or MetricRecords.
Every malformed reply is rejected with a WARNING that names the field, and the other nodes'
updates are aggregated as without it. Found by the probe: an extra ArrayRecord or
MetricRecord beside the ones read was ignored without a word (Flower's FedAvg refuses the
whole round's aggregation for it): it is logged once per node now, and the update stands.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, flwr_logs, model, run_edge, virtual
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge import wire
from strategies import EdgeStrategy, FedAsync, FedBuff, InProcessGrid, StopConfig
from strategies.abandon import AbandonPolicy
from strategies.config import AbandonConfig

BAD = 1001  # the node (partition 0) that sends the malformed reply


#: a malformed array, by variant: (key, array or None to leave the key out)
ARRAYS: dict[str, tuple[str, Array | None]] = {
    "nan": ("w", Array(np.array([np.nan, 1, 1], dtype=np.float32))),
    "inf": ("w", Array(np.array([1, -np.inf, 1], dtype=np.float32))),
    "huge": ("w", Array(np.full(3, 3.4e38, dtype=np.float32))),
    "shape": ("w", Array(np.zeros((3, 1), dtype=np.float32))),
    "int-dtype": ("w", Array(np.ones(3, dtype=np.int32))),
    "float-steps": ("steps", Array(np.ones(1, dtype=np.float32))),
    "extra-key": ("bias", Array(np.zeros(2, dtype=np.float32))),
    "missing-key": ("steps", None),
}
#: an extra record, by variant
EXTRA: dict[str, tuple[str, ArrayRecord | MetricRecord]] = {
    "extra-arrayrecord": ("optimizer", ArrayRecord({"m": Array(np.zeros(2))})),
    "extra-metricrecord": ("more", MetricRecord({"num-examples": 99999})),
}


def _content(variant: str, arrays: ArrayRecord, pid: int) -> RecordDict:
    if variant == "empty":
        return RecordDict()
    new = {
        k: Array(v.numpy() + (np.float32(0.1 * (pid + 1)) if k == "w" else np.int64(1)))
        for k, v in arrays.items()
    }
    if variant in ARRAYS:
        key, array = ARRAYS[variant]
        new.pop(key, None)
        if array is not None:
            new[key] = array
    metrics: dict[str, object] = {"num-examples": 10 * (pid + 1)}
    if variant.startswith("num-examples="):
        value = variant.partition("=")[2]
        metrics = {} if value == "missing" else {"num-examples": eval(value)}  # noqa: S307
    content = RecordDict({"metrics": MetricRecord(metrics)})  # type: ignore[arg-type]
    if variant != "no-arrays":
        content["arrays"] = ArrayRecord(new)
    if variant in EXTRA:
        content[EXTRA[variant][0]] = EXTRA[variant][1]
    return content


def _app(variant: str) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config["partition-id"])  # type: ignore[arg-type]
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        return Message(_content(variant if pid == 0 else "ok", arrays, pid), reply_to=msg)

    return app


def _run(variant: str, kind: str = "edge") -> tuple[list[float], list[str], list[set[int]]]:
    strategy: EdgeStrategy | FedBuff | FedAsync
    if kind == "edge":
        strategy = EdgeStrategy(threshold=2, clock=virtual(), stop=StopConfig())
    elif kind == "fedbuff":
        strategy = FedBuff(threshold=2, clock=virtual())
    else:
        strategy = FedAsync(clock=virtual())
    with flwr_logs() as logs:
        result = strategy.start(
            InProcessGrid(_app(variant), 4), model(0.0), num_rounds=3, evaluate_fn=accuracy_fn()
        )
    assert sorted(result.evaluate_metrics_serverapp) == [0, 1, 2, 3]
    assert not [r for r in logs.records if r.levelno >= logging.ERROR]
    warned = [
        r.getMessage()
        for r in logs.records
        if r.levelno == logging.WARNING and "sent no virtual-seconds" not in r.getMessage()
    ]
    participants = [set(h.participants) for h in strategy.history]
    return result.arrays["w"].numpy().tolist(), warned, participants


REJECTED = [
    ("nan", "array 0 ('w') contains NaN or Inf"),
    ("inf", "array 0 ('w') contains NaN or Inf"),
    ("shape", "array 0 ('w') has shape (3, 1), expected (3,)"),
    ("huge", "array 0 ('w') moved 5.89e+38 (L2; the update 5.89e+38 in all) from the global"),
    ("int-dtype", "array 0 ('w') has non-float dtype int32, expected float like float32"),
    ("float-steps", "array 1 ('steps') has float dtype float32, expected non-float like int64"),
    ("num-examples=missing", "reply metric 'num-examples' is missing"),
    ("num-examples=-5", "num-examples must be >= 0, got -5"),
    ("num-examples=0", "finished update with num-examples = 0"),
    ("num-examples=10.5", "reply metric 'num-examples' must be an integer, got 10.5"),
    ("num-examples=float('nan')", "reply metric 'num-examples' must be finite, got nan"),
    ("num-examples=[10]", "reply metric 'num-examples' must be a number, got [10]"),
    ("num-examples=2**62", "absurd num-examples 4611686018427387904: more than 100x the median"),
    ("extra-key", "array names differ from the global model's (3 arrays, expected 2: unexpected"),
    ("missing-key", "array names differ from the global model's (1 arrays, expected 2: missing"),
    ("no-arrays", "finished update carries no arrays"),
    ("empty", "reply has no MetricRecord (needs 'num-examples')"),
]


@pytest.mark.parametrize(("variant", "needle"), REJECTED)
def test_a_malformed_reply_is_rejected_naming_the_field(variant: str, needle: str) -> None:
    w, warned, participants = _run(variant)
    mine = [line for line in warned if f"node {BAD} " in line]
    assert mine
    assert all(needle in line for line in mine), mine
    assert all("rejected" in line for line in mine)
    assert all(BAD not in p for p in participants)  # nothing of it entered an aggregate
    assert {1002, 1003, 1004} <= set().union(*participants)  # the others' updates did
    assert np.isfinite(w).all()


@pytest.mark.parametrize("kind", ["fedbuff", "fedasync"])
@pytest.mark.parametrize(
    ("variant", "needle"), [REJECTED[0], REJECTED[2], REJECTED[3], REJECTED[14]]
)
def test_the_baselines_reject_the_same_replies(kind: str, variant: str, needle: str) -> None:
    _, warned, participants = _run(variant, kind)
    assert [line for line in warned if f"node {BAD} " in line and needle in line]
    assert all(BAD not in p for p in participants)


@pytest.mark.parametrize(
    ("variant", "extra"), [("extra-arrayrecord", "optimizer"), ("extra-metricrecord", "more")]
)
def test_an_extra_record_is_logged_once_and_the_update_stands(variant: str, extra: str) -> None:
    w, warned, participants = _run(variant)
    honest, honest_warned, honest_participants = _run("ok")
    assert w == honest  # the extra record is unread
    assert participants == honest_participants
    assert honest_warned == []
    assert warned == [
        f"edge: train reply of node {BAD} carries records [{extra!r}] besides the 'arrays' "
        "ArrayRecord and the 'metrics' MetricRecord read: they are ignored, the update stands "
        "(logged once per node)"
    ]


def test_the_strategys_arrayrecord_key_is_read_among_several_arrayrecords() -> None:
    """Found by the probe: with ``arrayrecord_key="weights"`` a reply holding ``weights`` and
    another ArrayRecord was rejected ("reply has 2 ArrayRecords and none named 'arrays'"), in
    the asynchronous loop and in the synchronous ``aggregate_train`` alike."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["weights"]
        assert isinstance(arrays, ArrayRecord)
        new = {k: Array(v.numpy() + v.numpy().dtype.type(1)) for k, v in arrays.items()}
        content = RecordDict(
            {
                "weights": ArrayRecord(new),
                "optimizer": ArrayRecord({"m": Array(np.zeros(2))}),
                "m": MetricRecord({"num-examples": 10}),
            }
        )
        return Message(content, reply_to=msg)

    keys = {"arrayrecord_key": "weights", "configrecord_key": "cfg"}
    strategy = EdgeStrategy(threshold=2, clock=virtual(), stop=StopConfig(), **keys)
    with flwr_logs() as logs:
        strategy.start(InProcessGrid(app, 4), model(0.0), num_rounds=2)
    warned = [r.getMessage() for r in logs.records if r.levelno >= logging.WARNING]
    assert not [w for w in warned if "rejected" in w]
    assert [w for w in warned if "records ['optimizer'] besides the 'weights' ArrayRecord" in w]
    assert len(strategy.history) == 2
    fedbuff = FedBuff(threshold=2, **keys)
    grid = InProcessGrid(app, 3)
    replies = grid.send_and_receive(list(fedbuff.configure_train(1, model(0.0), {}, grid)))  # type: ignore[arg-type]
    new, _ = fedbuff.aggregate_train(1, replies)
    assert new is not None
    assert new["w"].numpy().tolist() == [1.0, 1.0, 1.0]


class _BadFlag(ToyEdge):
    """ToyEdge whose node 1001 (partition 0) sends ``abandoned`` = ``flag`` in every reply."""

    flag: int = 7

    def train(self, msg: Message, ctx: Context, pid: int) -> Message:
        reply = super().train(msg, ctx, pid)
        if pid == 0:
            reply.content["metrics"][wire.ABANDONED] = self.flag  # type: ignore[index]
        return reply


@pytest.mark.parametrize("flag", [7, -1])
def test_an_abandoned_flag_other_than_0_or_1_is_rejected(flag: int) -> None:
    """Found by the probe: ``abandoned`` = 7 or -1 was read as an abandon (``done`` = 2 was
    already rejected), so each of the node's updates counted in the reported abandon tally."""
    toy = _BadFlag()
    toy.flag = flag
    with flwr_logs() as logs:
        strategy, result, _ = run_edge(toy, rounds=2)
    mine = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]
    assert mine
    assert all(f"abandoned must be 0 or 1, got {flag}" in line for line in mine), mine
    assert all(BAD not in h.participants for h in strategy.history)
    assert result.train_metrics_clientapp[2]["abandoned-jobs"] == 0


def test_samples_processed_beyond_the_share_do_not_count_as_wasted_compute() -> None:
    """Found by the probe: a progress report with ``samples-processed`` = 10**12 on a share of
    100, then an abandon, added 10**12 samples to the reported compute wasted."""
    policy = AbandonPolicy(AbandonConfig(), enabled=True)
    policy.progress(1, 100, 10**12, abandoned=False)
    policy.progress(1, 100, 40, abandoned=True)
    assert policy.tally.samples_wasted == 100
    assert policy.tally.samples_saved == 0
    policy.progress(2, 0, 500, abandoned=False)  # no known share (a plain app's): as reported
    policy.progress(2, 0, 0, abandoned=True)
    assert policy.tally.samples_wasted == 600
