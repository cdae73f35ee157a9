"""Fast conversion between torch state dicts and Flower ArrayRecords (same bytes as Flower's).

Flower stores each :class:`~flwr.app.Array` as the bytes of ``np.save`` (``stype`` "numpy.ndarray")
and converts with ``np.save`` / ``np.load`` per tensor, whose header handling dominates for the
small models of edge devices. These helpers produce and read exactly the same bytes:

- encoding: the ``.npy`` header of a (dtype, shape) is computed once by ``np.save`` and cached;
  an array's data is ``header + tobytes()`` (what ``np.save`` writes for a C-ordered array);
- decoding: the payload is the last ``nbytes`` of the data, read with ``np.frombuffer`` and
  copied; anything unusual (another ``stype``, object dtypes, Fortran order, a size that does
  not match) falls back to Flower's own ``Array.numpy()``.
"""

from __future__ import annotations

import io
import math
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

__all__ = [
    "decode_array",
    "encode_array",
    "first_non_finite",
    "record_to_state_dict",
    "state_dict_to_record",
]

_NUMPY_STYPE = "numpy.ndarray"


@lru_cache(maxsize=1024)
def _header(dtype: str, shape: tuple[int, ...]) -> bytes:
    probe = np.zeros(shape, dtype=np.dtype(dtype))
    buffer = io.BytesIO()
    np.save(buffer, probe, allow_pickle=False)
    data = buffer.getvalue()
    return data[: len(data) - probe.nbytes]


@lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype[Any]) -> str:
    return str(dtype)


def encode_array(array: np.ndarray[Any, Any]) -> Array:
    """Return the Flower Array of ``array`` (byte-identical to ``Array(array)`` if C-ordered)."""
    if array.dtype.hasobject:
        return Array(array)
    contiguous = array if array.flags.c_contiguous else np.ascontiguousarray(array)
    header = _header(contiguous.dtype.str, tuple(contiguous.shape))
    return Array(
        dtype=_dtype_name(contiguous.dtype),
        shape=tuple(contiguous.shape),
        stype=_NUMPY_STYPE,
        data=header + contiguous.tobytes(),
    )


def _view(array: Array) -> np.ndarray[Any, Any] | None:
    """Return a read-only view of the array's payload, or ``None`` when it is unusual."""
    if array.stype != _NUMPY_STYPE:
        return None
    try:
        dtype = np.dtype(array.dtype)
    except TypeError:
        return None
    shape = tuple(int(s) for s in array.shape)
    nbytes = dtype.itemsize * math.prod(shape)
    data = array.data
    if dtype.hasobject or nbytes > len(data):
        return None
    header = data[: len(data) - nbytes]
    if header != _header(dtype.str, shape):  # Fortran order, another .npy version, ...
        return None
    flat = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=len(header))
    return flat.reshape(shape)


def decode_array(array: Array) -> np.ndarray[Any, Any]:
    """Return a writable numpy copy of a Flower Array (``Array.numpy()`` when unusual)."""
    view = _view(array)
    return array.numpy() if view is None else view.copy()


def first_non_finite(record: ArrayRecord) -> str | None:
    """Return the name of the first array of ``record`` holding NaN or Inf, else ``None``."""
    for name, array in record.items():
        values = _view(array)
        if values is None:
            values = array.numpy()
        if values.dtype.kind in "fc" and not np.isfinite(values).all():
            return name
    return None


def state_dict_to_record(state_dict: dict[str, torch.Tensor]) -> ArrayRecord:
    """Return the ArrayRecord of a torch state dict (same bytes as ``ArrayRecord(sd)``)."""
    return ArrayRecord({k: encode_array(v.detach().cpu().numpy()) for k, v in state_dict.items()})


def record_to_state_dict(record: ArrayRecord) -> dict[str, torch.Tensor]:
    """Return the torch state dict of an ArrayRecord (``record.to_torch_state_dict()``)."""
    return {k: torch.from_numpy(decode_array(v)) for k, v in record.items()}
