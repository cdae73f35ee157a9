"""The one numpy array alias of the package, and the cast back to a model's dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NDArray", "cast_like"]

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
        half to even, first; a float ``values`` already of that dtype is not copied.
    """
    if ref.dtype.kind != "f":
        values = np.rint(values)
    return values.astype(ref.dtype, copy=False)
