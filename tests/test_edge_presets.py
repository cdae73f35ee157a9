"""EdgeStrategy.preset: the project's best configuration and the seeds' rule, in the library."""

from __future__ import annotations

import pytest

from flower_edge.errors import ConfigError
from simulations.presets import SEED_OPTIONS
from simulations.scenarios import SCENARIOS
from strategies import EdgeStrategy
from strategies.config import ShareConfig
from strategies.edge import PRESETS


def test_edge_preset_is_the_projects_best_rule() -> None:
    s = EdgeStrategy.preset("edge", threshold=3)
    assert (s.aggregate, s.server_lr, s.staleness_lr) == ("deltas", 1.0, True)
    assert s.shares.max_epochs == 2.5
    assert s.shares.max_share_fraction == ShareConfig().max_share_fraction
    assert s.stop.patience is not None  # the convergence stop stays on


def test_seed_preset_is_the_seeds_rule() -> None:
    s = EdgeStrategy.preset("edge-seed", threshold=3)
    assert (s.aggregate, s.server_lr, s.staleness_lr) == ("models", 1.0, False)
    assert s.shares.max_epochs is None
    assert s.shares.max_share_fraction == 1.0  # uncapped f_d = F m_d / sum m
    assert not s.shares.drop_empty_axes  # four radar axes


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
    }
    assert scenario_edge == dict(PRESETS["edge"])
    assert sc.edge_max_epochs == 2.5
