"""The one numpy array alias of the package, and the cast back to a model's dtypes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NDArray", "cast_like", "delta_reference"]

NDArray = npt.NDArray[Any]
"""A numpy array of any dtype (model parameters, updates, gradients)."""


def cast_like(values: NDArray, ref: NDArray) -> NDArray:
    """Cast a float average back to the dtype of ``ref``.

    Parameters
    ----------
    values : numpy.ndarray
        The values to cast, usually a float64 average or step.
    ref : numpy.ndarray
        The array whose dtype the result takes (a global model's array).

    Returns
    -------
    numpy.ndarray
        ``values`` as ``ref.dtype``. Non-floating dtypes (integer counters such as
        batch-norm's ``num_batches_tracked``, booleans) are rounded to the nearest value,
        half to even, then clipped to the dtype's range (``[0, 1]`` for booleans), so that a
        step past the range saturates instead of wrapping around (``-1`` would be ``255``
        as uint8 and ``True`` as bool); a float ``values`` already of that dtype is not
        copied. Always an array, 0-d ones included (numpy's arithmetic on 0-d arrays gives
        scalars, which an ``ArrayRecord`` refuses). A float value beyond a narrower float
        dtype's range (float64 ``1e5`` for a float16 model, a server step with ``server_lr``
        above 1 near float16's 65504) saturates at that dtype's largest finite value
        instead of turning into an infinity that every later step would carry; NaN stays
        NaN.
    """
    if ref.dtype.kind != "f":
        low, high = _bounds(ref.dtype)
        values = np.clip(np.rint(values), low, high)
        return np.asarray(values).astype(ref.dtype, copy=False)  # 0-d: an array, not a scalar
    try:
        with np.errstate(over="raise"):  # no extra pass on the usual path
            return np.asarray(values).astype(ref.dtype, copy=False)
    except FloatingPointError:
        top = float(np.finfo(ref.dtype).max)
        return np.asarray(np.clip(values, -top, top)).astype(ref.dtype)


def _bounds(dtype: np.dtype[Any]) -> tuple[float, float]:
    """Return the float64 range of a non-float dtype whose every value casts back exactly."""
    if dtype.kind == "b":
        return 0.0, 1.0
    info = np.iinfo(dtype)
    high = float(info.max)
    if high > info.max:  # (u)int64's max rounds up to 2**63 (2**64), which does not cast back
        high = float(np.nextafter(high, 0.0))
    return float(info.min), high


def delta_reference(arrays: Sequence[NDArray]) -> list[NDArray]:
    """Return the reference dtypes of a running sum of deltas ``x_i - x_base`` of ``arrays``.

    Float arrays stand as they are; a non-float array (bool mask, uint8, int32 counter)
    stands as int64, since its deltas may be negative or beyond its own range (a bool that
    turns off is ``-1``). Only shapes and dtypes are read: the int64 stand-ins are
    read-only broadcasts of 0, no copy of the model.

    Parameters
    ----------
    arrays : Sequence[numpy.ndarray]
        The global model the deltas are taken from.

    Returns
    -------
    list[numpy.ndarray]
        One array per model array, of its shape.
    """
    out = []
    for array in arrays:
        a = np.asarray(array)
        out.append(a if a.dtype.kind == "f" else np.broadcast_to(np.int64(0), a.shape))
    return out
