"""End to end: EdgeStrategy drives the real ClientApp on digits through the InProcessGrid."""

import torch
from conftest import Probe
from flwr.app import ArrayRecord, Context, Message, MetricRecord

from clients.app import build_client_app
from clients.data import load_centralized_test
from clients.examples import bundled_loader
from clients.task import Task, evaluate_model
from flower_edge import wire
from flower_edge.models import MLP

SPEEDS = [40.0, 80.0, 160.0, 320.0]  # samples per virtual second, by partition


class Timer:
    """A virtual device of fixed speed; transfers at 1 MB/s."""

    def __init__(self, speed: float) -> None:
        self.speed = speed

    def samples_within(self, start: float, budget: float) -> int:
        return int(budget * self.speed)

    def slice_seconds(self, start: float, samples: int, down: int, up: int) -> float:
        return samples / self.speed + (down + up) / 1e6


def _pid(ctx: Context) -> int:
    return int(ctx.node_config[wire.PARTITION_ID])  # type: ignore[arg-type]


def test_edge_strategy_trains_the_client_app_to_a_better_model() -> None:
    from strategies import EdgeStrategy, InProcessGrid, LoopConfig, ManualClock, VirtualClock

    torch.set_num_threads(1)
    task = Task(model_fn=lambda: MLP(in_features=64), load_data=bundled_loader("digits"))
    inner = build_client_app(
        task,
        timer_fn=lambda ctx: Timer(SPEEDS[_pid(ctx)]),
        probe_fn=lambda ctx: Probe(SPEEDS[_pid(ctx)]),
    )
    shares: dict[int, int] = {}  # job id -> share sent
    first_share: dict[int, int] = {}  # partition -> share of its first job
    done: list[tuple[int, int, int]] = []  # (partition, job id, samples processed)
    profiled: list[int] = []

    def app(msg: Message, ctx: Context) -> Message:
        reply = inner(msg, ctx)
        assert not reply.has_error(), reply.error
        if wire.PROFILE in reply.content.config_records:  # profile query or first message
            profiled.append(_pid(ctx))
            return reply
        cfg = msg.content[wire.CONFIG]
        if wire.SAMPLE_SHARE in cfg:
            shares[int(cfg[wire.JOB_ID])] = int(cfg[wire.SAMPLE_SHARE])
            first_share.setdefault(_pid(ctx), int(cfg[wire.SAMPLE_SHARE]))
        m = reply.content[wire.METRICS]
        if m[wire.DONE] == 1:
            done.append((_pid(ctx), int(m[wire.JOB_ID]), int(m[wire.SAMPLES_PROCESSED])))
        return reply

    test = load_centralized_test("digits")

    def accuracy(arrays: ArrayRecord) -> float:
        model = MLP(in_features=64)
        model.load_state_dict(arrays.to_torch_state_dict())
        return evaluate_model(model, torch.nn.CrossEntropyLoss(), test).accuracy

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord({"accuracy": accuracy(arrays)})

    torch.manual_seed(0)
    initial = ArrayRecord(MLP(in_features=64).state_dict())
    clock = VirtualClock(wall=ManualClock())
    grid = InProcessGrid(app, len(SPEEDS), clock=clock.wall, run_config={"seed": 1})
    strategy = EdgeStrategy(threshold=2, clock=clock, loop=LoopConfig(slice_budget=1.0))
    result = strategy.start(grid, initial, num_rounds=4, evaluate_fn=evaluate_fn)

    final = accuracy(result.arrays)
    assert final > accuracy(initial) + 0.3, final
    assert sorted(profiled) == [0, 1, 2, 3]
    # faster devices were given larger shares, and every finished job processed its share
    assert first_share[3] > first_share[0]
    assert done
    for _, job, samples in done:
        if job in shares:
            assert samples == shares[job]
    for node_id, ctx in grid.contexts.items():
        assert "flower-edge.node" in ctx.state, node_id


def test_flower_fedavg_drives_the_client_app() -> None:
    from flwr.serverapp.strategy import FedAvg

    from strategies import InProcessGrid

    torch.set_num_threads(1)
    task = Task(model_fn=lambda: MLP(in_features=64), load_data=bundled_loader("digits"))
    grid = InProcessGrid(build_client_app(task), 3, run_config={"local-epochs": 2})
    torch.manual_seed(0)
    initial = ArrayRecord(MLP(in_features=64).state_dict())
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=1.0, min_available_nodes=3)
    result = strategy.start(grid, initial, num_rounds=2)
    assert result.arrays is not None
    evaluated = result.evaluate_metrics_clientapp
    assert set(evaluated) == {1, 2}
    assert evaluated[2][wire.EVAL_ACCURACY] > 0.5
    assert result.train_metrics_clientapp[2][wire.SAMPLES_PROCESSED] > 0


def test_under_a_wall_clock_the_client_app_trains_its_first_job_and_sends_its_profile() -> None:
    from strategies import EdgeStrategy, InProcessGrid, ManualClock, ShareConfig

    torch.set_num_threads(1)
    task = Task(model_fn=lambda: MLP(in_features=64), load_data=bundled_loader("digits"))
    inner = build_client_app(task, probe_fn=lambda ctx: Probe(SPEEDS[_pid(ctx)]))
    first_replies: dict[int, Message] = {}

    def app(msg: Message, ctx: Context) -> Message:
        reply = inner(msg, ctx)
        assert not reply.has_error(), reply.error
        first_replies.setdefault(_pid(ctx), reply)
        return reply

    clock = ManualClock()
    grid = InProcessGrid(app, len(SPEEDS), clock=clock, run_config={"seed": 1})
    torch.manual_seed(0)
    initial = ArrayRecord(MLP(in_features=64).state_dict())
    strategy = EdgeStrategy(threshold=3, clock=clock, shares=ShareConfig(rebalance="off"))
    strategy.start(grid, initial, num_rounds=2, timeout=60.0)
    # each node's first reply is a trained update with the node's profile beside it
    for reply in first_replies.values():
        assert wire.ARRAYS in reply.content.array_records
        assert reply.content[wire.METRICS][wire.DONE] == 1
        assert reply.content[wire.PROFILE][wire.EVAL_CPU] > 0
    assert sorted(strategy.history[0].participants) == sorted(grid.contexts)
    later: dict[int, int] = {}
    for m in grid.pushed:
        cfg = m.content[wire.CONFIG]
        if wire.SAMPLE_SHARE in cfg:
            later[_pid(grid.contexts[m.metadata.dst_node_id])] = int(cfg[wire.SAMPLE_SHARE])
    assert later[3] > later[0]  # the plan follows the profiles (320 vs 40 samples/s)
