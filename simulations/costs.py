"""Per-sample training cost of a model, from its operator profile (seed 000 step 1).

:func:`job_cost` runs the model's operator analysis on an example batch and turns it into a
:class:`~simulations.devices.JobCost`: the FLOPs of the compute-intensive operators and the
bytes of the memory-access-intensive operators of one *training* sample (forward and
backward), the bytes of one input sample, and the bytes of the model's arrays (one transfer).

The analysis is :func:`flower_edge.operators.analyze_model` when that module is present. Its
operators above the mean intensity are compute-intensive, the others memory-intensive; when
it traced the forward pass only, the backward pass is taken as twice the forward
(``BACKWARD_FACTOR``, the usual estimate: two matmuls per forward matmul).

Without ``flower_edge.operators`` (a partial install) a coarse fallback is used: FLOPs from
:class:`torch.utils.flop_counter.FlopCounterMode` over forward and backward (matmul and conv
only; they are the compute-intensive operators of these models) and bytes from the outputs of
every other leaf module (read and written once forward, twice backward).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from functools import lru_cache
from logging import WARNING
from typing import Any

from flower_edge.errors import InputError
from simulations.devices import JobCost

__all__ = ["BACKWARD_FACTOR", "ModelCost", "job_cost", "model_cost"]

#: training cost over forward cost when only the forward pass was analysed
BACKWARD_FACTOR = 3.0


class ModelCost:
    """The cost figures of one model on one input shape (see :func:`model_cost`).

    Attributes
    ----------
    cost : JobCost
        Per-sample training cost and transfer size.
    compute_share : float
        ``p_c``: count-based share of compute-intensive operators (seed 000 claim 2).
    source : str
        ``"operators"`` or ``"fallback"``.
    """

    def __init__(self, cost: JobCost, compute_share: float, source: str) -> None:
        self.cost = cost
        self.compute_share = compute_share
        self.source = source

    def __repr__(self) -> str:
        return f"ModelCost({self.cost}, compute_share={self.compute_share:.3f}, {self.source})"


def _analyze_with_operators(model: Any, batch: Any) -> tuple[float, float, float, bool] | None:
    """Return (compute FLOPs, memory bytes, p_c, includes backward) or None when absent."""
    try:
        operators = importlib.import_module("flower_edge.operators")
    except ModuleNotFoundError:
        return None
    analyze: Callable[..., Any] | None = getattr(operators, "analyze_model", None)
    if analyze is None:
        return None
    profile = analyze(model, batch)
    ops = list(profile.operators)
    compute = sum(float(op.flops) for op in ops if op.kind == "compute")
    memory = sum(float(op.bytes) for op in ops if op.kind != "compute")
    share = float(profile.compute_share)
    backward = bool(getattr(profile, "includes_backward", getattr(profile, "backward", False)))
    return compute, memory, share, backward


def _analyze_fallback(model: Any, batch: Any) -> tuple[float, float, float, bool]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    leaves = [m for m in model.modules() if not list(m.children())]
    heavy = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    out_bytes = [0.0]
    n_compute = sum(isinstance(m, heavy) for m in leaves)

    def hook(module: Any, _inputs: Any, output: Any) -> None:
        if not isinstance(module, heavy) and isinstance(output, torch.Tensor):
            out_bytes[0] += 2.0 * output.numel() * output.element_size()  # read + write

    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with FlopCounterMode(display=False) as counter:
            loss = model(batch).sum()
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    flops = float(counter.get_total_flops())
    memory = out_bytes[0] * BACKWARD_FACTOR
    share = n_compute / len(leaves) if leaves else 1.0
    return flops, memory, share, True


@lru_cache(maxsize=16)
def model_cost(model_name: str, input_shape: tuple[int, ...], seed: int = 0) -> ModelCost:
    """Return the cost of training one sample of a bundled model.

    Parameters
    ----------
    model_name : str
        Bundled model (``flower_edge.models``).
    input_shape : tuple[int, ...]
        Shape of an example batch, batch first (e.g. ``(16, 64)``).
    seed : int (default: 0)
        Seed of the model's initial weights and the example batch.

    Raises
    ------
    InputError
        Unknown model, or a shape the model cannot take.
    """
    import torch

    from flower_edge.models import build_model

    if len(input_shape) < 2 or any(d < 1 for d in input_shape):
        raise InputError(f"input_shape must be batch-first with every dim >= 1, got {input_shape}")
    torch.manual_seed(seed)
    model = build_model(model_name)
    batch = torch.randn(*input_shape)
    try:
        found = _analyze_with_operators(model, batch)
        source = "operators"
        if found is None:
            found = _analyze_fallback(model, batch)
            source = "fallback"
    except (RuntimeError, ValueError) as exc:
        raise InputError(
            f"model {model_name!r} cannot run on input shape {input_shape}: {exc}"
        ) from None
    compute, memory, share, backward = found
    factor = 1.0 if backward else BACKWARD_FACTOR
    n = input_shape[0]
    sample_bytes = 4.0 * math.prod(input_shape[1:])
    model_bytes = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    cost = JobCost(
        compute_flops=compute * factor / n,
        memory_bytes=memory * factor / n,
        sample_bytes=sample_bytes,
        model_bytes=int(model_bytes),
    )
    if source == "fallback":
        from flwr.common.logger import log

        log(WARNING, "flower_edge.operators not available: coarse cost of %s", model_name)
    return ModelCost(cost, min(max(share, 0.0), 1.0), source)


def job_cost(model_name: str, num_features: int, batch_size: int = 16) -> JobCost:
    """Return the per-sample :class:`JobCost` of a bundled model on flat features."""
    return model_cost(model_name, (batch_size, num_features)).cost
