"""Server side on Flower: the semi-asynchronous EdgeStrategy, baselines, clocks, checkpoints.

``EdgeStrategy`` (seed 001), ``FedBuff`` and ``FedAsync`` run on one event loop
(:mod:`strategies.loop`); Flower's own ``FedAvg`` is the synchronous baseline.
:class:`~strategies.inprocess.InProcessGrid` runs ClientApps in this process for fast,
deterministic tests.
"""

from flower_edge.server_opt import ServerOptConfig
from strategies.base import SemiAsyncStrategy, StrategyOptions
from strategies.baselines import FedAsync, FedBuff
from strategies.checkpoint import Checkpoint, CheckpointStore, checkpoint_options
from strategies.clock import Clock, ManualClock, VirtualClock, WallClock
from strategies.config import (
    AbandonConfig,
    LoopConfig,
    ShareConfig,
    StopConfig,
    ValuationConfig,
)
from strategies.edge import EdgeStrategy
from strategies.inprocess import InProcessGrid
from strategies.records import (
    AggregationRecord,
    Combined,
    JobEvent,
    ProfileRecord,
    TrainReply,
    Update,
    parse_profile_reply,
    parse_train_reply,
)

__all__ = [
    "AbandonConfig",
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
    "ServerOptConfig",
    "ShareConfig",
    "StopConfig",
    "StrategyOptions",
    "TrainReply",
    "Update",
    "ValuationConfig",
    "VirtualClock",
    "WallClock",
    "checkpoint_options",
    "parse_profile_reply",
    "parse_train_reply",
]
