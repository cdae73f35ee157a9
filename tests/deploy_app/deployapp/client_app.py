"""ClientApp of the tiny deployment test app: adds (partition-id + 1) to the vector."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    arrays = msg.content["arrays"]
    assert isinstance(arrays, ArrayRecord)
    vec = arrays.to_numpy_ndarrays()[0]
    pid = int(context.node_config["partition-id"])
    content = RecordDict(
        {
            "arrays": ArrayRecord([vec + (pid + 1)]),
            "metrics": MetricRecord({"num-examples": 10}),
        }
    )
    return Message(content=content, reply_to=msg)
