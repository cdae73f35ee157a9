"""EdgeStrategy.preset: the project's best configuration and the seeds' rule, in the library."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from flower_edge.errors import ConfigError
from simulations.presets import SEED_OPTIONS
from simulations.scenarios import SCENARIOS
from strategies import EdgeStrategy, InProcessGrid, ServerOptConfig
from strategies.config import ShareConfig
from strategies.edge import PRESETS


def test_edge_preset_is_the_projects_best_rule() -> None:
    s = EdgeStrategy.preset("edge", threshold=3)
    assert (s.aggregate, s.server_lr, s.staleness_lr) == ("deltas", 0.03, True)
    assert s.server_opt == ServerOptConfig("sign")
    assert s.shares.max_epochs == 2.5
    assert s.shares.max_share_fraction == ShareConfig().max_share_fraction
    assert s.stop.patience is not None  # the convergence stop stays on


def test_seed_preset_is_the_seeds_rule() -> None:
    s = EdgeStrategy.preset("edge-seed", threshold=3)
    assert (s.aggregate, s.server_lr, s.staleness_lr) == ("models", 1.0, False)
    assert s.shares.max_epochs is None
    assert s.shares.max_share_fraction == 1.0  # uncapped f_d = F m_d / sum m
    assert not s.shares.drop_empty_axes  # four radar axes


def test_each_preset_names_itself_in_the_log() -> None:
    """Found by a new-user probe: ``--strategy all`` logged the edge-seed run's warnings and
    round lines as "edge: ...", so a reader could not tell the presets apart."""
    assert EdgeStrategy.preset("edge-seed", threshold=3).name == "edge-seed"
    assert EdgeStrategy.preset("edge", threshold=3).name == "edge"
    assert EdgeStrategy(threshold=3).name == "edge"


def test_a_users_share_settings_win_over_the_preset() -> None:
    s = EdgeStrategy.preset(
        "edge", threshold=3, shares=ShareConfig(max_epochs=2.0, rebalance="off")
    )
    assert s.shares.max_epochs == 2.0
    assert s.shares.rebalance == "off"


def test_an_unknown_preset_names_the_field() -> None:
    with pytest.raises(ConfigError, match="preset must be one of edge, edge-seed, got 'fast'"):
        EdgeStrategy.preset("fast", threshold=3)  # type: ignore[arg-type]


def test_an_unknown_option_is_an_error() -> None:
    with pytest.raises(TypeError):
        EdgeStrategy.preset("edge", threshold=3, server_lrr=0.5)  # type: ignore[call-arg]


def test_the_simulations_use_the_same_presets() -> None:
    assert dict(PRESETS["edge-seed"]) == SEED_OPTIONS
    sc = SCENARIOS["mnist1d-100"]
    scenario_edge = {
        "aggregate": sc.edge_aggregate,
        "server_lr": sc.edge_server_lr,
        "staleness_lr": sc.edge_staleness_lr,
        "average_passes": sc.edge_average_passes,
        "serve_better": sc.edge_serve_better,
        "server_opt": sc.edge_server_opt,
    }
    assert scenario_edge == dict(PRESETS["edge"])
    assert sc.edge_max_epochs == 2.5


def _counter_app() -> ClientApp:
    """A plain ClientApp whose model has a 0-d int64 counter, as batch norm's
    ``num_batches_tracked`` in a torch state dict."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        pid = int(ctx.node_config["partition-id"])  # type: ignore[arg-type]
        w = arrays["w"].numpy() + 0.1 * (pid + 1)
        tracked = np.asarray(arrays["tracked"].numpy() + 4, dtype=np.int64)
        new = ArrayRecord({"w": Array(w), "tracked": Array(tracked)})
        metrics = MetricRecord({"num-examples": 10})
        return Message(RecordDict({"arrays": new, "metrics": metrics}), reply_to=msg)

    return app


@pytest.mark.parametrize("preset", ["edge", "edge-seed"])
def test_presets_aggregate_a_model_with_a_0d_integer_counter(preset: str) -> None:
    """Found by a new-user probe: the ``edge`` preset (deltas) crashed the ServerApp on any
    torch model with batch norm: ``array 1 is a int64, not a numpy array`` (the difference of
    two 0-d arrays is a numpy scalar)."""
    initial = ArrayRecord(
        {"w": Array(np.zeros(3, dtype=np.float32)), "tracked": Array(np.asarray(0, np.int64))}
    )
    strategy = EdgeStrategy.preset(preset, threshold=2)  # type: ignore[arg-type]
    result = strategy.start(InProcessGrid(_counter_app(), 4), initial, num_rounds=3)
    assert len(strategy.history) == 3
    tracked = result.arrays["tracked"].numpy()
    assert tracked.shape == ()
    assert tracked.dtype == np.int64
    assert int(tracked) >= 4
