"""Fake edge clients, scripted clocks and log capture for the fault tests and the soak benchmark.

The clients speak flower-edge's wire protocol (:mod:`flower_edge.wire`) with numpy only, so a
run of hundreds of aggregations costs milliseconds per message and the server side is what is
under test. :class:`ScriptedClock` is a :class:`~strategies.clock.ManualClock` that runs actions
(kill a node, restart it, "kill the server") when its reading passes given times: faults happen
at exact points of the run, deterministically, with no real waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.common.constant import ErrorCode

from flower_edge import wire
from strategies.clock import ManualClock

__all__ = [
    "HONEST_PROFILE",
    "LogCapture",
    "ScriptedClock",
    "ServerKilled",
    "capture_flwr_logs",
    "edge_app",
    "error_app",
    "initial_model",
    "train_config",
]

#: resource evaluations (cpu, gpu, memory, disk) of an honest node
HONEST_PROFILE = (1.0, 0.0, 1.0, 1.0)


def initial_model() -> ArrayRecord:
    """Return a two-array float32 model: a 3-vector and a 2x2 matrix of zeros."""
    return ArrayRecord(
        {
            "w": Array(np.zeros(3, dtype=np.float32)),
            "m": Array(np.zeros((2, 2), dtype=np.float32)),
        }
    )


def train_config(msg: Message) -> ConfigRecord:
    """Return the ConfigRecord of a train message."""
    cfg = msg.content[wire.CONFIG]
    assert isinstance(cfg, ConfigRecord)
    return cfg


def _profile_reply(msg: Message, evaluations: tuple[float, ...], samples: int) -> Message:
    keys = (wire.EVAL_CPU, wire.EVAL_GPU, wire.EVAL_MEMORY, wire.EVAL_DISK)
    record = ConfigRecord(dict(zip(keys, evaluations, strict=True)))
    record[wire.LOCAL_SAMPLES] = samples
    return Message(RecordDict({wire.PROFILE: record}), reply_to=msg)


def edge_app(
    *,
    step: float = 1.0,
    profile: tuple[float, float, float, float] = HONEST_PROFILE,
    local_samples: int = 100,
    corrupt: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None,
    num_examples: Callable[[int], int] | None = None,
) -> Callable[[Message, Context], Message]:
    """Return a numpy ClientApp that answers every train message with a finished update.

    Parameters
    ----------
    step : float (default: 1.0)
        The update is the received global model plus ``step`` (every element).
    profile : tuple of 4 floats (default: HONEST_PROFILE)
        Evaluations reported to the profile query.
    local_samples : int (default: 100)
        ``local-samples`` reported to the profile query.
    corrupt : callable, optional
        Applied to the update's arrays before sending (hostile clients).
    num_examples : callable, optional
        ``share -> num-examples`` reported (default: the share, or 10 without one).
    """

    def app(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type == wire.PROFILE_MESSAGE_TYPE or (
            wire.PROFILE_MODE in msg.content.config_records.get(wire.CONFIG, {})
        ):
            return _profile_reply(msg, profile, local_samples)
        cfg = train_config(msg)
        record = msg.content[wire.ARRAYS]
        assert isinstance(record, ArrayRecord), "every job starts with the global model"
        arrays = {k: record[k].numpy() + np.float32(step) for k in record}
        if corrupt is not None:
            arrays = corrupt(arrays)
        share = int(cfg.get(wire.SAMPLE_SHARE, 0))
        examples = num_examples(share) if num_examples else (share or 10)
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: examples,
                wire.DONE: 1,
                wire.JOB_ID: int(cfg[wire.JOB_ID]),
                wire.BASE_VERSION: int(cfg[wire.GLOBAL_VERSION]),
                wire.SAMPLES_PROCESSED: share,
            }
        )
        out = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
        return Message(RecordDict({wire.ARRAYS: out, wire.METRICS: metrics}), reply_to=msg)

    return app


def error_app(
    code: int = ErrorCode.MESSAGE_UNAVAILABLE, reason: str = "message expired"
) -> Callable[[Message, Context], Message]:
    """Return an app whose every reply is an error (as the SuperLink sends for an expired TTL)."""

    def app(msg: Message, context: Context) -> Message:
        return Message(Error(code, reason), reply_to=msg)

    return app


class ServerKilled(BaseException):  # noqa: N818  (it stands for SIGKILL, not an error)
    """Raised by :class:`ScriptedClock` to stop the server loop dead, like SIGKILL."""


class ScriptedClock(ManualClock):
    """A :class:`ManualClock` that runs ``actions`` when its reading passes their times.

    ``actions`` maps a time to a callable; each runs once, in time order, inside the
    ``sleep`` that moves the clock past its time (between two polls of the loop).
    """

    def __init__(self, actions: dict[float, Callable[[], None]] | None = None) -> None:
        super().__init__(0.0)
        self.actions = dict(actions or {})
        self.done: list[float] = []

    def sleep(self, seconds: float) -> None:
        """Advance the reading, then run the actions whose time has come."""
        super().sleep(seconds)
        for when in sorted(self.actions):
            if when <= self.real_now() and when not in self.done:
                self.done.append(when)
                self.actions[when]()


@dataclass
class LogCapture:
    """Records of the ``flwr`` logger captured by :func:`capture_flwr_logs`."""

    records: list[logging.LogRecord] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Return every captured message, one per line."""
        return "\n".join(r.getMessage() for r in self.records)

    def messages(self, level: int = logging.DEBUG) -> list[str]:
        """Return the formatted messages at ``level`` or above."""
        return [r.getMessage() for r in self.records if r.levelno >= level]

    def matching(self, *words: str, level: int = logging.DEBUG) -> list[str]:
        """Return the messages that contain every one of ``words``."""
        return [m for m in self.messages(level) if all(w in m for w in words)]


class _ListHandler(logging.Handler):
    def __init__(self, sink: LogCapture) -> None:
        super().__init__(logging.DEBUG)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.records.append(record)


@contextmanager
def capture_flwr_logs(level: int | None = None) -> Iterator[LogCapture]:
    """Capture what the strategy logs through Flower's logger (``flwr``).

    The records go to the capture directly (pytest's caplog misses them once another test has
    turned the logger's propagation off). With ``level``, the logger is lowered to it (if it
    was higher) for the duration, so records at ``level`` and above are emitted.
    """
    sink = LogCapture()
    handler = _ListHandler(sink)
    logger = logging.getLogger("flwr")
    old = logger.level
    logger.addHandler(handler)
    if level is not None:
        logger.setLevel(min(level, old) if old else level)
    try:
        yield sink
    finally:
        logger.removeHandler(handler)
        if level is not None:
            logger.setLevel(old)
