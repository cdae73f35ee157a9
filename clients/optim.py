"""The client's SGD: ``torch.optim.SGD``'s arithmetic without its one-off import of dynamo.

On a real deployment Flower starts a ClientApp process per message. Building a
``torch.optim`` optimizer in a fresh process imports ``torch._dynamo`` (its methods are
wrapped in ``torch._disable_dynamo``, which imports it on the first call): about 1.2 s of
CPU on this project's 2-core host, as much as importing torch itself, and most of what a
digits MLP job costs beyond the import (``benchmarks/client_message_cpu.py``,
``docs/benchmarks/client.md``). :class:`LocalSGD` is the same update, written out:

``g = grad + weight_decay * p``; ``b = g`` on the first step, then
``b = momentum * b + (1 - dampening) * g``; ``p = p - lr * b`` (``g + momentum * b`` with
Nesterov), per parameter, in the order and with the calls of torch's single-tensor SGD
(``torch.optim.sgd._single_tensor_sgd``), which torch itself uses for parameters on the CPU.
The results are bit for bit torch's (``tests/test_client_optim.py``), and so is the state
dict (``{"state": {index: {"momentum_buffer": tensor}}, "param_groups": [...]}``) that the
ClientApp stores between the slices of a job (:mod:`clients.state`).

:func:`build_sgd` returns it for parameters on the CPU and ``torch.optim.SGD`` otherwise
(on an accelerator torch steps with its multi-tensor kernels, and a CUDA process pays far more
than the import to start).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import torch

__all__ = ["LocalOptimizer", "LocalSGD", "build_sgd"]


class LocalOptimizer(Protocol):
    """What the ClientApp uses of an optimizer: ``torch.optim.Optimizer`` and :class:`LocalSGD`."""

    state: Any
    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of the parameters."""
        ...

    def step(self) -> Any:
        """Take one step."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Return the per-parameter state by index and the groups' settings."""
        ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...


class LocalSGD:
    """Stochastic gradient descent with momentum and weight decay, as ``torch.optim.SGD``.

    Parameters
    ----------
    params : iterable of torch.Tensor
        The parameters to train (one group).
    lr : float
        Learning rate, ``>= 0``.
    momentum : float (default: 0.0)
        Momentum factor, ``>= 0``.
    dampening : float (default: 0.0)
        Dampening of the momentum, ``>= 0``.
    weight_decay : float (default: 0.0)
        L2 penalty, ``>= 0``.
    nesterov : bool (default: False)
        Nesterov momentum (needs ``momentum > 0`` and ``dampening == 0``).

    Raises
    ------
    ValueError
        On the settings ``torch.optim.SGD`` rejects, with its messages, or no parameters.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        for name, value in (("learning rate", lr), ("momentum", momentum)):
            if value < 0.0:
                raise ValueError(f"Invalid {name}: {value}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        group_params = list(params)
        if not group_params:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": group_params,
                "lr": lr,
                "momentum": momentum,
                "dampening": dampening,
                "weight_decay": weight_decay,
                "nesterov": nesterov,
                "maximize": False,
            }
        ]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients (``None``, as ``torch.optim``'s default, or zeros)."""
        for p in self._params():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.requires_grad_(False)
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """Take one SGD step on every parameter with a gradient."""
        for group in self.param_groups:
            lr, momentum = group["lr"], group["momentum"]
            dampening, decay = group["dampening"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad if not group["maximize"] else -p.grad
                if decay != 0:
                    grad = grad.add(p, alpha=decay)
                if momentum != 0:
                    buf = self.state.get(p, {}).get("momentum_buffer")
                    if buf is None:
                        buf = grad.detach().clone()
                        self.state.setdefault(p, {})["momentum_buffer"] = buf
                    else:
                        buf.mul_(momentum).add_(grad, alpha=1 - dampening)
                    grad = grad.add(buf, alpha=momentum) if group["nesterov"] else buf
                p.add_(grad, alpha=-lr)

    def state_dict(self) -> dict[str, Any]:
        """Return ``{"state": {index: {...}}, "param_groups": [...]}`` as torch packs it."""
        index = {id(p): i for i, p in enumerate(self._params())}
        groups = []
        start = 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(packed)
        state = {index[id(p)]: dict(entries) for p, entries in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` (copies of its tensors, as each parameter's dtype).

        Tensors are cast to their parameter's dtype and device.

        Raises
        ------
        ValueError
            If the groups do not match this optimizer's, or a state names no parameter.
        """
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(g["params"]) != len(own["params"])
            for g, own in zip(groups, self.param_groups, strict=True)
        ):
            raise ValueError(
                "loaded state dict has a different number of parameter groups or parameters"
            )
        params = self._params()
        state: dict[torch.Tensor, dict[str, Any]] = {}
        for key, entries in state_dict["state"].items():
            if not isinstance(key, int) or not 0 <= key < len(params):
                raise ValueError(f"optimizer state of parameter {key!r}: no such parameter")
            p = params[key]
            state[p] = {
                name: value.to(dtype=p.dtype, device=p.device, copy=True)
                if isinstance(value, torch.Tensor) and p.is_floating_point()
                else value.clone()
                if isinstance(value, torch.Tensor)
                else value
                for name, value in entries.items()
            }
        for group, loaded in zip(self.param_groups, groups, strict=True):
            group.update({k: v for k, v in loaded.items() if k != "params"})
        self.state = state


def build_sgd(
    params: Iterable[torch.Tensor], lr: float, momentum: float, weight_decay: float
) -> LocalOptimizer:
    """Return :class:`LocalSGD` for parameters on the CPU, ``torch.optim.SGD`` otherwise."""
    listed = list(params)
    if all(p.device.type == "cpu" for p in listed):
        return LocalSGD(listed, lr=lr, momentum=momentum, weight_decay=weight_decay)
    return torch.optim.SGD(listed, lr=lr, momentum=momentum, weight_decay=weight_decay)
