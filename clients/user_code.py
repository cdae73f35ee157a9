"""Calls into the user's task, whose failures become a :class:`TaskError` that names the cause.

A user's ``model_fn``, ``load_data`` or ``loss_fn`` may raise, return the wrong thing, or give
data that does not fit the model (a wrong feature width or dtype, labels outside the model's
outputs). Raw, such errors surfaced as chained torch tracebacks; here they become one
:class:`~flower_edge.errors.TaskError` whose message names the function or the batch at fault,
and the ClientApp answers it with an error reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from flwr.app import Context
from torch import nn
from torch.utils.data import Dataset

from flower_edge.errors import FlowerEdgeError, TaskError

__all__ = ["call_load_data", "call_loss_fn", "call_model_fn", "describe", "forward_loss"]

#: characters of a caught exception's message kept in a TaskError
MESSAGE_CHARS = 200


def describe(exc: BaseException) -> str:
    """Return ``"Type: first line of the message"``, cut to :data:`MESSAGE_CHARS`."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > MESSAGE_CHARS:
        text = text[: MESSAGE_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _map_style(data: object) -> bool:
    return hasattr(data, "__len__") and hasattr(data, "__getitem__")


def _is_array(value: object) -> bool:
    return isinstance(value, torch.Tensor | np.ndarray)


def _refuse_bare_arrays(name: str, data: object) -> None:
    """Refuse arrays where a data set of ``(features, label)`` items belongs.

    A tensor, or a ``(features, labels)`` pair of tensors, has ``__len__`` and
    ``__getitem__`` too, but its items are rows (or whole arrays), not samples: training
    failed later on with a collate error that did not name the cause.
    """
    if _is_array(data):
        shape = list(getattr(data, "shape", ()))
        raise TaskError(
            f"load_data's {name} data must be a data set of (features, label) items, got a "
            f"bare {type(data).__name__} of shape {shape}: wrap features and labels in "
            f"torch.utils.data.TensorDataset(features, labels)"
        )
    if isinstance(data, tuple | list) and len(data) > 0 and _is_array(data[0]):
        shapes = ", ".join(str(list(getattr(a, "shape", ()))) for a in data[:3])
        raise TaskError(
            f"load_data's {name} data must be a data set of (features, label) items, got a "
            f"{type(data).__name__} of {len(data)} arrays (shapes {shapes}): wrap features "
            f"and labels in torch.utils.data.TensorDataset(features, labels)"
        )


def call_load_data(
    load_data: Callable[[Context], Any], ctx: Context
) -> tuple[Dataset[Any], Dataset[Any]]:
    """Call ``load_data(ctx)`` and check that it returned ``(train, test)`` map-style data sets.

    Raises
    ------
    TaskError
        If ``load_data`` raised (other than a flower-edge error, passed on) or returned
        anything else.
    """
    try:
        loaded = load_data(ctx)
    except FlowerEdgeError:
        raise
    except Exception as exc:
        raise TaskError(f"load_data raised {describe(exc)}") from exc
    if not isinstance(loaded, tuple | list) or len(loaded) != 2:
        got = type(loaded).__name__
        if isinstance(loaded, tuple | list):
            got = f"a {got} of {len(loaded)} items"
        raise TaskError(f"load_data must return (train, test), got {got}")
    for name, data in zip(("train", "test"), loaded, strict=True):
        _refuse_bare_arrays(name, data)
        if not _map_style(data):
            raise TaskError(
                f"load_data's {name} data must be a map-style data set (with __len__ and "
                f"__getitem__, e.g. a TensorDataset), got {type(data).__name__}"
            )
    return loaded[0], loaded[1]


def _module(name: str, factory: Callable[[], Any]) -> nn.Module:
    try:
        built = factory()
    except FlowerEdgeError:
        raise
    except Exception as exc:
        raise TaskError(f"{name} raised {describe(exc)}") from exc
    if not isinstance(built, nn.Module):
        raise TaskError(f"{name} must return a torch.nn.Module, got {type(built).__name__}")
    return built


def call_model_fn(model_fn: Callable[[], Any]) -> nn.Module:
    """Return ``model_fn()``, checked to be an ``nn.Module`` (:class:`TaskError` if not)."""
    return _module("model_fn", model_fn)


def call_loss_fn(loss_fn: Callable[[], Any]) -> nn.Module:
    """Return ``loss_fn()``, checked to be an ``nn.Module`` (:class:`TaskError` if not)."""
    return _module("loss_fn", loss_fn)


def _shape(t: torch.Tensor) -> str:
    return f"{list(t.shape)} ({str(t.dtype).removeprefix('torch.')})"


def _weight_dtype(model: nn.Module) -> torch.dtype | None:
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return None


def _forward_failed(model: nn.Module, x: torch.Tensor, exc: Exception, where: str) -> str:
    weights = _weight_dtype(model)
    if x.is_floating_point() and weights is not None and x.dtype != weights:
        return (
            f"features of dtype {str(x.dtype).removeprefix('torch.')} do not match the model's "
            f"{str(weights).removeprefix('torch.')} weights: convert them in load_data "
            f"(e.g. x.float()) ({where}; {describe(exc)})"
        )
    return f"features of shape {_shape(x)} do not fit model_fn's model: {describe(exc)} ({where})"


def _loss_failed(
    x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, exc: Exception, where: str
) -> str:
    if out.dim() >= 1 and y.dim() >= 1 and out.shape[0] != y.shape[0]:
        return (
            f"features of shape {_shape(x)} do not fit model_fn's model: it gave "
            f"{out.shape[0]} rows of outputs for {y.shape[0]} labels ({where})"
        )
    integer = not y.is_floating_point() and not y.is_complex() and y.dtype != torch.bool
    if integer and out.dim() >= 2 and y.numel() > 0:
        classes = out.shape[1]
        low, high = int(y.min()), int(y.max())
        if high >= classes or low < 0:
            bad = high if high >= classes else low
            return f"label {bad} is outside the model's {classes} outputs ({where})"
    if y.is_floating_point() or (integer and y.dtype != torch.int64):
        return (  # e.g. int32 labels, numpy's default integer on Windows
            f"labels of dtype {str(y.dtype).removeprefix('torch.')} do not fit the loss "
            f"(class labels are integers, torch.int64): {describe(exc)} ({where})"
        )
    return (
        f"the loss failed on outputs of shape {_shape(out)} and labels of shape {_shape(y)}: "
        f"{describe(exc)} ({where})"
    )


def forward_loss(
    model: nn.Module, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor, where: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(model(x), loss_fn(model(x), y))``; a failure names the batch and its cause.

    Parameters
    ----------
    model, loss_fn : nn.Module
        The user's model and loss.
    x, y : torch.Tensor
        A batch of features and labels.
    where : str
        The batch, for the message (e.g. ``"the first batch of train data"``).

    Raises
    ------
    TaskError
        If the forward pass or the loss raised: the features that do not fit the model, or
        the labels that do not fit its outputs or the loss.
    """
    try:
        out = model(x)
    except Exception as exc:
        raise TaskError(_forward_failed(model, x, exc, where)) from exc
    if not isinstance(out, torch.Tensor):
        raise TaskError(
            f"model_fn's model must return a tensor of logits, got {type(out).__name__} ({where})"
        )
    try:
        loss = loss_fn(out, y)
    except Exception as exc:
        raise TaskError(_loss_failed(x, y, out, exc, where)) from exc
    if not isinstance(loss, torch.Tensor):
        raise TaskError(f"loss_fn's loss must return a tensor, got {type(loss).__name__} ({where})")
    return out, loss
