"""Public constructors: wrong-typed settings name their field; documented defaults hold.

Each case failed before its fix (new-user probe of the public API).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from conftest import ToyEdge, accuracy_fn, flwr_logs, model, virtual
from flwr.app import MessageType
from torch.utils.data import TensorDataset

from clients import Task, build_client_app
from flower_edge import wire
from flower_edge.errors import ConfigError
from flower_edge.models import MLP
from strategies import (
    AbandonConfig,
    EdgeStrategy,
    FedAsync,
    FedBuff,
    InProcessGrid,
    LoopConfig,
    ShareConfig,
)
from strategies.abandon import AbandonPolicy

EMPTY = TensorDataset(torch.zeros(0, 8), torch.zeros(0, dtype=torch.long))
TASK = Task(
    model_fn=lambda: MLP(in_features=8, hidden=16, num_classes=4),
    load_data=lambda ctx: (EMPTY, EMPTY),
)


@pytest.mark.parametrize("field", ["order_invariant", "drop_empty_axes"])
@pytest.mark.parametrize("value", ["no", 0, 1, None])
def test_share_config_radar_switches_are_booleans(field: str, value: object) -> None:
    # "no" is truthy: order_invariant="no" used to switch the variant on
    with pytest.raises(ConfigError, match=f"{field} must be a boolean"):
        ShareConfig(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("shares", [LoopConfig(), {"profile": False}])
def test_preset_names_shares_of_the_wrong_type(shares: object) -> None:
    # was AttributeError: 'LoopConfig' object has no attribute 'max_epochs'
    with pytest.raises(ConfigError, match="shares must be a ShareConfig, got"):
        EdgeStrategy.preset("edge", threshold=2, shares=shares)  # type: ignore[arg-type]


def test_preset_refuses_its_own_options_by_name() -> None:
    with pytest.raises(TypeError, match=r"preset\('edge-seed'\) sets aggregate, server_lr"):
        EdgeStrategy.preset("edge-seed", 2, aggregate="deltas", server_lr=0.5)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"b": -1.0}, "decay parameter b must be >= 0, got -1"),
        ({"staleness_fn": "constant", "a": -1.0}, "decay parameter a must be > 0, got -1"),
        ({"staleness_fn": "polynomial", "b": float("nan")}, "decay parameter b must be a finite"),
    ],
)
def test_fedasync_checks_both_parameters_whatever_the_function(
    options: dict[str, object], match: str
) -> None:
    # its docstring promised a > 0 and b >= 0; only the parameters s used were checked
    with pytest.raises(ConfigError, match=match):
        FedAsync(**options)  # type: ignore[arg-type]


def test_abandon_policy_checks_its_arguments() -> None:
    with pytest.raises(ConfigError, match="abandon must be an AbandonConfig, got NoneType"):
        AbandonPolicy(None, enabled=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="enabled must be a boolean"):
        AbandonPolicy(AbandonConfig(), enabled="no")  # type: ignore[arg-type]


def test_baselines_default_to_whole_jobs_without_slices() -> None:
    # docs/strategy.md: "defaults: no profiling, equal shares, no values, no slicing"
    assert FedBuff(2).loop.slice_budget == 0.0
    assert FedAsync().loop.slice_budget == 0.0
    assert FedBuff(2, loop=None).loop.slice_budget == 0.0
    # a loop the user gives keeps its own budget; EdgeStrategy keeps slices on
    assert FedBuff(2, loop=LoopConfig(min_nodes=3)).loop.slice_budget == "auto"
    assert EdgeStrategy(2).loop.slice_budget == "auto"


@pytest.mark.parametrize("make", [lambda: FedBuff(2), lambda: FedAsync()])
def test_baseline_train_messages_ask_for_whole_jobs(make: object) -> None:
    strategy = make()  # type: ignore[operator]
    strategy.clock = virtual()
    strategy.checkpoint_dir = None
    grid = InProcessGrid(ToyEdge(), 4)
    strategy.start(grid, model(0.0), num_rounds=3, evaluate_fn=accuracy_fn())
    budgets = {
        m.content.config_records[wire.CONFIG][wire.SLICE_BUDGET]
        for m in grid.pushed
        if m.metadata.message_type == MessageType.TRAIN
    }
    assert budgets == {0.0}
    assert len(strategy.history) == 3


@pytest.mark.parametrize(
    ("args", "options", "match"),
    [
        ((None,), {}, "task must be a clients.Task"),
        (("model.py",), {}, "task must be a clients.Task"),
        ((TASK,), {"timer_fn": 3}, "timer_fn must be callable or None, got int"),
        ((TASK,), {"probe_fn": "host"}, "probe_fn must be callable or None, got str"),
        ((TASK,), {"availability_fn": 0.5}, "availability_fn must be callable or None"),
    ],
)
def test_build_client_app_names_a_wrong_argument(
    args: tuple[object, ...], options: dict[str, object], match: str
) -> None:
    # was accepted: every message then failed inside the ClientApp
    with pytest.raises(ConfigError, match=match):
        build_client_app(*args, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: LoopConfig(deadline="never"),  # type: ignore[arg-type]
            "deadline must be a number > 0, 'auto' or None",
        ),
        (
            lambda: LoopConfig(deadline="AUTO"),  # type: ignore[arg-type]
            "deadline must be a number > 0, 'auto' or None",
        ),
        (
            lambda: ShareConfig(compute_share="AUTO"),  # type: ignore[arg-type]
            r"compute_share must be in \[0, 1\] or 'auto'",
        ),
        (
            lambda: ShareConfig(compute_share="0.5"),  # type: ignore[arg-type]
            r"compute_share must be in \[0, 1\] or 'auto'",
        ),
    ],
)
def test_a_wrong_string_names_the_allowed_word(make: Callable[[], object], match: str) -> None:
    # the messages said "must be a finite number", leaving out 'auto'
    with pytest.raises(ConfigError, match=match):
        make()


def test_min_nodes_defaults_are_the_documented_ones() -> None:
    # docs/strategy.md, Options: "K + 1 (FedBuff: K; FedAsync: 1)"
    assert EdgeStrategy(3).min_nodes() == 4
    assert FedBuff(3).min_nodes() == 3
    assert FedAsync().min_nodes() == 1
    assert FedBuff(3, loop=LoopConfig(min_nodes=7)).min_nodes() == 7


def test_baseline_summaries_name_their_own_settings() -> None:
    # summary() logged only the unused decay: not FedAsync's alpha and s, nor FedBuff's lr
    with flwr_logs() as logs:
        FedAsync(alpha=0.9, staleness_fn="hinge", a=10.0).summary()
        FedBuff(3, server_lr=0.3).summary()
    assert "alpha 0.9, s hinge, a 10, b 4" in logs.text
    assert "/ sqrt(1 + staleness_i), server_lr 0.3" in logs.text
