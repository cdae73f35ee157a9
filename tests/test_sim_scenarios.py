from dataclasses import replace

import pytest

from flower_edge.errors import InputError
from simulations.devices import make_population
from simulations.scenarios import SCENARIOS, resolve_scenario, resolve_strategies


def test_default_scenarios_are_valid_and_heterogeneous() -> None:
    for name, scenario in SCENARIOS.items():
        assert scenario.name == name
        specs = make_population(scenario.population(seed=0))
        cpu = [s.cpu_flops for s in specs]
        assert len(specs) == scenario.num_clients
        assert max(cpu) / min(cpu) >= 20


def test_mnist1d_100_is_non_iid_and_strongly_heterogeneous() -> None:
    s = resolve_scenario("mnist1d-100")
    assert (s.num_clients, s.partition, s.dirichlet_alpha) == (100, "dirichlet", 0.5)
    assert s.heterogeneity >= 100


def test_unknown_scenario_lists_valid_names() -> None:
    with pytest.raises(InputError, match="unknown scenario 'nope'; valid scenarios: digits-20"):
        resolve_scenario("nope")


def test_unknown_strategy_lists_valid_names() -> None:
    with pytest.raises(
        InputError, match="valid strategies: edge, edge-seed, fedavg, fedbuff, fedasync, all"
    ):
        resolve_strategies("fedprox")
    assert resolve_strategies("all") == ("edge", "edge-seed", "fedavg", "fedbuff", "fedasync")
    assert resolve_strategies("fedbuff") == ("fedbuff",)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"clients": 1000}, r"clients must be <= 179 for scenario 'digits-20'"),
        ({"clients": 1}, "clients must be an integer >= 2"),
        ({"threshold": 20}, r"threshold K must be >= 1 and < clients \(20\), got 20"),
        ({"threshold": 0}, "threshold K must be >= 1"),
        ({"heterogeneity": 0.5}, r"heterogeneity must be in \[1, 1000000\], got 0.5"),
    ],
)
def test_bad_overrides(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InputError, match=match):
        resolve_scenario("digits-20", **kwargs)  # type: ignore[arg-type]


def test_overrides_apply() -> None:
    s = resolve_scenario("digits-20", clients=8, heterogeneity=50.0)
    assert (s.num_clients, s.heterogeneity) == (8, 50.0)
    assert s.threshold == 2  # K keeps its share of the federation: round(4 * 8 / 20)
    small = resolve_scenario("digits-20", clients=4)
    assert small.threshold == 1
    assert resolve_scenario("digits-20", clients=8, threshold=5).threshold == 5  # given
    assert resolve_scenario("digits-20", clients=40).threshold == 4  # more: the scenario's
    assert resolve_scenario("mnist1d-100", clients=6).threshold == 1
    assert resolve_scenario("mnist1d-100", clients=50).threshold == 5


def test_rounds_follow_the_update_budget() -> None:
    s = resolve_scenario("digits-20")
    assert s.rounds_for("fedavg") * s.num_clients >= s.update_budget
    assert s.rounds_for("fedasync") == s.update_budget
    assert s.rounds_for("edge") * (s.edge_k + 1) >= s.update_budget
    assert s.rounds_for("fedbuff") * s.threshold >= s.update_budget


def test_the_edge_presets_may_take_their_own_k() -> None:
    """digits-20 (IID): edge aggregates more than 1 update, edge-seed more than 4, FedBuff 4
    (issue 10, twenty-sixth session); the label-skewed scenarios keep one K for all."""
    d = resolve_scenario("digits-20")
    assert (d.threshold, d.edge_threshold, d.edge_k) == (4, 1, 1)
    assert [d.k_for(n) for n in ("edge", "edge-seed", "fedbuff", "fedavg", "fedasync")] == [
        1,
        4,
        4,
        None,
        None,
    ]
    assert [d.updates_per_round(n) for n in ("edge", "edge-seed", "fedbuff")] == [2, 5, 4]
    assert (d.rounds_for("edge"), d.rounds_for("fedbuff")) == (100, 50)
    m = resolve_scenario("mnist1d-100")
    assert (m.edge_threshold, m.k_for("edge"), m.k_for("fedbuff")) == (None, 10, 10)
    # --threshold sets every strategy's K; --clients alone scales both
    assert resolve_scenario("digits-20", threshold=3).k_for("edge") == 3
    small = resolve_scenario("digits-20", clients=8)
    assert (small.k_for("edge"), small.k_for("fedbuff")) == (1, 2)
    big = resolve_scenario("digits-20", clients=100)
    assert (big.k_for("edge"), big.k_for("fedbuff")) == (1, 4)  # more: the scenario's


@pytest.mark.parametrize("bad", [0, 20, 2.0, True, -1])
def test_a_bad_edge_threshold_is_named(bad: object) -> None:
    with pytest.raises(InputError, match=r"edge_threshold K must be an integer >= 1 and < clients"):
        replace(SCENARIOS["digits-20"], edge_threshold=bad)


def test_the_built_strategies_run_with_their_own_k() -> None:
    from simulations.server import build_strategy
    from simulations.settings import SimSettings
    from strategies.clock import VirtualClock

    ks = {
        n: build_strategy(SimSettings.create("digits-20", n), VirtualClock()).threshold
        for n in ("edge", "edge-seed", "fedbuff")
    }
    assert ks == {"edge": 1, "edge-seed": 4, "fedbuff": 4}


def test_fewer_clients_scale_the_learning_rate_and_the_slices() -> None:
    base = SCENARIOS["digits-20"]
    two = resolve_scenario("digits-20", clients=2)
    assert two.learning_rate == pytest.approx(base.learning_rate * 2 / 20)
    assert two.slice_budget == pytest.approx(base.slice_budget * 20 / 2)
    more = resolve_scenario("digits-20", clients=40)  # smaller partitions: the designed rate
    assert (more.learning_rate, more.slice_budget) == (base.learning_rate, base.slice_budget)
    assert resolve_scenario("digits-20", clients=20) == base


def test_two_clients_train_digits_as_twenty_do() -> None:
    """Flower's default federation (2 SuperNodes): a 10x larger partition per job no longer
    makes momentum SGD at the designed learning rate drift away (FedAvg ended at 0.28)."""
    from simulations.report import summary_table
    from simulations.runner import run_experiment
    from simulations.settings import SimSettings

    r = run_experiment(
        SimSettings.create("digits-20", "fedavg", clients=2, rounds=6), engine="inprocess"
    )
    assert r.final_accuracy >= 0.9
    assert min(h.accuracy for h in r.history[3:]) >= 0.85  # no collapse along the way
    assert "resized from 20 to 2 clients: local learning rate 0.01 (was 0.1)" in summary_table([r])


def test_every_scenario_description_names_its_spread_and_flaky_share() -> None:
    """``simulate --list`` named the flaky devices of mnist1d-200-skew only (new-user probe)."""
    from simulations.scenarios import SCENARIOS

    for sc in SCENARIOS.values():
        assert f"{sc.heterogeneity:g}x compute spread" in sc.description, sc.name
        assert f"{sc.flaky_fraction:.0%} flaky" in sc.description, sc.name
