"""The scenarios' edge-strategy defaults: delta aggregation, server lr, work per round."""

from dataclasses import replace

import pytest

from flower_edge.errors import ConfigError, InputError
from simulations.app import SimSettings, build_strategy, samples_per_round
from simulations.scenarios import SCENARIOS
from strategies.clock import VirtualClock


def test_scenarios_default_to_deltas_with_a_server_lr() -> None:
    s = SimSettings.create("digits-20", "edge", clients=6, seed=2)
    strategy = build_strategy(s, VirtualClock())
    sc = s.scenario
    assert (strategy.aggregate, strategy.server_lr) == ("deltas", sc.edge_server_lr)  # type: ignore[attr-defined]
    assert strategy.staleness_lr is sc.edge_staleness_lr is True  # type: ignore[attr-defined]
    assert strategy.shares.max_epochs == sc.edge_max_epochs == 2.5  # type: ignore[attr-defined]
    assert strategy.needs_bases
    seed_rule = replace(s, aggregate="models", server_lr=1.0)
    strategy = build_strategy(seed_rule, VirtualClock())
    assert (strategy.aggregate, strategy.server_lr) == ("models", 1.0)  # type: ignore[attr-defined]


def test_match_shares_total_local_epochs_of_all_local_samples() -> None:
    s = SimSettings.create("digits-20", "edge", clients=6, seed=2)
    total = samples_per_round(s.scenario, 2)
    # digits: 1438 samples, 80 % of each partition for local training, 2 epochs
    assert total == pytest.approx(2 * 0.8 * 1438, rel=0.01)
    assert build_strategy(s, VirtualClock()).shares.total_samples == total
    uniform = replace(s, shares="uniform")
    assert build_strategy(uniform, VirtualClock()).shares.total_samples is None


def test_bad_edge_options_are_refused() -> None:
    with pytest.raises(InputError, match="aggregate must be one of"):
        SimSettings.create("digits-20", "edge", aggregate="sum")
    with pytest.raises(InputError, match="server_lr must be > 0, got 0.0"):
        SimSettings.create("digits-20", "edge", server_lr=0.0)
    with pytest.raises(InputError, match="edge_server_lr must be > 0"):
        replace(SCENARIOS["digits-20"], edge_server_lr=-1.0)
    with pytest.raises(ConfigError, match="edge_aggregate must be"):
        replace(SCENARIOS["digits-20"], edge_aggregate="sum")  # type: ignore[arg-type]


def test_settings_use_the_strategy_and_decay_validators() -> None:
    """SimSettings applies EdgeStrategy's own rule: server_lr <= 1 when averaging models."""
    with pytest.raises(ConfigError, match=r"server_lr must be in \(0, 1\], got 1.5"):
        SimSettings.create("digits-20", "edge", aggregate="models", server_lr=1.5)
    ok = SimSettings.create("digits-20", "edge", aggregate="deltas", server_lr=1.5)
    assert ok.server_lr == 1.5
    with pytest.raises(ConfigError, match="decay must be one of exponential, polynomial"):
        SimSettings.create("digits-20", "edge", decay="linear")
