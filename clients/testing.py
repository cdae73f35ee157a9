"""Drive a ClientApp by hand: instruction messages and contexts outside a Flower run.

``Message(content, dst_node_id, message_type)`` needs the identity of a running ServerApp task;
these helpers build the metadata directly, so a unit test (yours or ours) can call
``app(message, context)`` like a SuperNode would.
"""

from __future__ import annotations

import itertools
import time

from flwr.app import Context, Message, Metadata, RecordDict, UserConfig

__all__ = ["instruction", "node_context"]

_ids = itertools.count(1)


def instruction(
    content: RecordDict,
    message_type: str,
    dst_node_id: int,
    *,
    run_id: int = 1,
    group_id: str = "",
    ttl: float = 3600.0,
) -> Message:
    """Return a server-to-node message as the SuperLink would deliver it (with an id)."""
    metadata = Metadata(
        run_id=run_id,
        message_id=f"test-{next(_ids):08d}",
        src_node_id=0,
        dst_node_id=dst_node_id,
        reply_to_message_id="",
        group_id=group_id,
        created_at=time.time(),
        ttl=ttl,
        message_type=message_type,
    )
    msg: Message = Message(content=content, metadata=metadata)  # type: ignore[call-overload]
    return msg


def node_context(
    node_id: int,
    *,
    partition_id: int = 0,
    num_partitions: int = 1,
    run_config: UserConfig | None = None,
    run_id: int = 1,
) -> Context:
    """Return a fresh node Context with ``partition-id`` / ``num-partitions`` set."""
    return Context(
        run_id=run_id,
        node_id=node_id,
        node_config={"partition-id": partition_id, "num-partitions": num_partitions},
        state=RecordDict(),
        run_config=dict(run_config or {}),
    )
