"""The simulation App, runner and virtual probe (in-process engine; one Ray run)."""

import json
import math

import pytest

from flower_edge.errors import ConfigError, InputError
from simulations.app import SimSettings, devices_for
from simulations.probe import VirtualProbe
from simulations.report import results_to_json
from simulations.runner import run_experiment

SMALL = {"clients": 6, "seed": 2}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"scenario": "nope"}, "unknown scenario 'nope'; valid scenarios: digits-20"),
        (
            {"strategy": "fedprox"},
            r"must name one strategy \(edge, edge-seed, fedavg, fedbuff, fedasync\), got .fedprox.",
        ),
        ({"num-server-rounds": -1}, r"'num-server-rounds' must be an integer in \[0, 1000000\]"),
        ({"threshold": 25}, r"threshold K must be >= 1 and < clients \(20\)"),
        ({"clients": 500}, r"clients must be <= 179"),
        ({"alpha": "x"}, "'alpha' must be a number"),
        ({"alpha": 2.0}, r"alpha must be in \[0, 1\]"),
        ({"shares": "random"}, "shares must be one of match, uniform"),
        ({"seed": 1.5}, "'seed' must be an integer >= 0"),
        ({"decay": "linear"}, "decay must be one of"),
        ({"decay-a": 0.0}, "decay parameter a must be > 0, got 0.0"),
        ({"heterogeneity": -5.0}, r"'heterogeneity' must be >= 0, got -5.0"),  # not 0's default
    ],
)
def test_bad_run_config_is_rejected_before_anything_runs(
    config: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        SimSettings.from_run_config(config)


def test_run_config_defaults_and_overrides() -> None:
    s = SimSettings.from_run_config({})
    assert (s.scenario.name, s.strategy, s.seed) == ("digits-20", "edge", 0)
    assert s.rounds == s.scenario.rounds_for("edge")
    t = SimSettings.from_run_config(
        {"strategy": "fedavg", "clients": 10, "num-server-rounds": 3, "theta": math.inf}
    )
    assert (t.scenario.num_clients, t.rounds, t.theta) == (10, 3, math.inf)


def test_create_validates() -> None:
    with pytest.raises(InputError, match=r"rounds must be an integer in \[1, 1000000\]"):
        SimSettings.create("digits-20", "edge", rounds=0)
    with pytest.raises(InputError, match="slice-budget must be >= 0"):
        SimSettings.create("digits-20", "edge", slice_budget=-2.0)


def test_virtual_probe_answers_from_the_device() -> None:
    s = SimSettings.create("digits-20", "edge", **SMALL)
    devices = devices_for(s.scenario, s.seed)
    reports = [VirtualProbe(d).profile("quick") for d in devices]
    for d, r in zip(devices, reports, strict=True):
        assert r.resources["gpu"].available == d.spec.has_gpu
        assert r.evaluations["cpu"] == pytest.approx(d.resource_evaluations()["cpu"])
    fast = max(range(len(devices)), key=lambda i: devices[i].spec.cpu_flops)
    slow = min(range(len(devices)), key=lambda i: devices[i].spec.cpu_flops)
    ratio = reports[fast].evaluations["cpu"] / reports[slow].evaluations["cpu"]
    assert ratio == pytest.approx(s.scenario.heterogeneity)
    full = VirtualProbe(devices[0]).profile("full")
    assert len(full.resources["cpu"].workloads) == 2


@pytest.mark.parametrize(("strategy", "rounds"), [("edge", 4), ("fedavg", 2), ("fedbuff", 3)])
def test_same_seed_same_history(strategy: str, rounds: int) -> None:
    s = SimSettings.create("digits-20", strategy, rounds=rounds, **SMALL)
    a = run_experiment(s, engine="inprocess")
    b = run_experiment(s, engine="inprocess")
    assert a.history == b.history
    assert a.timeline == b.timeline
    assert len(a.history) == rounds + 1
    assert a.history[0].virtual_time == 0.0
    times = [h.virtual_time for h in a.history]
    assert times == sorted(times)
    assert times[-1] > 0
    other = SimSettings.create("digits-20", strategy, rounds=rounds, clients=6, seed=3)
    c = run_experiment(other, engine="inprocess")
    assert c.history != a.history


def test_result_follows_the_json_contract() -> None:
    s = SimSettings.create("digits-20", "edge", rounds=3, **SMALL)
    r = run_experiment(s, engine="inprocess")
    data = json.loads(results_to_json([r], as_list=False))
    assert data["scenario"] == "digits-20"
    assert data["strategy"] == "edge"
    assert data["clients"] == 6
    assert data["rounds"] == 3
    assert 0.0 <= data["wasted_compute_fraction"] <= 1.0
    assert data["history"][-1]["participants"] == s.scenario.threshold + 1
    kinds = {span.kind for span in r.timeline}
    assert "training" in kinds
    assert {span.node for span in r.timeline} <= set(range(6))


@pytest.mark.simulation
def test_ray_engine_reproduces_the_inprocess_history() -> None:
    s = SimSettings.create("digits-20", "edge", rounds=3, clients=4, seed=1)
    inproc = run_experiment(s, engine="inprocess")
    ray = run_experiment(s, engine="ray", cpus=2)
    assert ray.history == inproc.history
    assert ray.timeline == inproc.timeline


def test_flwr_run_config_of_the_project_is_valid_and_drives_the_clients() -> None:
    """The App as ``flwr run .`` starts it: settings from the run config on both sides."""
    import tomllib
    from pathlib import Path

    from simulations.app import make_client_app, run_server
    from strategies.inprocess import InProcessGrid

    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    config = tomllib.loads(pyproject.read_text())["tool"]["flwr"]["app"]["config"]
    settings = SimSettings.from_run_config(config)
    assert settings.scenario.name == config["scenario"]
    small = {**config, "clients": 5, "threshold": 2, "num-server-rounds": 2}
    s = SimSettings.from_run_config(small)
    grid = InProcessGrid(make_client_app(None), 5, run_config=small)
    result = run_server(grid, s)
    assert result.rounds == 2
    assert result.history[-1].participants == 3
