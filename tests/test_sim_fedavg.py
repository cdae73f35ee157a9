"""VirtualFedAvg: Flower's FedAvg whose round lasts as long as its slowest client."""

import numpy as np
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict

from flower_edge import wire
from simulations.fedavg import VirtualFedAvg
from strategies.clock import VirtualClock
from strategies.inprocess import InProcessGrid

DURATIONS = {0: 1.0, 1: 5.0, 2: 2.0}  # partition id -> virtual seconds of its job


def _client(msg: Message, ctx: Context) -> Message:
    config = msg.content.config_records[wire.CONFIG]
    arrays = msg.content.array_records[wire.ARRAYS]
    rnd = int(config[wire.SERVER_ROUND])  # type: ignore[arg-type]
    seen.append((rnd, float(config[wire.SEND_TIME])))  # type: ignore[arg-type]
    partition = int(ctx.node_config[wire.PARTITION_ID])  # type: ignore[arg-type]
    metrics = MetricRecord(
        {wire.NUM_EXAMPLES: 10, wire.VIRTUAL_SECONDS: DURATIONS[partition] * rnd}
    )
    return Message(RecordDict({wire.ARRAYS: arrays, wire.METRICS: metrics}), reply_to=msg)


seen: list[tuple[int, float]] = []


def test_round_time_is_the_slowest_client() -> None:
    seen.clear()
    clock = VirtualClock()
    strategy = VirtualFedAvg(clock, fraction_evaluate=0.0, min_train_nodes=3, min_available_nodes=3)
    grid = InProcessGrid(_client, 3)
    initial = ArrayRecord([np.zeros(3, dtype=np.float32)])
    strategy.start(grid=grid, initial_arrays=initial, num_rounds=2, timeout=10)
    # round 1: max(1, 5, 2) = 5; round 2 jobs take twice as long: max(2, 10, 4) = 10
    assert strategy.round_seconds == {1: 5.0, 2: 10.0}
    assert clock.now() == 15.0
    assert strategy.round_participants == {1: 3, 2: 3}
    assert sorted(seen) == [(1, 0.0)] * 3 + [(2, 5.0)] * 3  # round 2 starts at 5 s


def test_no_warning_that_federated_evaluation_is_skipped() -> None:
    """Found by a new-user probe: every run of FedAvg printed Flower's coloured ``WARNING:
    fraction_evaluate is set to 0.0. Federated evaluation will be skipped.``, which the
    simulations choose on purpose (the server evaluates centrally)."""
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    flwr_logger.addHandler(handler)
    flwr_logger.setLevel(logging.INFO)
    try:
        VirtualFedAvg(VirtualClock(), fraction_evaluate=0.0)
        VirtualFedAvg(VirtualClock(), fraction_train=0.0)  # other warnings stay
    finally:
        flwr_logger.removeHandler(handler)
        flwr_logger.setLevel(level)
    warnings = [r.getMessage() for r in records if r.levelno >= logging.WARNING]
    assert warnings == ["fraction_train is set to 0.0. Federated training will be skipped."]
    infos = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert "fraction_evaluate=0.0: no federated evaluation, the server evaluates" in infos
