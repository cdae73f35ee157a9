"""The example ClientApps (MLP and CNN on digits, 1-D CNN on MNIST-1D) train and evaluate."""

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from clients import examples
from clients.testing import instruction, node_context
from flower_edge import wire
from flower_edge.errors import ConfigError


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWER_EDGE_CACHE", str(tmp_path_factory.getbasetemp() / "fe-cache"))


@pytest.mark.parametrize(
    ("app_name", "task_fn"),
    [
        ("mlp_app", examples.digits_mlp_task),
        ("cnn_app", examples.digits_cnn_task),
        ("mnist1d_app", examples.mnist1d_task),
    ],
)
def test_example_apps_train_and_evaluate(app_name: str, task_fn: object) -> None:
    torch.set_num_threads(1)
    app = getattr(examples, app_name)
    torch.manual_seed(0)
    arrays = ArrayRecord(task_fn().model_fn().state_dict())  # type: ignore[operator]
    ctx = node_context(5, partition_id=1, num_partitions=4)
    cfg = ConfigRecord({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 64})
    reply = app(instruction(RecordDict({wire.CONFIG: cfg, wire.ARRAYS: arrays}), "train", 5), ctx)
    assert not reply.has_error(), reply.error
    metrics = reply.content[wire.METRICS]
    assert (metrics[wire.DONE], metrics[wire.SAMPLES_PROCESSED]) == (1, 64)
    trained = reply.content[wire.ARRAYS]
    assert list(trained) == list(arrays)
    evaluated = app(instruction(RecordDict({wire.ARRAYS: trained}), "evaluate", 5), ctx)
    assert evaluated.content[wire.METRICS][wire.NUM_EXAMPLES] > 0


def test_bundled_loader_needs_the_partition_in_the_node_config() -> None:
    load = examples.bundled_loader("digits")
    ctx = node_context(6)  # a node the shared example app has not cached data for
    ctx.node_config = {}
    with pytest.raises(ConfigError, match="node config 'partition-id' must be an int"):
        load(ctx)
    arrays = ArrayRecord(examples.digits_mlp_task().model_fn().state_dict())
    reply = examples.client_app(instruction(RecordDict({wire.ARRAYS: arrays}), "evaluate", 6), ctx)
    assert "node config 'partition-id' must be an int" in str(reply.error.reason)
