"""The two edge presets: edge-seed is the seeds exactly, edge names its departures."""

from __future__ import annotations

import inspect
from dataclasses import replace

import pytest

from flower_edge.errors import InputError
from flower_edge.server_opt import PRESET_STEP_SEARCH
from simulations.presets import (
    NOT_METHOD_OPTIONS,
    SEED_OPTIONS,
    departures,
    describe,
    edge_options,
    strategy_defaults,
)
from simulations.scenarios import SCENARIOS, SMALL_BUFFER_STEP_SEARCH, resolve_strategies
from simulations.settings import MAX_SHARE_OVER_MEAN, SimSettings


def test_every_method_option_of_edge_strategy_has_a_seed_value() -> None:
    """An EdgeStrategy option that changes the method must say what the seed's value is."""
    from strategies.edge import EdgeStrategy

    params = inspect.signature(EdgeStrategy.__init__).parameters.values()
    keywords = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    missing = keywords - set(SEED_OPTIONS) - NOT_METHOD_OPTIONS
    assert not missing, f"add the seed's value of {sorted(missing)} to SEED_OPTIONS"
    assert set(SEED_OPTIONS) <= keywords


def test_seed_options_are_the_seed_rule_of_the_strategy() -> None:
    """With SEED_OPTIONS, the strategy averages models: sum w_i x_i / sum w_i."""
    from strategies.edge import EdgeStrategy

    strategy = EdgeStrategy(threshold=2, **SEED_OPTIONS)
    assert (strategy.aggregate, strategy.server_lr) == ("models", 1.0)


def test_all_runs_edge_first_then_edge_seed() -> None:
    assert resolve_strategies("all")[:2] == ("edge", "edge-seed")
    seed = SimSettings.create("digits-20", "edge-seed")
    edge = SimSettings.create("digits-20", "edge")
    # the same update budget: K + 1 updates per round, each preset at its own K (digits-20:
    # edge 1, edge-seed the scenario's 4)
    assert seed.rounds * (seed.scenario.k_for("edge-seed") + 1) == seed.scenario.update_budget
    assert edge.rounds * (edge.scenario.k_for("edge") + 1) == edge.scenario.update_budget
    assert (seed.rounds, edge.rounds) == (40, 100)


def test_edge_seed_has_no_departures_and_says_what_it_is() -> None:
    s = SimSettings.create("digits-20", "edge-seed")
    assert departures(s) == []
    assert edge_options(s) == SEED_OPTIONS
    text = describe(s)
    for phrase in ("sum w_i x_i / sum w_i", "uncapped", "four radar axes"):
        assert phrase in text


def test_edge_names_each_departure_from_the_seed() -> None:
    s = SimSettings.create("digits-20", "edge")
    effective = {**strategy_defaults(), **edge_options(s)}
    changes = departures(s)
    for name, seed in SEED_OPTIONS.items():
        differs = effective[name] != seed
        assert any(c.startswith(f"{name}=") for c in changes) is differs
    assert f"shares capped at {MAX_SHARE_OVER_MEAN:g}x the mean (seed: uncapped)" in changes
    assert all(c in describe(s) for c in changes)


def test_a_run_with_the_seed_aggregation_on_edge_names_the_other_departures() -> None:
    s = SimSettings.create("digits-20", "edge", aggregate="models", server_lr=1.0)
    assert departures(s) == [
        "staleness_lr=True (seed: False)",  # the scenario's edge rule, not a SimSettings key
        "average_passes=1: the served model is the moving average of the global models over 1 "
        "pass(es) of the federation (seed: the global model)",
        "serve_better=True: the served model is the global model instead of the average when "
        "it scores better on the validation set's val-loss (seed: the global model)",
        f"shares capped at {MAX_SHARE_OVER_MEAN:g}x the mean (seed: uncapped)",
        "a node of match ratio 0 trains F / n samples (seed: none)",
        "values and the stop on the server's validation set (300 training samples, val-loss; "
        "seed: the test set's accuracy)",
        "drop_worst: an aggregation leaves out its worst update when the validation loss says "
        "it hurts (seed: every update aggregated)",
        "step_search=(0.5, 1, 1.5, 2, 3): the server scales each step by the factor whose model "
        "has the lowest validation loss (seed: one step)",  # digits-20's small buffer: a half step
        f"shares capped at {s.scenario.edge_max_epochs:g} epochs of each node's own data "
        "(seed: uncapped)",
    ]


def test_edge_values_drops_and_stops_on_a_validation_set_never_the_test_set() -> None:
    """The edge preset steers on val-loss of training-pool samples; the test set only scores."""
    from clients.data import load_centralized_test, load_server_validation
    from simulations.server import _Evaluator, build_strategy
    from strategies.clock import VirtualClock

    s = SimSettings.create("digits-20", "edge", seed=3)
    edge = build_strategy(s, VirtualClock())
    assert edge.valuation.metric_key == "val-loss"
    assert not edge.valuation.higher_is_better
    assert edge.valuation.drop_worst
    assert PRESET_STEP_SEARCH == (1.0, 1.5, 2.0, 3.0)
    # digits-20's edge aggregates two updates at a time: the search may also halve the step
    assert edge.valuation.step_search == SMALL_BUFFER_STEP_SEARCH == (0.5, *PRESET_STEP_SEARCH)
    for name in ("mnist1d-100", "mnist1d-200-skew"):  # a full buffer: the preset's factors
        options = edge_options(SimSettings.create(name, "edge"))
        assert options["valuation"].step_search == PRESET_STEP_SEARCH
    assert edge.serve_better
    evaluator = _Evaluator(s, lambda: 0.0, None)
    metrics = evaluator(0, evaluator.initial_arrays())
    assert set(metrics) == {"accuracy", "loss", "val-accuracy", "val-loss"}
    validation = load_server_validation("digits", size=300, seed=3)
    test = load_centralized_test("digits")
    seen = {tuple(x.tolist()) for x in test.tensors[0]}
    assert not any(tuple(x.tolist()) in seen for x in validation.tensors[0])  # pool, not test
    assert len(validation) == 300
    other = load_server_validation("digits", size=300, seed=4)
    assert not bool((other.tensors[1] == validation.tensors[1]).all())  # drawn per seed
    # edge-seed and the baselines value on the test set, as the seed does, and never drop
    for name in ("edge-seed", "fedbuff"):
        built = build_strategy(SimSettings.create("digits-20", name), VirtualClock())
        assert built.valuation.metric_key == "accuracy"
        assert not built.valuation.drop_worst
        assert built.valuation.step_search == ()  # one step, as the seed
    no_validation = replace(
        SCENARIOS["digits-20"],
        edge_validation=None,
        edge_drop_worst=False,
        edge_serve_better=False,
        edge_step_search=(),
    )
    plain = replace(SimSettings.create("digits-20", "edge"), scenario=no_validation)
    built_plain = build_strategy(plain, VirtualClock())
    assert built_plain.valuation.metric_key == "accuracy"
    assert not built_plain.serve_better  # the test set never chooses the served model
    with pytest.raises(InputError, match="edge_serve_better needs edge_validation"):
        replace(SCENARIOS["digits-20"], edge_validation=None, edge_drop_worst=False)
    with pytest.raises(InputError, match="edge_step_search needs edge_validation"):
        replace(no_validation, edge_step_search=(1.0, 2.0))
    assert built_plain.valuation.step_search == ()
    one_step = replace(SCENARIOS["digits-20"], edge_step_search=())  # validation, no search
    settings = replace(SimSettings.create("digits-20", "edge"), scenario=one_step)
    assert edge_options(settings)["valuation"].step_search == ()
    assert not any("validation" in c for c in departures(plain))


@pytest.mark.parametrize(
    ("field", "off", "named"),
    [
        (
            "edge_average_passes",
            None,  # the global model served
            "average_passes=1: the served model is the moving average of the global models "
            "over 1 pass(es) of the federation (seed: the global model)",
        ),
        (
            "edge_step_search",
            (),  # one step
            "step_search=(",  # (0.5, 1, 1.5, 2, 3) on digits-20, (1, 1.5, 2, 3) elsewhere
        ),
    ],
)
def test_a_departure_is_named_only_where_the_scenario_makes_it(
    field: str, off: object, named: str
) -> None:
    for scenario in ("digits-20", "mnist1d-100", "mnist1d-200-skew"):  # one preset everywhere
        assert any(c.startswith(named) for c in departures(SimSettings.create(scenario, "edge")))
    plain = replace(SCENARIOS["digits-20"], **{field: off})
    settings = replace(SimSettings.create("digits-20", "edge"), scenario=plain)
    assert not any(c.startswith(named.split("=")[0] + "=") for c in departures(settings))


def test_built_strategies_follow_their_presets() -> None:
    from simulations.server import build_strategy
    from strategies.clock import VirtualClock

    seed = build_strategy(SimSettings.create("digits-20", "edge-seed"), VirtualClock())
    edge = build_strategy(SimSettings.create("digits-20", "edge"), VirtualClock())
    assert seed.shares.max_share_fraction == 1.0  # f_d = F m_d / sum m, uncapped
    assert seed.shares.zero_ratio == "none"  # ... and 0 for a match ratio of 0
    assert edge.shares.zero_ratio == "equal"
    assert edge.shares.max_share_fraction == pytest.approx(MAX_SHARE_OVER_MEAN / 20)
    for strategy in (seed, edge):
        assert not strategy.shares.drop_empty_axes  # four radar axes
        assert strategy.shares.compute_share == pytest.approx(0.4)  # the digits MLP, measured
        assert strategy.abandon.theta is None  # derived from the live scores
        assert strategy.stop.patience is not None  # the convergence stop is on
        assert strategy.loop.slice_budget > 0  # slices: busy nodes hear of newer globals
    for name, value in SEED_OPTIONS.items():
        assert getattr(seed, name) == value


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"edge_validation": None}, "edge_drop_worst needs edge_validation"),
        ({"edge_validation": 0}, "edge_validation must be"),
        ({"edge_drop_worst": "yes"}, "edge_drop_worst must be"),
    ],
)
def test_scenario_validation_settings_are_checked(changes: dict[str, object], message: str) -> None:
    from flower_edge.errors import InputError

    with pytest.raises(InputError, match=message):
        replace(SCENARIOS["digits-20"], **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["edge", "fedavg"])
def test_progress_reports_the_served_accuracy_of_each_round(strategy: str) -> None:
    """The progress bar shows what the history records, not a leave-one-out evaluation."""
    from simulations.runner import run_experiment

    seen: list[tuple[int, float, float]] = []
    s = SimSettings.create("digits-20", strategy, rounds=6 if strategy == "edge" else 2)
    r = run_experiment(
        s, engine="inprocess", progress=lambda rnd, _n, acc, t: seen.append((rnd, acc, t))
    )
    history = [(h.round, h.accuracy, h.virtual_time) for h in r.history[1:]]
    assert [x[:2] for x in seen if x[0] > 0] == [x[:2] for x in history]
    assert [x[2] for x in seen if x[0] > 0] == pytest.approx([x[2] for x in history])
    if strategy == "edge":  # drop_worst is on in the preset, and reported
        from simulations.report import summary_table

        dropped = r.to_dict()["dropped_updates"]
        assert isinstance(dropped, int)
        assert 1 <= dropped <= 6
        assert f"edge: left out its worst update in {dropped} of 6 aggregations" in summary_table(
            [r]
        )
        served = r.to_dict()["served_global"]  # serve_better is on in the preset, and reported
        assert isinstance(served, int)
        assert 0 <= served <= 6
        assert (
            f"edge: served the global model instead of its average after {served} of 6 "
            "aggregations" in summary_table([r])
        )
    else:
        assert r.to_dict()["dropped_updates"] is None
        assert r.to_dict()["served_global"] is None


def test_the_simulation_client_trains_on_one_thread_whatever_the_engine_gives() -> None:
    """`flwr run .` may give a worker several CPUs; a seed's history must not change."""
    import torch

    from simulations.client import _single_threaded

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        _single_threaded()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_several_ray_runs_share_one_ray_session() -> None:
    """Flower's Ray backend shuts Ray down after each run; the CLI's runs defer it to the end."""
    import ray

    from simulations.runner import shared_ray_session

    real = ray.shutdown
    with shared_ray_session("ray", 5):
        assert ray.shutdown is not real
        ray.shutdown()  # what Flower's backend calls at the end of each run: deferred
    assert ray.shutdown is real
    with shared_ray_session("ray", 1), shared_ray_session("inprocess", 5):
        assert ray.shutdown is real  # one run, or no Ray: nothing to share


def test_the_engine_picks_up_pushed_messages_sooner_and_is_restored() -> None:
    """``quick_engine_poll`` swaps Flower's 0.1 s look for pushed messages for a shorter one,
    with Flower's loop otherwise unchanged: every node's pushed message reaches the queue."""
    import queue
    import threading

    from flwr.server.superlink.fleet.vce import vce_api

    from flower_edge.errors import ConfigError
    from simulations.runner import ENGINE_POLL_SECONDS, quick_engine_poll

    class State:
        def __init__(self) -> None:
            self.pending = {1: ["a"], 2: ["b", "c"], 3: []}
            self.looks = 0

        def get_message_ins(self, node_id: int, limit: int) -> list[str]:
            self.looks += 1
            out, self.pending[node_id] = (
                self.pending[node_id][:limit],
                self.pending[node_id][limit:],
            )
            return out

    original = vce_api.add_messages_to_queue
    assert ENGINE_POLL_SECONDS < 0.1
    with quick_engine_poll():
        patched = vce_api.add_messages_to_queue
        assert patched is not original
        state, got, stop = State(), queue.Queue(), threading.Event()  # type: ignore[var-annotated]
        thread = threading.Thread(target=patched, args=(state, got, {1: 0, 2: 1, 3: 2}, stop))
        thread.start()
        items = sorted(got.get(timeout=5) for _ in range(3))
        stop.set()
        thread.join(timeout=5)
        assert items == ["a", "b", "c"]
        assert not thread.is_alive()
    assert vce_api.add_messages_to_queue is original
    with pytest.raises(ConfigError, match="seconds"), quick_engine_poll(0.0):
        pass
    assert vce_api.add_messages_to_queue is original


def test_the_simulated_presets_name_themselves_in_the_log() -> None:
    """Found by a new-user probe: the edge-seed run of ``--strategy all`` logged as "edge"."""
    from simulations.server import build_strategy
    from simulations.settings import SimSettings
    from strategies import VirtualClock

    for name in ("edge", "edge-seed"):
        settings = SimSettings.create("digits-20", name, rounds=2)
        assert build_strategy(settings, VirtualClock()).name == name  # type: ignore[attr-defined]


def test_a_cap_of_one_epoch_reads_one_epoch() -> None:
    s = SimSettings.create("digits-20", "edge")
    one = replace(s, scenario=replace(s.scenario, edge_max_epochs=1.0))
    assert "shares capped at 1 epoch of each node's own data (seed: uncapped)" in departures(one)


def test_every_server_optimizer_kind_is_described() -> None:
    """A scenario may run any of the library's server optimizers; each names its rule."""
    from flower_edge.server_opt import OPTIMIZERS, ServerOptConfig
    from simulations.presets import _departure

    texts = {kind: _departure("server_opt", ServerOptConfig(kind), None) for kind in OPTIMIZERS}  # type: ignore[arg-type]
    assert len(set(texts.values())) == len(OPTIMIZERS)
    assert "x1.2 while the sign holds" in texts["rprop"]
    assert all(text.startswith(f"server_opt={kind}: ") for kind, text in texts.items())


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ([1.0, 2.0], "edge_step_search must be a tuple of step factors, got list"),
        ((1.0, 0.0), r"edge_step_search\[1\]"),
        ((1.0, float("nan")), r"edge_step_search\[1\]"),
        ((1.0, 101.0), r"edge_step_search\[1\]"),
    ],
)
def test_a_bad_step_search_of_a_scenario_is_named(value: object, named: str) -> None:
    with pytest.raises(InputError, match=named):
        replace(SCENARIOS["digits-20"], edge_step_search=value)
