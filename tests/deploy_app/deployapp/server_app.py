"""ServerApp of the deployment test app: EdgeStrategy on the wall clock over a 3-vector.

A thin Grid wrapper records the partition id each node reports, so the test can check that
every SuperNode ran with its own ``--node-config``. The figures of the run are logged once as
JSON after ``FLOWER-EDGE-RESULT``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from logging import INFO

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run

from flower_edge import wire
from strategies import EdgeStrategy, LoopConfig

app = ServerApp()


class RecordingGrid(Grid):
    """Delegate to Flower's Grid; remember ``partition-id`` per replying node."""

    def __init__(self, inner: Grid) -> None:
        self.inner = inner
        self.partitions: dict[int, int] = {}

    def set_run(self, run: Run) -> None:
        """Delegate."""
        self.inner.set_run(run)

    @property
    def run(self) -> Run:
        """Delegate."""
        return self.inner.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        """Delegate."""
        return self.inner.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        """Delegate."""
        return self.inner.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Delegate."""
        return self.inner.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Delegate, recording the partition id of every train reply."""
        replies = list(self.inner.pull_messages(message_ids))
        for reply in replies:
            if reply.has_content() and wire.METRICS in reply.content.metric_records:
                metrics = reply.content.metric_records[wire.METRICS]
                if wire.PARTITION_ID in metrics:
                    pid = metrics[wire.PARTITION_ID]
                    self.partitions[int(reply.metadata.src_node_id)] = int(pid)  # type: ignore[arg-type]
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Delegate."""
        return self.inner.send_and_receive(messages, timeout=timeout)


def _num(context: Context, key: str) -> float:
    value = context.run_config[key]
    assert isinstance(value, int | float), f"{key} must be a number"
    return float(value)


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Run EdgeStrategy; log the history, the final model and the partition ids as JSON."""
    deadline = _num(context, "deadline")
    checkpoint = str(context.run_config["checkpoint-dir"])
    strategy = EdgeStrategy(
        threshold=int(_num(context, "threshold")),
        loop=LoopConfig(
            deadline=deadline if deadline > 0 else None,
            min_nodes=int(_num(context, "min-nodes")),
            registration_timeout=60.0,
            poll_interval=0.1,
        ),
        checkpoint_dir=checkpoint or None,
        resume=bool(context.run_config["resume"]),
    )
    recording = RecordingGrid(grid)
    initial = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float64))})

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        w = arrays["w"].numpy()
        return MetricRecord({"accuracy": float(w.mean()), "w0": float(w[0])})

    result = strategy.start(
        recording,
        initial,
        num_rounds=int(_num(context, "num-server-rounds")),
        timeout=_num(context, "timeout"),
        evaluate_fn=evaluate,
    )
    summary = {
        "rounds": [h.round for h in strategy.history],
        "participants": [list(h.participants) for h in strategy.history],
        "times": [h.time for h in strategy.history],
        "global": result.arrays["w"].numpy().tolist(),
        "w0": {str(r): float(m["w0"]) for r, m in result.evaluate_metrics_serverapp.items()},
        "partitions": {str(k): v for k, v in sorted(recording.partitions.items())},
        "events": [[e.node_id, e.kind, e.time, e.version] for e in strategy.events],
    }
    log(INFO, "FLOWER-EDGE-RESULT %s", json.dumps(summary, sort_keys=True))
