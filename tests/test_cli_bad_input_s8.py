"""Defects found by the eighth session's new-user probe: ``plan``'s quadratic check of
suspect ratings, its advice for a node whose radar area underflows, unbounded model kwargs
and ``--rounds``, and the share cap's log level."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import fails, plan_argv
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from flower_edge.cli import main
from flower_edge.plan_notes import (
    _RESOURCES,
    SUSPECT_RATING,
    _median_of_positive_others,
    _suspect_ratings,
)


# ---------------------------------------------------------------- plan: suspect ratings
def _brute_medians(column: NDArray[np.float64]) -> NDArray[np.float64]:
    """The median of the other entries > 0, by deleting each entry in turn (O(n^2))."""
    out = []
    for d in range(column.size):
        others = np.delete(column, d)
        out.append(float(np.median(others[others > 0])) if np.any(others > 0) else 0.0)
    return np.asarray(out, dtype=np.float64)


def _brute_suspects(ids: Sequence[str], ev: NDArray[np.float64]) -> list[str]:
    """The notes as the first version of ``_suspect_ratings`` wrote them."""
    out: list[str] = []
    if len(ids) < 2:
        return out
    for r, resource in enumerate(_RESOURCES):
        column = ev[:, r]
        medians = _brute_medians(column)
        for d, node_id in enumerate(ids):
            median = float(medians[d])
            if median > 0 and column[d] > SUSPECT_RATING * median:
                out.append(
                    f"node {node_id}: its {resource} rating {column[d]:.3g} is "
                    f"{column[d] / median:.3g}x the other nodes' median ({median:.3g}); check "
                    "its profile, or cap every node with --max-share-fraction"
                )
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=12),
    st.sampled_from([1.0, 0.37, 1e-300, 1e307]),
)
def test_median_of_the_others_equals_deleting_each_entry(levels: list[int], unit: float) -> None:
    """Found by a new-user probe: ``plan`` for 10,000 nodes spent 5 s deleting each node in turn.

    Small columns with ties and zeros, against the brute force the first version ran.
    """
    column = np.asarray(levels, dtype=np.float64) * unit
    assert np.array_equal(_median_of_positive_others(column), _brute_medians(column))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 50, 501])
def test_suspect_notes_equal_the_brute_force_notes(n: int) -> None:
    """Found by a new-user probe: the O(n log n) check writes the O(n^2) check's notes."""
    rng = np.random.default_rng(n)
    ev = rng.lognormal(0.0, 0.7, size=(n, 4)).round(1)  # rounded: ties
    ev[rng.random(n) < 0.3, 1] = 0.0
    ev[rng.random(n) < 0.1] *= 1e6  # suspects
    ev[rng.random(n) < 0.05, 2] = 1e308
    ids = [f"n{d}" for d in range(n)]
    assert _suspect_ratings(ids, ev) == _brute_suspects(ids, ev)
    if n >= 7:
        assert _brute_suspects(ids, ev), "no suspect drawn: the comparison shows little"


# ---------------------------------------------------------------- plan: underflowing area
def test_a_node_negligible_next_to_the_best_is_not_told_to_rate_its_axes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: a node rated 1 on all four next to one rated 1e308 was told
    to rate all four resources or pass --drop-empty-axes; its scores underflow instead."""
    nodes = {
        "nodes": [
            {"id": n, "resources": dict.fromkeys(_RESOURCES, v)}
            for n, v in (("a", 1e308), ("b", 1.0))
        ]
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(nodes), encoding="utf-8")
    assert main(plan_argv(str(path))) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "node b:" in line]
    assert len(notes) == 1, notes
    assert "negligible next to the best node's" in notes[0]
    assert "1e-308" in notes[0]
    assert "--drop-empty-axes" not in notes[0]
    assert "no radar area" not in notes[0]


def test_a_node_without_an_area_is_still_told_to_rate_its_axes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: the underflow note leaves the no-area note as it was."""
    nodes = {
        "nodes": [
            {"id": "a", "resources": dict.fromkeys(_RESOURCES, 2.0)},
            {"id": "b", "resources": {"cpu": 1.0, "memory": 1.0}},
        ]
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(nodes), encoding="utf-8")
    assert main(plan_argv(str(path))) == 0
    err = capsys.readouterr().err
    assert "node b: match ratio 0, so no samples: rated on cpu, memory, which gives no radar" in err
    assert "rate all four resources" in err
    assert "--drop-empty-axes" not in err  # a rates every axis: none is empty, it cannot help
    assert "negligible" not in err


# ---------------------------------------------------------------- analyze: model kwargs
@pytest.mark.parametrize(
    ("model", "shape", "kwargs", "needle"),
    [
        ("mlp", "8,64", '{"hidden": 2.5}', "hidden must be an integer in [1, 100000000], got 2.5"),
        ("mlp", "8,64", '{"hidden": NaN}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": 1e30}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": true}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": "x"}', "hidden must be an integer"),
        ("mlp", "8,64", '{"hidden": 100000000000}', "hidden must be an integer in [1, 100000000]"),
        ("mlp", "8,64", '{"hidden": 100000}', "10,007,600,010 parameters, over the 100,000,000"),
        ("cnn", "8,1,28,28", '{"width": 1e30}', "width must be an integer"),
        ("cnn1d", "8,40", '{"width": 2.5}', "width must be an integer"),  # 2.0 is 2
        ("transformer", "8,64", '{"d_model": 1e9}', "d_model must be an integer"),
        ("resnet18", "2,3,32,32", '{"width": 4096}', "parameters, over the 100,000,000"),
        ("resnet18", "2,3,32,32", '{"small_input": 1}', "small_input must be a boolean"),
        ("mlp", "8,64", '{"hiden": 3}', "takes no keyword argument 'hiden'"),
    ],
)
def test_analyze_names_a_bad_model_kwarg(
    model: str, shape: str, kwargs: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: ``--model-kwargs '{"hidden": 2.5}'`` gave torch's TypeError
    from ``empty()``, and ``{"hidden": 100000000000}`` an allocator's out-of-memory error."""
    argv = ["analyze", model, "--input-shape", shape, "--model-kwargs", kwargs]
    line = fails(argv, capsys, needle)
    assert "the factory raised" not in line


def test_every_integer_kwarg_of_every_bundled_model_is_bounded() -> None:
    """Found by a new-user probe: each size of each bundled model is checked, by its name."""
    import inspect

    from flower_edge.errors import InputError
    from flower_edge.models import MAX_PARAMETERS, MODELS, build_model

    checked = 0
    for name, factory in MODELS.items():
        for key, param in inspect.signature(factory).parameters.items():
            if isinstance(param.default, bool) or not isinstance(param.default, int):
                continue
            for bad in (0, MAX_PARAMETERS + 1, 2.5, float("nan"), True, "8"):
                with pytest.raises(InputError, match=rf"^{key} must be an integer"):
                    build_model(name, **{key: bad})
            checked += 1
    assert checked == 18  # mlp 3, cnn 4, cnn1d 3, transformer 5, resnet18 3


def test_the_parameter_bound_leaves_the_bundled_models_as_they_were() -> None:
    """Found by a new-user probe: the meta-device count neither refuses nor reseeds a model."""
    import torch

    from flower_edge.models import MODELS, build_model

    for name, factory in MODELS.items():
        torch.manual_seed(0)
        direct = factory().state_dict()
        torch.manual_seed(0)
        built = build_model(name).state_dict()
        assert direct.keys() == built.keys()
        assert all(torch.equal(direct[k], built[k]) for k in direct), name


# ---------------------------------------------------------------- simulate: --rounds
@pytest.mark.parametrize("rounds", ["100000000000", "1000001"])
def test_simulate_bounds_the_rounds(
    rounds: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: ``--rounds 100000000000`` was accepted and FedAvg ran on
    more or less forever."""
    out = tmp_path / "o"
    argv = ["simulate", "--engine", "inprocess", "--strategy", "fedavg", "--out", str(out)]
    fails([*argv, "--rounds", rounds], capsys, "--rounds must be an integer in [1, 1000000]")
    assert not out.exists()


def test_settings_and_run_config_bound_the_rounds() -> None:
    """Found by a new-user probe: the bound holds for every way in, the run config's too."""
    from flower_edge.errors import ConfigError, InputError
    from simulations.app import SimSettings
    from simulations.scenarios import MAX_ROUNDS
    from simulations.settings import NUM_SERVER_ROUNDS, RUN_CONFIG_DEFAULTS, STRATEGY

    assert SimSettings.create("digits-20", "fedavg", rounds=MAX_ROUNDS).rounds == MAX_ROUNDS
    with pytest.raises(InputError, match=r"rounds must be an integer in \[1, 1000000\]"):
        SimSettings.create("digits-20", "fedavg", rounds=MAX_ROUNDS + 1)
    cfg = {**RUN_CONFIG_DEFAULTS, NUM_SERVER_ROUNDS: 10**11, STRATEGY: "fedavg"}
    with pytest.raises(ConfigError, match="rounds"):
        SimSettings.from_run_config(cfg)
