"""Exceptions of the flower-edge package: one base class, specific subclasses."""

from __future__ import annotations

__all__ = ["ConfigError", "FlowerEdgeError", "InputError", "ProfilingError", "TaskError"]


class FlowerEdgeError(Exception):
    """Base class of every error raised on purpose by flower-edge."""


class InputError(FlowerEdgeError, ValueError):
    """Bad user or client input; the message names the field and the allowed range."""


class ConfigError(InputError):
    """An invalid setting (constructor argument, run-config key, CLI option)."""


class ProfilingError(FlowerEdgeError):
    """A resource benchmark could not run (unwritable folder, interrupted run, ...)."""


class TaskError(FlowerEdgeError):
    """The user's task failed: ``model_fn``, ``load_data``, ``loss_fn`` or their data.

    The message names the function or the data at fault and the cause (e.g. a label outside
    the model's outputs in the first batch of train data).
    """
