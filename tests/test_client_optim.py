"""The client's SGD (clients.optim.LocalSGD) against torch.optim.SGD: bit for bit, state dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import load_benchmark
from torch import nn

from clients.optim import LocalSGD, build_sgd
from clients.state import optimizer_from_records, optimizer_to_records
from clients.task import build_optimizer

SETTINGS: list[dict[str, Any]] = [
    {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0},
    {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.0},
    {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-3},
    {"lr": 0.05, "momentum": 0.5, "dampening": 0.3},
    {"lr": 0.02, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
]


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))


def _steps(model: nn.Module, opt: object, steps: range, frozen: bool = False) -> None:
    """Train ``model`` on seeded batches; with ``frozen`` the last layer's bias gets no grad."""
    for k in steps:
        g = torch.Generator().manual_seed(1000 + k)
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        opt.zero_grad()  # type: ignore[attr-defined]
        nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
        if frozen:
            model[2].bias.grad = None  # type: ignore[index]
        opt.step()  # type: ignore[attr-defined]


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("frozen", [False, True])
def test_local_sgd_is_torch_sgd_bit_for_bit(settings: dict[str, Any], frozen: bool) -> None:
    ours, ref = _model(0), _model(0)
    opt, ref_opt = (
        LocalSGD(ours.parameters(), **settings),
        torch.optim.SGD(ref.parameters(), **settings),
    )
    _steps(ours, opt, range(12), frozen)
    _steps(ref, ref_opt, range(12), frozen)
    for a, b in zip(ours.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)
    ours_state, ref_state = opt.state_dict(), ref_opt.state_dict()
    assert ours_state["state"].keys() == ref_state["state"].keys()
    for i, entries in ref_state["state"].items():
        assert entries.keys() == ours_state["state"][i].keys()
        for name, value in entries.items():
            assert torch.equal(ours_state["state"][i][name], value)
    assert [g["params"] for g in ours_state["param_groups"]] == [
        g["params"] for g in ref_state["param_groups"]
    ]


@pytest.mark.parametrize("settings", SETTINGS[1:3])
def test_state_round_trip_through_the_client_records_resumes_exactly(
    settings: dict[str, Any],
) -> None:
    """A job cut into slices (state stored as records, a fresh optimizer) = one job at once."""
    whole = _model(1)
    opt = LocalSGD(whole.parameters(), **settings)
    _steps(whole, opt, range(10))

    sliced = _model(1)
    first = LocalSGD(sliced.parameters(), **settings)
    _steps(sliced, first, range(4))
    arrays, scalars = optimizer_to_records(first)
    second = LocalSGD(sliced.parameters(), **settings)
    assert optimizer_from_records(second, arrays, scalars) is None
    _steps(sliced, second, range(4, 10))
    for a, b in zip(whole.parameters(), sliced.parameters(), strict=True):
        assert torch.equal(a, b)


def test_state_dicts_load_across_local_and_torch_sgd() -> None:
    """The state dict has torch's layout: each optimizer loads the other's."""
    a, b = _model(2), _model(2)
    ours = LocalSGD(a.parameters(), lr=0.1, momentum=0.9)
    ref = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    _steps(a, ours, range(3))
    _steps(b, ref, range(3))
    ref.load_state_dict(ours.state_dict())
    ours.load_state_dict(ref.state_dict())
    _steps(a, ours, range(3, 6))
    _steps(b, ref, range(3, 6))
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_zero_grad_to_zeros_keeps_the_tensors() -> None:
    model = _model(3)
    opt = LocalSGD(model.parameters(), lr=0.1)
    _steps(model, opt, range(1))
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -0.1}, "learning rate"),
        ({"lr": 0.1, "momentum": -1.0}, "momentum"),
        ({"lr": 0.1, "weight_decay": -1.0}, "weight_decay"),
        ({"lr": 0.1, "nesterov": True}, "Nesterov"),
    ],
)
def test_settings_torch_rejects_are_rejected(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LocalSGD(_model(0).parameters(), **kwargs)
    with pytest.raises(ValueError, match="empty"):
        LocalSGD([], lr=0.1)


def test_load_state_dict_names_a_bad_parameter() -> None:
    opt = LocalSGD(_model(0).parameters(), lr=0.1, momentum=0.9)
    state = opt.state_dict()
    state["state"] = {99: {"momentum_buffer": torch.zeros(1)}}
    with pytest.raises(ValueError, match="99"):
        opt.load_state_dict(state)
    state = opt.state_dict()
    state["param_groups"][0]["params"] = [0]
    with pytest.raises(ValueError, match="number of parameter groups or parameters"):
        opt.load_state_dict(state)


def test_build_optimizer_uses_local_sgd_on_the_cpu() -> None:
    params = list(_model(0).parameters())
    assert isinstance(build_optimizer("sgd", params, 0.1, 0.9, 0.0), LocalSGD)
    assert isinstance(build_sgd(params, 0.1, 0.9, 0.0), LocalSGD)
    assert isinstance(build_optimizer("adam", params, 0.1, 0.9, 0.0), torch.optim.Adam)


def test_a_train_message_in_a_fresh_process_never_imports_dynamo(tmp_path: Path) -> None:
    """The point of LocalSGD: a ClientApp process (one per message on a real deployment),
    run as ``benchmarks/client_message_cpu.py`` runs it; with ``torch.optim.SGD`` it would."""
    bench = load_benchmark("client_message_cpu")
    local = bench.run_child("local", str(tmp_path))
    assert local["dynamo"] is False
    assert bench.run_child("torch", str(tmp_path))["digest"] == local["digest"]
