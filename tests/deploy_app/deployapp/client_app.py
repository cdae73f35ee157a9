"""Numpy client of the deployment test app: a finished update per train message.

The update is the received global model plus ``partition-id + 1`` (from ``--node-config``);
the reply also reports the partition id so the server can check each node's config. A node
"trains" for ``train-seconds`` (run config) so that tests can kill it mid-training.
"""

from __future__ import annotations

import time

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge import wire

app = ClientApp()


@app.query(wire.PROFILE_ACTION)
def profile(msg: Message, context: Context) -> Message:
    """Answer the profile query with equal, honest figures."""
    record = ConfigRecord(
        {
            wire.EVAL_CPU: 1.0,
            wire.EVAL_GPU: 0.0,
            wire.EVAL_MEMORY: 1.0,
            wire.EVAL_DISK: 1.0,
            wire.LOCAL_SAMPLES: 100,
        }
    )
    return Message(RecordDict({wire.PROFILE: record}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Return global + (partition-id + 1) as a finished update of the message's job."""
    cfg = msg.content[wire.CONFIG]
    arrays = msg.content[wire.ARRAYS]
    assert isinstance(cfg, ConfigRecord)
    assert isinstance(arrays, ArrayRecord)
    pid = int(context.node_config[wire.PARTITION_ID])  # type: ignore[arg-type]
    seconds = float(context.run_config.get("train-seconds", 0.0))  # type: ignore[arg-type]
    if seconds > 0:
        time.sleep(seconds)  # stands for local training time on a device
    out = ArrayRecord({k: Array(arrays[k].numpy() + float(pid + 1)) for k in arrays})
    share = int(cfg.get(wire.SAMPLE_SHARE, 0))  # type: ignore[call-overload]
    metrics = MetricRecord(
        {
            wire.NUM_EXAMPLES: share or 10,
            wire.DONE: 1,
            wire.JOB_ID: int(cfg[wire.JOB_ID]),  # type: ignore[call-overload]
            wire.BASE_VERSION: int(cfg[wire.GLOBAL_VERSION]),  # type: ignore[call-overload]
            wire.PARTITION_ID: pid,
        }
    )
    return Message(RecordDict({wire.ARRAYS: out, wire.METRICS: metrics}), reply_to=msg)
