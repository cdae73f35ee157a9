"""Server side on Flower: the semi-asynchronous EdgeStrategy, baselines, clocks, checkpoints.

``EdgeStrategy`` (seed 001), ``FedBuff`` and ``FedAsync`` run on one event loop
(:mod:`strategies.loop`); Flower's own ``FedAvg`` is the synchronous baseline.
:class:`~strategies.inprocess.InProcessGrid` runs ClientApps in this process for fast,
deterministic tests.
"""

from strategies.baselines import FedAsync, FedBuff
from strategies.checkpoint import Checkpoint, CheckpointStore
from strategies.clock import Clock, ManualClock, VirtualClock, WallClock
from strategies.config import LoopConfig, ShareConfig, StopConfig, ValuationConfig
from strategies.edge import EdgeStrategy
from strategies.inprocess import InProcessGrid
from strategies.loop import Combined, SemiAsyncStrategy, Update
from strategies.records import (
    AggregationRecord,
    JobEvent,
    ProfileRecord,
    TrainReply,
    parse_profile_reply,
    parse_train_reply,
)

__all__ = [
    "AggregationRecord",
    "Checkpoint",
    "CheckpointStore",
    "Clock",
    "Combined",
    "EdgeStrategy",
    "FedAsync",
    "FedBuff",
    "InProcessGrid",
    "JobEvent",
    "LoopConfig",
    "ManualClock",
    "ProfileRecord",
    "SemiAsyncStrategy",
    "ShareConfig",
    "StopConfig",
    "TrainReply",
    "Update",
    "ValuationConfig",
    "VirtualClock",
    "WallClock",
    "parse_profile_reply",
    "parse_train_reply",
]
