"""Defects found by the thirteenth session's new-user probe of the command line and its files."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from conftest import fails, plan_argv

from flower_edge.cli import main


def _profiles(tmp_path: Path, nodes: Sequence[Mapping[str, object]]) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"nodes": nodes}), encoding="utf-8")
    return str(path)


def _node(node_id: str, rating: float, capacity: int | None = None) -> dict[str, object]:
    node: dict[str, object] = {
        "id": node_id,
        "resources": {r: rating for r in ("cpu", "gpu", "memory", "disk")},
    }
    if capacity is not None:
        node["capacity"] = capacity
    return node


# ---------------------------------------------------------------- plan: absurd ratings
@pytest.mark.parametrize(
    ("small", "total"),
    [
        (1e145, "1000"),  # match ratio 1e-310: K0 / m was inf ('TimeModel.k must be finite')
        (1e150, "1000000000"),  # ratio 1e-300: k * F overflowed in rebalance ('models[1]')
    ],
)
def test_plan_of_a_node_negligible_next_to_an_absurd_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], small: float, total: str
) -> None:
    """A node rated 1e300 beside one rated ``small`` stopped the plan with an error naming an
    internal field (``TimeModel.k``, ``models[1]``), not a node; the notes were never shown."""
    path = _profiles(tmp_path, [_node("a", 1e300), _node("b", small)])
    argv = ["plan", "--profiles", path, "--total-samples", total, "--compute-share", "0.5"]
    assert main([*argv, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [n["samples"] for n in doc["nodes"]] == [int(total), 0]
    assert "node b: match ratio" in captured.err
    assert "beyond the float range" in captured.err
    assert "node a: its cpu rating 1e+300" in captured.err  # the suspect claim is named too


def test_plan_gives_a_negligible_node_the_samples_the_others_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As :func:`flower_edge.allocation.initial_shares` does: a tiny ratio still takes samples
    when every other node is full, with a finite predicted time (valid JSON)."""
    path = _profiles(tmp_path, [_node("a", 1e300, capacity=5), _node("b", 1e140)])
    for method in ("seed", "optimal"):
        argv = ["plan", "--profiles", path, "--total-samples", "10", "--compute-share", "0.5"]
        with warnings.catch_warnings():  # numpy's 'overflow encountered in divide' reached
            warnings.simplefilter("error")  # the user's stderr from initial_shares
            assert main([*argv, "--method", method, "--json"]) == 0
        out = capsys.readouterr().out
        doc = json.loads(out)
        assert [n["samples"] for n in doc["nodes"]] == [5, 5]
        assert "Infinity" not in out
        assert "NaN" not in out
        assert doc["makespan"] == doc["nodes"][1]["predicted_seconds"] > 1e300


def test_plan_names_a_seconds_per_sample_beyond_the_float_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--seconds-per-sample 1e308`` was refused as ``models[0]: ... overflows a float``."""
    path = _profiles(tmp_path, [_node("a", 1.0), _node("b", 2.0)])
    fails(plan_argv(path, "--seconds-per-sample", "1e308"), capsys, "--seconds-per-sample 1e+308")
    assert main([*plan_argv(path, "--seconds-per-sample", "1e300"), "--json"]) == 0
    assert sum(n["samples"] for n in json.loads(capsys.readouterr().out)["nodes"]) == 100


def test_plan_names_the_node_whose_observed_time_overflows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Observations in absurd units were refused as ``models[0]``, an index, not the node."""
    path = _profiles(tmp_path, [_node("a", 1.0), _node("b", 2.0)])
    observed = tmp_path / "observed.json"
    observed.write_text(
        json.dumps({"a": [[1, 1e308], [2, 1.7e308]], "b": [[1, 1], [2, 2]]}), encoding="utf-8"
    )
    error = fails(plan_argv(path, "--observations", str(observed)), capsys, "observations['a']")
    assert "models[" not in error


# ---------------------------------------------------------------- simulate: default --out
def test_runs_started_in_the_same_second_keep_their_own_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs started in the same second shared ``runs/<scenario>-<second>``: the later one
    overwrote the first's ``results.json`` and removed its ``timeline-edge.png``."""
    import time
    from types import SimpleNamespace

    import simulations.cli as sim_cli

    clock = SimpleNamespace(strftime=lambda *_: "20261203-120000", gmtime=time.gmtime)
    monkeypatch.setattr(sim_cli, "time", clock)  # every run starts in the same second
    monkeypatch.chdir(tmp_path)
    base = ["simulate", "--engine", "inprocess", "--clients", "3", "--rounds", "1"]
    assert main([*base, "--strategy", "edge"]) == 0
    assert main([*base, "--strategy", "fedbuff"]) == 0
    capsys.readouterr()
    first = tmp_path / "runs" / "digits-20-20261203-120000"
    second = tmp_path / "runs" / "digits-20-20261203-120000-2"
    assert (first / "timeline-edge.png").is_file()
    assert json.loads((first / "results.json").read_text())["strategy"] == "edge"
    assert json.loads((second / "results.json").read_text())["strategy"] == "fedbuff"
    assert not (second / "timeline-edge.png").exists()


# ---------------------------------------------------------------- run config messages
@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"num-server-rounds": 10**12}, "run config 'num-server-rounds' must be"),  # was 'rounds'
        ({"decay": "foo"}, "run config: decay must be one of"),  # was without 'run config'
    ],
)
def test_run_config_errors_name_the_run_config_key(config: dict[str, object], needle: str) -> None:
    from flower_edge.errors import ConfigError
    from simulations.app import SimSettings

    with pytest.raises(ConfigError) as error:
        SimSettings.from_run_config(config)
    assert str(error.value).startswith(needle), error.value


# ---------------------------------------------------------------- analyze: a model instance
def test_analyze_names_a_model_instance_given_for_a_factory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mymodels:net`` where ``net = nn.Linear(64, 10)`` said 'the factory raised TypeError:
    Linear.forward() missing 1 required positional argument', as if the factory were broken."""
    (tmp_path / "probe13_models.py").write_text(
        "from torch import nn\n\n\nclass Net(nn.Linear):\n    def __init__(self) -> None:\n"
        "        super().__init__(64, 10)\n\n\nnet = nn.Linear(64, 10)\nmine = Net()\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["analyze", "probe13_models:net", "--input-shape", "8,64"]
    error = fails(argv, capsys, "is a torch.nn.Module instance (Linear), not a factory")
    assert "forward()" not in error
    assert "probe13_models:Linear" not in error  # torch's class, not one of the module's
    argv = ["analyze", "probe13_models:mine", "--input-shape", "8,64"]
    fails(argv, capsys, "name its class (probe13_models:Net) or a function")
    assert main(["analyze", "probe13_models:Net", "--input-shape", "8,64", "--json"]) == 0


# ---------------------------------------------------------------- simulate: writing --out
SMALL_RUN = ["simulate", "--engine", "inprocess", "--strategy", "fedbuff", "--clients", "3"]


def test_simulate_refuses_a_folder_in_place_of_an_output_file_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder named ``results.json`` in ``--out`` ended the command after the whole run with
    an ``IsADirectoryError`` traceback, and the results were lost."""
    import simulations.runner

    def never(*args: object, **kwargs: object) -> object:
        raise AssertionError("the engine started")

    monkeypatch.setattr(simulations.runner, "run_experiment", never)
    for name in ("results.json", "timeline-fedbuff.png", "summary.txt"):
        out = tmp_path / name.replace(".", "-")
        (out / name).mkdir(parents=True)
        fails([*SMALL_RUN, "--out", str(out)], capsys, f"--out {out}: {name} exists")
    # the timeline of a strategy that does not run is no file of this run
    out = tmp_path / "other"
    (out / "timeline-edge.png").mkdir(parents=True)
    with pytest.raises(AssertionError, match="the engine started"):
        main([*SMALL_RUN, "--out", str(out)])


def test_simulate_prints_the_results_when_writing_them_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write error after the run (a full disk) is exit code 1 with a message naming
    ``--out``, and the results still reach stdout, instead of a traceback and nothing."""
    import errno

    import simulations.report

    def full(*args: object, **kwargs: object) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "results.json"))

    monkeypatch.setattr(simulations.report, "write_json", full)
    assert main([*SMALL_RUN, "--rounds", "1", "--out", str(tmp_path), "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["strategy"] == "fedbuff"
    assert "Traceback" not in captured.err
    assert f"--out {tmp_path}: cannot write results.json: No space left" in captured.err
    assert main([*SMALL_RUN, "--rounds", "1", "--out", str(tmp_path)]) == 1
    table = capsys.readouterr().out
    assert table.startswith("strategy")  # the table, without a list of files not written
    assert "results and plots in" not in table
