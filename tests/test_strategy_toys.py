"""Toy ClientApps for the strategy tests (numpy only, exact and fast), and their own checks.

``ToyEdge`` speaks the edge protocol of ``flower_edge.wire``: it answers the profile query,
keeps its job in ``context.state``, trains in slices of ``SLICE_BUDGET`` virtual seconds,
reports progress and ``VIRTUAL_SECONDS``, and abandons a stale job when told of a newer
global (if ``abandon``). "Training" moves the model a fixed fraction towards a per-node
target, so every result can be computed by hand. ``dropin_app`` is an unmodified Flower
ClientApp (train only, arrays + num-examples).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge import wire

KEYS = ("w", "steps")


def model(w: float | list[float] = 0.0, steps: int = 0) -> ArrayRecord:
    vec = np.asarray(w if isinstance(w, list) else [w, w, w], dtype=np.float32)
    return ArrayRecord({"w": Array(vec), "steps": Array(np.array([steps], dtype=np.int64))})


def as_numpy(record: ArrayRecord) -> list[np.ndarray]:
    return [record[k].numpy() for k in KEYS]


def target(partition: int) -> np.ndarray:
    return np.full(3, float(partition + 1), dtype=np.float32)


@dataclass
class ToyEdge:
    """An edge-protocol client with exact virtual durations: ``samples / speed + overhead``."""

    speeds: list[float] = field(default_factory=lambda: [10.0, 20.0, 40.0, 80.0])
    overhead: float = 0.5
    abandon: bool = True
    local_samples: int = 100
    lr: float = 0.5
    evaluations: Callable[[int], tuple[float, float, float, float]] | None = None
    returned: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)
    replies: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config[wire.PARTITION_ID])
        if msg.metadata.message_type == wire.PROFILE_MESSAGE_TYPE:
            return self.profile(msg, pid)
        return self.train(msg, ctx, pid)

    def profile(self, msg: Message, pid: int) -> Message:
        ev = self.evaluations(pid) if self.evaluations else (1.0 + pid, 0.0, 1.0, 1.0)
        rec = ConfigRecord(
            {
                wire.EVAL_CPU: ev[0],
                wire.EVAL_GPU: ev[1],
                wire.EVAL_MEMORY: ev[2],
                wire.EVAL_DISK: ev[3],
                wire.LOCAL_SAMPLES: self.local_samples,
            }
        )
        return Message(RecordDict({wire.PROFILE: rec}), reply_to=msg)

    def train(self, msg: Message, ctx: Context, pid: int) -> Message:
        cfg = msg.content.config_records[wire.CONFIG]
        job = int(cfg[wire.JOB_ID])  # type: ignore[arg-type]
        version = int(cfg[wire.GLOBAL_VERSION])  # type: ignore[arg-type]
        budget = float(cfg[wire.SLICE_BUDGET])  # type: ignore[arg-type]
        arrays = msg.content.array_records.get(wire.ARRAYS)
        state = ctx.state.config_records.get("toy")
        abandoned = 0
        if state is None or int(state["job"]) != job:  # type: ignore[call-overload]
            assert arrays is not None, "a new job must carry the global model"
            w, base, pos = as_numpy(arrays), version, 0
            share = int(cfg.get(wire.SAMPLE_SHARE, self.local_samples))  # type: ignore[call-overload]
        else:
            w = as_numpy(ctx.state.array_records["toy-w"])
            base, pos = int(state["base"]), int(state["pos"])  # type: ignore[call-overload]
            share = int(state["share"])  # type: ignore[call-overload]
            if arrays is not None and version > base and self.abandon:
                w, base, pos, abandoned = as_numpy(arrays), version, 0, 1
        speed = self.speeds[pid % len(self.speeds)]
        todo = share - pos
        n = todo if budget <= 0 else min(todo, max(1, int(speed * budget)))
        new_w = (w[0] + self.lr * (target(pid) - w[0]) * (n / share)).astype(np.float32)
        new = [new_w, w[1] + n]
        pos += n
        done = pos >= share
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: pos,
                wire.DONE: int(done),
                wire.JOB_ID: job,
                wire.BASE_VERSION: base,
                wire.SAMPLES_PROCESSED: pos,
                wire.ABANDONED: abandoned,
                wire.VIRTUAL_SECONDS: n / speed + self.overhead,
                wire.TRAIN_LOSS: float(np.abs(target(pid) - new_w).mean()),
            }
        )
        self.replies.append(
            {"node": ctx.node_id, "job": job, "done": done, "base": base, "abandoned": abandoned}
        )
        content = RecordDict({wire.METRICS: metrics})
        if done:
            content[wire.ARRAYS] = ArrayRecord(dict(zip(KEYS, map(Array, new), strict=True)))
            self.returned[(ctx.node_id, job)] = new
            ctx.state.config_records.pop("toy", None)
        else:
            ctx.state["toy"] = ConfigRecord({"job": job, "base": base, "pos": pos, "share": share})
            ctx.state["toy-w"] = ArrayRecord(dict(zip(KEYS, map(Array, new), strict=True)))
        return Message(content, reply_to=msg)


def make_dropin_app(step: float = 0.1) -> ClientApp:
    """An unmodified Flower ClientApp: train only, replies arrays + num-examples."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        pid = int(ctx.node_config["partition-id"])
        new = {
            k: Array(v.numpy() + (step * (pid + 1) if k == "w" else 1)) for k, v in arrays.items()
        }
        reply = RecordDict(
            {"arrays": ArrayRecord(new), "metrics": MetricRecord({"num-examples": 10 * (pid + 1)})}
        )
        return Message(reply, reply_to=msg)

    return app


def accuracy_fn(goal: float = 2.0) -> Callable[[int, ArrayRecord], MetricRecord]:
    """An evaluate_fn: accuracy = 1 / (1 + |mean(w) - goal|)."""

    def evaluate(_: int, arrays: ArrayRecord) -> MetricRecord:
        w = arrays["w"].numpy().astype(np.float64)
        err = float(abs(w.mean() - goal))
        return MetricRecord({"accuracy": 1.0 / (1.0 + err), "loss": err})

    return evaluate


def test_toy_edge_trains_towards_its_target_in_slices() -> None:
    from strategies import InProcessGrid

    toy = ToyEdge()
    grid = InProcessGrid(toy, 1)
    cfg = {
        wire.JOB_ID: 7,
        wire.GLOBAL_VERSION: 0,
        wire.SAMPLE_SHARE: 20,
        wire.SLICE_BUDGET: 1.0,
        wire.SEND_TIME: 0.0,
    }
    first = Message(
        RecordDict({wire.ARRAYS: model(0.0), wire.CONFIG: ConfigRecord(cfg)}), 1001, "train"
    )
    [msg_id] = grid.push_messages([first])
    [reply] = grid.pull_messages([msg_id])
    metrics = reply.content.metric_records[wire.METRICS]
    assert metrics[wire.DONE] == 0
    assert metrics[wire.SAMPLES_PROCESSED] == 10
    assert metrics[wire.VIRTUAL_SECONDS] == 10 / 10.0 + 0.5
    second = Message(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), 1001, "train")
    [msg_id] = grid.push_messages([second])
    [reply] = grid.pull_messages([msg_id])
    assert reply.content.metric_records[wire.METRICS][wire.DONE] == 1
    w = reply.content.array_records[wire.ARRAYS]["w"].numpy()
    # two half-slices: w = 0 + 0.5 * (1 - 0) * 0.5 = 0.25, then 0.25 + 0.5 * 0.75 * 0.5
    np.testing.assert_allclose(w, np.full(3, 0.25 + 0.5 * 0.75 * 0.5, dtype=np.float32))


class FlwrLogs(logging.Handler):
    """Collects the ``flwr`` logger's records directly (caplog misses them once another
    test has turned the logger's propagation off)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)


@contextlib.contextmanager
def flwr_logs(level: int = logging.INFO) -> Iterator[FlwrLogs]:
    logger = logging.getLogger("flwr")
    handler = FlwrLogs()
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(level, old) if old else level)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
