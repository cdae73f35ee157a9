"""The model of a node's process: one instance per thread, loaded from and read as arrays.

:class:`ModelSlot` checks received arrays against the model (names and shapes) before loading
them, so arrays that do not fit get a clear :class:`~flower_edge.errors.InputError`.
"""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord
from torch import nn

from clients.arrays import record_to_state_dict, state_dict_to_record
from clients.optim import LocalOptimizer
from flower_edge.errors import InputError

__all__ = ["ModelSlot", "plain_state"]


def plain_state(model: nn.Module) -> bool:
    """Whether ``model``'s state dict is exactly its tensors (no custom load or save logic)."""
    base = nn.Module._load_from_state_dict
    for m in model.modules():
        if type(m)._load_from_state_dict is not base:  # e.g. BatchNorm's versioned buffers
            return False
        if m._load_state_dict_pre_hooks or m._load_state_dict_post_hooks:
            return False
        if m._state_dict_hooks or m._state_dict_pre_hooks:
            return False
    return True


class ModelSlot:
    """One model instance per process and thread, reused across messages.

    ``tensors`` is the model's state dict, kept when loading it is a plain copy into each
    tensor (:func:`plain_state`): its tensors share storage with the parameters and buffers,
    so reading them gives the current weights and ``copy_`` into them loads new ones.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.tensors: dict[str, torch.Tensor] | None = (
            dict(model.state_dict()) if plain_state(model) else None
        )
        self.optimizer: LocalOptimizer | None = None

    def state(self) -> dict[str, torch.Tensor]:
        """Return the current state dict (tensors sharing the model's storage)."""
        return self.tensors if self.tensors is not None else dict(self.model.state_dict())

    def load(self, arrays: ArrayRecord, what: str) -> None:
        """Load ``arrays`` after checking names and shapes (InputError if unfit).

        Arrays named ``"0"``, ``"1"``, ... (``ArrayRecord(list_of_ndarrays)``) are matched to
        the model's ``state_dict`` by position.
        """
        expected = self.state()
        keys = list(arrays.keys())
        if keys != list(expected):
            if keys == [str(i) for i in range(len(expected))]:
                arrays = ArrayRecord({name: arrays[str(i)] for i, name in enumerate(expected)})
            elif set(keys) != set(expected):
                missing = sorted(set(expected) - set(keys))[:5]
                extra = sorted(set(keys) - set(expected))[:5]
                raise InputError(
                    f"{what} do not fit the local model: missing {missing}, unexpected {extra}"
                )
        if any(nn.parameter.is_lazy(t) for t in expected.values()):
            expected = self._materialize(arrays, what)
        for name, tensor in expected.items():
            shape = tuple(arrays[name].shape)
            if shape != tuple(tensor.shape):
                raise InputError(
                    f"{what} do not fit the local model: {name!r} has shape {list(shape)}, "
                    f"the model expects {list(tensor.shape)}"
                )
        values = record_to_state_dict(arrays)
        if self.tensors is None:
            self.model.load_state_dict(values, strict=True)
            return
        with torch.no_grad():
            for name, tensor in self.tensors.items():
                tensor.copy_(values[name])

    def _materialize(self, arrays: ArrayRecord, what: str) -> dict[str, torch.Tensor]:
        """Give a model's lazy parameters (``nn.LazyLinear``, ...) the shapes of ``arrays``.

        Loading a state dict initialises them (their shape cannot be read before); the
        parameter objects stay the same, so an optimizer built over them still holds them.
        """
        try:
            self.model.load_state_dict(record_to_state_dict(arrays), strict=True)
        except Exception as exc:  # the module's own load hooks
            raise InputError(f"{what} do not fit the local model: {exc}") from exc
        return self.state()

    def first_non_finite(self) -> str | None:
        """Return the name of the first weight or buffer holding NaN or Inf, else ``None``."""
        for name, tensor in self.state().items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                return name
        return None

    def arrays(self) -> ArrayRecord:
        """Return the current weights as an ArrayRecord."""
        return state_dict_to_record(self.state())
