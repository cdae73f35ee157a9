"""The deployment app's strategy, built from its own pyproject defaults (no runtime)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, RecordDict

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "deploy" / "app"


def _defaults() -> dict[str, Any]:
    config = tomllib.loads((APP / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(config["tool"]["flwr"]["app"]["config"])


@pytest.fixture
def server_app(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(APP))
    sys.modules.pop("edgeapp.server_app", None)
    import edgeapp.server_app as module

    return module


def _context(**overrides: Any) -> Context:
    run_config = {**_defaults(), **overrides}
    return Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config)


def test_the_deployment_app_runs_the_edge_preset_with_the_windowed_plateau_stop(
    server_app: Any,
) -> None:
    from strategies.config import DEFAULT_PATIENCE_PASSES, DEFAULT_WINDOW_PASSES

    strategy = server_app.build_strategy(_context())
    assert strategy.aggregate == "deltas"  # the edge preset
    assert strategy.stop.patience == 20
    assert strategy.stop.window_passes == DEFAULT_WINDOW_PASSES
    assert strategy.stop.patience_passes == DEFAULT_PATIENCE_PASSES
    assert strategy.shares.compute_share == "auto"  # p_c from the served model
    assert strategy.shares.model is not None
    assert strategy.shares.profile_with_job is None  # on under the app's wall clock


def test_patience_zero_turns_the_plateau_stop_off(server_app: Any) -> None:
    strategy = server_app.build_strategy(_context(patience=0))
    assert strategy.stop.patience is None
    assert strategy.stop.window_passes is None
    assert strategy.stop.patience_passes is None


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"resume": "false"}, "run config 'resume' must be a boolean"),  # a string was true
        ({"profile": "false"}, "run config 'profile' must be a boolean"),
        ({"threshold": 2.5}, "run config 'threshold' must be an integer"),  # ran K = 2
        ({"min-nodes": 2.7}, "run config 'min-nodes' must be an integer"),
        ({"patience": -3}, "run config 'patience' must be an integer >= 0"),  # stop went off
        ({"deadline": float("nan")}, "run config 'deadline' must be a number, got nan"),
        ({"checkpoint-dir": 5}, "run config 'checkpoint-dir' must be a string"),
    ],
)
def test_a_run_config_value_of_the_wrong_type_is_named_not_coerced(
    server_app: Any, override: dict[str, Any], needle: str
) -> None:
    """Found by a new-user probe: bool("false"), int(2.5) and nan > 0 read these silently."""
    from flower_edge.errors import ConfigError

    with pytest.raises(ConfigError) as error:
        server_app.build_strategy(_context(**override))
    assert str(error.value).startswith(needle), error.value


def test_a_toml_float_that_is_an_integer_is_accepted(server_app: Any) -> None:
    strategy = server_app.build_strategy(_context(threshold=3.0, **{"min-nodes": 4.0}))
    assert (strategy.threshold, strategy.loop.min_nodes) == (3, 4)


def test_a_negative_deadline_is_the_librarys_auto_rule(server_app: Any) -> None:
    assert server_app.build_strategy(_context()).loop.deadline == 60.0  # the app's default
    assert server_app.build_strategy(_context(deadline=-1.0)).loop.deadline == "auto"
    assert server_app.build_strategy(_context(deadline=0.0)).loop.deadline is None


def test_resume_without_a_checkpoint_folder_names_the_run_config_keys(server_app: Any) -> None:
    from flower_edge.errors import ConfigError

    with pytest.raises(ConfigError, match="'resume' = true needs 'checkpoint-dir'"):
        server_app.build_strategy(_context(resume=True))


def test_the_slice_budget_and_the_preset_reach_the_strategy(server_app: Any) -> None:
    from strategies.config import ValuationConfig

    assert server_app.build_strategy(_context()).loop.slice_budget == "auto"  # the default
    assert server_app.build_strategy(_context(**{"slice-budget": 2.5})).loop.slice_budget == 2.5
    assert server_app.build_strategy(_context(**{"slice-budget": 0.0})).loop.slice_budget == 0.0
    edge = server_app.build_strategy(_context())
    assert (edge.valuation.metric_key, edge.valuation.drop_worst) == ("val-loss", True)
    seed = server_app.build_strategy(_context(preset="edge-seed"))
    assert seed.valuation == ValuationConfig()  # the seed values on the test metric
    assert not seed.valuation_given


def test_min_epochs_switches_the_share_floor_on_and_is_checked(server_app: Any) -> None:
    from flower_edge.errors import ConfigError

    assert server_app.build_strategy(_context()).shares.min_epochs is None  # off by default
    assert server_app.build_strategy(_context(**{"min-epochs": 1.0})).shares.min_epochs == 1.0
    with pytest.raises(ConfigError, match="min_epochs"):
        server_app.build_strategy(_context(**{"min-epochs": -1.0}))
    with pytest.raises(ConfigError, match="zero_ratio"):  # the seed's preset has no floor
        server_app.build_strategy(_context(**{"min-epochs": 1.0, "preset": "edge-seed"}))


def test_step_search_takes_the_presets_factors_or_the_users_and_is_checked(
    server_app: Any,
) -> None:
    from flower_edge.errors import ConfigError
    from flower_edge.server_opt import PRESET_STEP_SEARCH

    def factors(**overrides: Any) -> tuple[float, ...]:
        return tuple(server_app.build_strategy(_context(**overrides)).valuation.step_search)

    assert factors() == PRESET_STEP_SEARCH == (1.0, 1.5, 2.0, 3.0)  # the pyproject default
    assert factors(preset="edge-seed") == ()  # the seed takes one step
    assert factors(**{"step-search": "off"}) == factors(**{"step-search": ""}) == ()
    assert factors(**{"step-search": "1, 2 4"}) == (1.0, 2.0, 4.0)
    cases = [
        ({"step-search": "1 two"}, "'step-search' must be 'preset', 'off' or numbers"),
        ({"step-search": "1 0"}, r"'step-search'\[1\] must be in \(0, 100\], got 0.0"),
        ({"step-search": "1 nan"}, r"'step-search'\[1\]"),
        ({"step-search": "1 500"}, r"'step-search'\[1\] must be in \(0, 100\], got 500"),
        ({"step-search": 2.0}, "'step-search' must be a string"),
        ({"step-search": "1 2", "preset": "edge-seed"}, "'step-search' needs preset 'edge'"),
    ]
    for overrides, named in cases:
        with pytest.raises(ConfigError, match=named):
            server_app.build_strategy(_context(**overrides))


def test_the_deployment_app_passes_strict_mypy(monkeypatch: pytest.MonkeyPatch) -> None:
    """``**slices`` (a ``dict[str, float]``) into ``LoopConfig`` was 3 strict-mypy errors that
    the project's ``mypy`` run never saw: its configuration left the deployment app out."""
    from mypy import api

    monkeypatch.chdir(ROOT)  # mypy_path is relative to the project's root
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert "edgeapp" in config["packages"]  # `mypy`, as scripts/test.sh runs it, checks it
    assert config["mypy_path"] == "deploy/app"
    report, errors, status = api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--package", "edgeapp"]
    )
    assert status == 0, report + errors
