"""Drop-in: FedAvg's record keys and metric aggregation functions carry over.

Found by a new-user probe (a Flower 1.42 ServerApp whose ``FedAvg(...)`` is replaced by
``EdgeStrategy(threshold=K, ...)``, everything else kept):

- a ClientApp that reads its records under other keys runs with ``FedAvg(arrayrecord_key=
  "weights", configrecord_key="cfg")``; EdgeStrategy refused both with a TypeError, so that
  app could not swap at all;
- ``train_metrics_aggr_fn`` / ``evaluate_metrics_aggr_fn`` (a custom aggregation of the
  replies' MetricRecords, e.g. a count of replies or a median) were refused the same way.

They are honoured now as FedAvg honours them. A torch model with batch norm (float running
statistics and an int64 ``num_batches_tracked``) runs through the same app under Flower's
FedAvg and EdgeStrategy with FedAvg's keywords, and the Results have the same shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np
import pytest
import torch
from conftest import Probe, flwr_logs
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords
from torch import nn

from flower_edge.errors import ConfigError
from strategies import EdgeStrategy, FedBuff, InProcessGrid, StopConfig


class Net(nn.Module):
    """A small model with batch norm: float buffers and an int64 ``num_batches_tracked``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.bn(self.fc1(x))))
        return out


def _data(seed: int, n: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
    return x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()


def quickstart_app(arrays_key: str = "arrays", config_key: str = "config") -> ClientApp:
    """A quickstart-pytorch-shaped ClientApp (no flower-edge import) with its own keys."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model = Net()
        model.load_state_dict(msg.content[arrays_key].to_torch_state_dict())  # type: ignore[union-attr]
        lr = float(msg.content[config_key]["lr"])  # type: ignore[arg-type,index]
        x, y = _data(int(context.node_config["partition-id"]))  # type: ignore[arg-type]
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        model.train()
        for _ in range(2):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
        metrics = MetricRecord({"train_loss": loss.item(), "num-examples": len(x)})
        content = RecordDict({arrays_key: ArrayRecord(model.state_dict()), "metrics": metrics})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        model = Net()
        model.load_state_dict(msg.content[arrays_key].to_torch_state_dict())  # type: ignore[union-attr]
        model.eval()
        x, y = _data(100 + int(context.node_config["partition-id"]))  # type: ignore[arg-type]
        with torch.no_grad():
            out = model(x)
        metrics = {
            "eval_loss": float(nn.functional.cross_entropy(out, y)),
            "eval_acc": float((out.argmax(1) == y).float().mean()),
            "num-examples": len(x),
        }
        return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)

    return app


def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    """The ServerApp's ``evaluate_fn``, as the quickstart writes it."""
    model = Net()
    model.load_state_dict(arrays.to_torch_state_dict())
    model.eval()
    x, y = _data(999, 120)
    with torch.no_grad():
        out = model(x)
    accuracy = float((out.argmax(1) == y).float().mean())
    return MetricRecord({"accuracy": accuracy, "loss": float(nn.functional.cross_entropy(out, y))})


def _counted(calls: list[list[RecordDict]]) -> Callable[[list[RecordDict], str], MetricRecord]:
    """FedAvg's default aggregation plus the number of replies; records every call."""

    def aggregate(records: list[RecordDict], key: str) -> MetricRecord:
        calls.append(records)
        out = aggregate_metricrecords(records, key)
        out["replies"] = len(records)
        return out

    return aggregate


FEDAVG_KEYWORDS: dict[str, object] = {
    "fraction_train": 1.0,
    "fraction_evaluate": 1.0,
    "min_train_nodes": 2,
    "min_evaluate_nodes": 2,
    "min_available_nodes": 2,
    "weighted_by_key": "num-examples",
    "arrayrecord_key": "weights",
    "configrecord_key": "cfg",
}


def _run(strategy: object, app: ClientApp) -> tuple[Result, InProcessGrid]:
    torch.manual_seed(0)
    grid = InProcessGrid(app, 4)
    result = strategy.start(  # type: ignore[attr-defined]
        grid=grid,
        initial_arrays=ArrayRecord(Net().state_dict()),
        num_rounds=2,
        timeout=60,
        train_config=ConfigRecord({"lr": 0.1, "layers": [16, 3], "tag": "probe"}),
        evaluate_config=ConfigRecord({"batch": 8}),
        evaluate_fn=central_evaluate,
    )
    return result, grid


def _own_clientapp() -> tuple[ClientApp, ArrayRecord]:
    """flower-edge's own ClientApp on a small MLP, 48 samples per node (rated by a probe),
    and the initial model (seed 0)."""
    from torch.utils.data import TensorDataset

    from clients.app import build_client_app
    from clients.task import Task
    from flower_edge.models import MLP

    x, y = _data(1, 60)
    task = Task(
        model_fn=lambda: MLP(in_features=8, hidden=16, num_classes=3),
        load_data=lambda ctx: (TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])),
        batch_size=16,
    )
    torch.manual_seed(0)
    initial = ArrayRecord(MLP(in_features=8, hidden=16, num_classes=3).state_dict())
    return build_client_app(task, probe_fn=lambda ctx: Probe(50.0)), initial


def test_a_quickstart_app_with_its_own_record_keys_runs_as_under_fedavg() -> None:
    app = quickstart_app("weights", "cfg")
    reference, _ = _run(FedAvg(**FEDAVG_KEYWORDS), app)  # type: ignore[arg-type]
    with flwr_logs() as logs:
        strategy = EdgeStrategy(threshold=2, stop=StopConfig(), **FEDAVG_KEYWORDS)  # type: ignore[arg-type]
        result, grid = _run(strategy, app)
    text = "\n".join(r.getMessage() for r in logs.records)
    assert not [r for r in logs.records if r.levelno >= logging.ERROR]
    assert "rejected" not in text
    assert "Traceback" not in text
    assert "ArrayRecord key 'weights', ConfigRecord key 'cfg'" in text  # summary()
    # the start lines of Flower's Strategy.start: the configs the user passed
    assert "ConfigRecord (train): {'lr': 0.1, 'layers': [16, 3], 'tag': 'probe'}" in text
    assert "ConfigRecord (evaluate): {'batch': 8}" in text
    for msg in grid.pushed:  # every message carries the app's keys, none of the defaults
        assert set(msg.content.keys()) <= {"weights", "cfg"}
        assert "cfg" in msg.content
    # the Result has FedAvg's shape: the same rounds and keys, the app's train metric
    assert sorted(result.evaluate_metrics_serverapp) == sorted(reference.evaluate_metrics_serverapp)
    for rnd, metrics in reference.evaluate_metrics_clientapp.items():
        assert sorted(result.evaluate_metrics_clientapp[rnd]) == sorted(metrics)
    for rnd in reference.train_metrics_clientapp:
        assert "train_loss" in result.train_metrics_clientapp[rnd]
    assert list(result.arrays.keys()) == list(reference.arrays.keys())
    model = Net()
    model.load_state_dict(result.arrays.to_torch_state_dict())  # loads, num_batches_tracked too
    assert result.arrays["bn.num_batches_tracked"].numpy().dtype == np.int64
    assert "Aggregated ClientApp-side Evaluate Metrics" in str(result)


def test_the_metric_aggregation_functions_are_used_as_fedavg_uses_them() -> None:
    train_calls: list[list[RecordDict]] = []
    eval_calls: list[list[RecordDict]] = []
    strategy = EdgeStrategy(
        threshold=2,
        stop=StopConfig(),
        fraction_evaluate=1.0,
        train_metrics_aggr_fn=_counted(train_calls),
        evaluate_metrics_aggr_fn=_counted(eval_calls),
    )
    result, _ = _run(strategy, quickstart_app())
    assert len(train_calls) == 2  # once per aggregation, over its K + 1 updates
    for rnd, records in enumerate(train_calls, start=1):
        assert len(records) == 3
        for record in records:  # the app's metrics and the example count, as FedAvg gives them
            assert set(record["metrics"].keys()) == {"train_loss", "num-examples"}  # type: ignore[union-attr]
        metrics = result.train_metrics_clientapp[rnd]
        assert metrics["replies"] == 3
        assert metrics["train_loss"] == pytest.approx(
            float(aggregate_metricrecords(records, "num-examples")["train_loss"])  # type: ignore[arg-type]
        )
        assert metrics["participants"] == 3  # the strategy's own keys stay
    assert eval_calls
    for rnd, metrics in result.evaluate_metrics_clientapp.items():
        assert metrics["replies"] >= 1
        assert set(metrics) == {"eval_loss", "eval_acc", "replies"}, rnd


def test_the_synchronous_api_honours_the_keys_and_functions() -> None:
    calls: list[list[RecordDict]] = []
    strategy = FedBuff(
        threshold=2,
        arrayrecord_key="weights",
        configrecord_key="cfg",
        train_metrics_aggr_fn=_counted(calls),
        evaluate_metrics_aggr_fn=_counted(calls),
        fraction_evaluate=1.0,
    )
    grid = InProcessGrid(quickstart_app("weights", "cfg"), 3)
    arrays = ArrayRecord(Net().state_dict())
    train = list(strategy.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), grid))
    assert all(set(m.content.keys()) == {"weights", "cfg"} for m in train)
    replies = grid.send_and_receive(train)
    new, metrics = strategy.aggregate_train(1, replies)
    assert new is not None
    assert metrics is not None
    assert metrics["replies"] == 3
    evaluate = list(strategy.configure_evaluate(1, new, ConfigRecord(), grid))
    assert all(set(m.content.keys()) == {"weights", "cfg"} for m in evaluate)
    out = strategy.aggregate_evaluate(1, grid.send_and_receive(evaluate))
    assert out is not None
    assert out["replies"] == 3
    # without the functions, FedAvg's averages: the app's train_loss (it had only participants)
    plain = FedBuff(threshold=2)
    grid = InProcessGrid(quickstart_app(), 3)
    sent = list(plain.configure_train(1, arrays, ConfigRecord({"lr": 0.1}), grid))
    replies = list(grid.send_and_receive(sent))
    _, metrics = plain.aggregate_train(1, replies)
    reference = aggregate_metricrecords([m.content for m in replies], "num-examples")
    assert metrics is not None
    assert metrics["train_loss"] == pytest.approx(reference["train_loss"])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"arrayrecord_key": "m", "configrecord_key": "m"}, "arrayrecord_key and configrecord_key"),
        ({"arrayrecord_key": ""}, "arrayrecord_key must be a non-empty string"),
        ({"configrecord_key": 3}, "configrecord_key must be a non-empty string"),
        ({"train_metrics_aggr_fn": "mean"}, "train_metrics_aggr_fn must be callable"),
        ({"evaluate_metrics_aggr_fn": 1}, "evaluate_metrics_aggr_fn must be callable"),
    ],
)
def test_bad_fedavg_options_name_the_keyword(options: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        EdgeStrategy(threshold=2, **options)  # type: ignore[arg-type]


def test_an_aggregation_function_that_returns_no_metricrecord_is_named() -> None:
    strategy = EdgeStrategy(
        threshold=2,
        stop=StopConfig(),
        train_metrics_aggr_fn=lambda records, key: {"n": len(records)},  # type: ignore[arg-type,return-value]
    )
    with pytest.raises(
        ConfigError, match="train_metrics_aggr_fn must return a flwr.app.MetricRecord"
    ):
        _run(strategy, quickstart_app())


def test_other_strategies_arguments_are_refused_saying_where_they_go() -> None:
    with pytest.raises(TypeError, match=r"'proximal_mu' \(FedProx sends it .* 'proximal-mu'"):
        EdgeStrategy(threshold=2, proximal_mu=0.1)  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"'eta' \(FedOpt's server learning rate: the server step is"
    ):
        EdgeStrategy(threshold=2, eta=0.1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"FedBuff got an unexpected keyword argument 'colour'\."):
        FedBuff(threshold=2, colour="red")  # type: ignore[call-arg]


def test_timeout_none_waits_as_long_as_flowers_default_message_ttl() -> None:
    """``FedAvg.start(timeout=None)`` hands ``None`` to ``Grid.send_and_receive``: no limit.
    EdgeStrategy refused it (``timeout (seconds) must be a finite number > 0, got None``)."""
    from conftest import make_dropin_app, model
    from flwr.app.constants import DEFAULT_TTL

    grid = InProcessGrid(make_dropin_app(), 4)
    result = EdgeStrategy(threshold=2).start(grid, model(0.0), num_rounds=1, timeout=None)
    assert 1 in result.train_metrics_clientapp
    assert {m.metadata.ttl for m in grid.pushed} == {float(DEFAULT_TTL)}


class _Subclassed(EdgeStrategy):
    """A FedAvg subclass rebased on EdgeStrategy: it overrides Flower's Strategy hooks."""

    def __init__(self) -> None:
        super().__init__(threshold=2, stop=StopConfig(), fraction_evaluate=1.0)
        self.evaluated: list[int] = []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        metrics = super().aggregate_evaluate(server_round, replies)
        self.evaluated.append(server_round)
        if metrics is not None:
            metrics["seen-by-subclass"] = 1
        return metrics

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        config["lr"] = 0.1 * 0.9**server_round
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return super().aggregate_train(server_round, replies)


def test_a_subclass_aggregate_evaluate_is_called_and_the_uncalled_hooks_are_named() -> None:
    """Found by a new-user probe: a ``CustomFedAvg(FedAvg)`` that saves or logs in
    ``aggregate_evaluate`` and schedules its lr in ``configure_train``, rebased on
    EdgeStrategy, ran with none of its overrides called and nothing logged."""
    strategy = _Subclassed()
    with flwr_logs() as logs:
        result, _ = _run(strategy, quickstart_app())
    # the final round may come twice: again with the nodes asked once training has stopped
    rounds = sorted(result.evaluate_metrics_clientapp)
    assert rounds
    assert strategy.evaluated in (rounds, [*rounds, rounds[-1]])
    for metrics in result.evaluate_metrics_clientapp.values():
        assert metrics["seen-by-subclass"] == 1
        assert "eval_acc" in metrics
    warned = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]
    for hook in ("configure_train", "aggregate_train"):
        assert any(
            f"_Subclassed overrides {hook}, which start() does not call" in w for w in warned
        )
    assert not any("overrides aggregate_evaluate" in w for w in warned)
    assert not any("overrides" in w for w in _warnings_of(EdgeStrategy(threshold=2)))


class _OwnLoop(EdgeStrategy):
    """Flower's ``examples/advanced-pytorch`` ``CustomFedAvg`` rebased on EdgeStrategy: its
    ``start()`` runs FedAvg's round loop through the synchronous hooks (W&B and the best
    model saved there, in the example). ``wrap=True``: the port that calls ``super().start``."""

    def __init__(self, wrap: bool = False) -> None:
        super().__init__(threshold=2, stop=StopConfig(), fraction_train=0.25)
        self.wrap = wrap

    def start(  # type: ignore[override]
        self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3, **kw: object
    ) -> Result:
        if self.wrap:
            return super().start(grid, initial_arrays, num_rounds, **kw)  # type: ignore[arg-type]
        result, arrays = Result(), initial_arrays
        for rnd in range(1, num_rounds + 1):
            sent = self.configure_train(rnd, arrays, ConfigRecord({"lr": 0.1}), grid)
            new, metrics = self.aggregate_train(rnd, grid.send_and_receive(sent))
            if new is not None and metrics is not None:
                result.arrays = arrays = new
                result.train_metrics_clientapp[rnd] = metrics
        return result


def test_a_subclass_with_its_own_round_loop_is_told_edgestrategy_does_not_run() -> None:
    """Found by a new-user probe of Flower's ``examples/advanced-pytorch``: its
    ``CustomFedAvg(FedAvg)`` overrides ``start()`` with FedAvg's round loop. Rebased on
    EdgeStrategy (``class CustomFedAvg(EdgeStrategy)`` and ``threshold=2``), it ran clean,
    its settings block announcing K = 2, values and abandoning, but every round trained all
    nodes and waited for all of them: FedAvg, with no word that EdgeStrategy never ran."""
    strategy = _OwnLoop()
    grid = InProcessGrid(quickstart_app(), 4)
    with flwr_logs() as logs:
        result = strategy.start(grid, ArrayRecord(Net().state_dict()), num_rounds=2)
    assert sorted(result.train_metrics_clientapp) == [1, 2]
    warned = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]
    told = [w for w in warned if "semi-asynchronous loop does not run" in w]
    assert len(told) == 1, warned  # once, not every round
    assert "_OwnLoop.start() overrides EdgeStrategy.start() with a round loop" in told[0]
    assert "call super().start(...)" in told[0]
    # driven by hand (no start() override): said the same way, naming configure_train
    plain = FedBuff(threshold=2)
    with flwr_logs() as logs:
        list(plain.configure_train(1, ArrayRecord(Net().state_dict()), ConfigRecord(), grid))
    text = [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]
    assert any("FedBuff is driven round by round through configure_train" in w for w in text)
    assert any("call its own start()" in w for w in text)
    assert any("FedBuff's semi-asynchronous loop does not run" in w for w in text)
    # the port that calls super().start() runs the event loop, and is not told
    with flwr_logs() as logs:
        _run(_OwnLoop(wrap=True), quickstart_app())
    assert not any("loop does not run" in r.getMessage() for r in logs.records)


def _warnings_of(strategy: EdgeStrategy) -> list[str]:
    with flwr_logs() as logs:
        _run(strategy, quickstart_app())
    return [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]


def test_flower_edges_own_clientapp_reads_its_config_under_another_key() -> None:
    """With ``configrecord_key="cfg"`` flower-edge's own ClientApp found no ``config`` record
    and trained as a plain app: no profile (each node got an equal share, with a WARNING),
    no job id, no values or abandon decisions."""
    app, initial = _own_clientapp()
    strategy = EdgeStrategy(
        threshold=2, stop=StopConfig(), arrayrecord_key="weights", configrecord_key="cfg"
    )
    with flwr_logs() as logs:
        result = strategy.start(InProcessGrid(app, 3), initial, num_rounds=1, timeout=60)
    text = "\n".join(r.getMessage() for r in logs.records)
    assert 1 in result.train_metrics_clientapp
    assert "equal share" not in text  # each node answered its profile request
    assert "no flower-edge profile" not in text
    assert not [r for r in logs.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(("arrays_key", "config_key"), [("config", "cfg"), ("cfg", "arrays")])
def test_flower_edges_own_clientapp_runs_with_the_record_keys_crossed(
    arrays_key: str, config_key: str
) -> None:
    """Found by a probe: with ``arrayrecord_key="config"`` flower-edge's own ClientApp took the
    ArrayRecord under ``config`` for its ConfigRecord and refused every message ("record
    'config' must be a ConfigRecord"; ``configrecord_key="arrays"`` the same for its
    ArrayRecord): the run stalled after four rounds of rejected replies. Records are now
    looked up by type."""
    app, initial = _own_clientapp()
    strategy = EdgeStrategy(
        threshold=2,
        stop=StopConfig(),
        arrayrecord_key=arrays_key,
        configrecord_key=config_key,
        fraction_evaluate=1.0,
    )
    with flwr_logs() as logs:
        result = strategy.start(InProcessGrid(app, 3), initial, num_rounds=1, timeout=60)
    assert not [r.getMessage() for r in logs.records if r.levelno >= logging.WARNING]
    assert 1 in result.train_metrics_clientapp
    assert "eval-accuracy" in result.evaluate_metrics_clientapp[1]
