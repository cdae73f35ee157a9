"""``flwr run .`` sizes the simulation from its federation (simulations.federation)."""

from __future__ import annotations

import pytest

from flower_edge.errors import ConfigError
from simulations.federation import client_settings, federation_size, sized_settings
from simulations.settings import SimSettings

BASE = {"scenario": "digits-20", "strategy": "edge"}


def test_the_scenarios_own_count_keeps_the_scenario() -> None:
    assert sized_settings(BASE, 20) == SimSettings.from_run_config(BASE)


@pytest.mark.parametrize("nodes", [2, 6, 8])
def test_clients_follow_the_federation(nodes: int) -> None:
    s = sized_settings(BASE, nodes)
    assert s.scenario.num_clients == nodes
    assert 1 <= s.scenario.threshold < nodes
    # the same settings as asking for that many clients by hand
    assert s == SimSettings.from_run_config({**BASE, "clients": nodes})


def test_clients_set_and_federation_differ_names_both_settings() -> None:
    with pytest.raises(ConfigError, match=r"'clients' = 20 but the federation has 6 SuperNodes"):
        sized_settings({**BASE, "clients": 20}, 6)
    with pytest.raises(ConfigError, match=r"num-supernodes=N"):
        sized_settings({**BASE, "clients": 20}, 6)
    assert sized_settings({**BASE, "clients": 6}, 6).scenario.num_clients == 6


def test_a_federation_too_small_for_the_scenario_fails_naming_num_supernodes() -> None:
    with pytest.raises(ConfigError, match=r"cannot run on 1 SuperNodes .*num-supernodes=N"):
        sized_settings(BASE, 1)
    with pytest.raises(ConfigError, match=r"num-supernodes must be an integer >= 1, got 0"):
        sized_settings(BASE, 0)


def test_client_side_reads_num_partitions() -> None:
    assert client_settings(BASE, {"num-partitions": 6}) == sized_settings(BASE, 6)
    assert client_settings(BASE, {}) == SimSettings.from_run_config(BASE)


def test_federation_size_waits_until_the_count_settles() -> None:
    calls = iter([[], [1], [1, 2], [1, 2, 3]])
    last = [1, 2, 3]

    def node_ids() -> list[int]:
        return next(calls, last)

    assert federation_size(node_ids, timeout=10.0, settle=0.2) == 3


def test_federation_size_without_nodes_fails_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"no SuperNode connected within 0 s.*num-supernodes"):
        federation_size(list, timeout=0.3, settle=0.1)
