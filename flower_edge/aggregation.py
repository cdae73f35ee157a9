"""Weighted aggregation of local models with O(model) leave-one-out (seed 001, steps 3-4).

The new global model is ``x = sum_i w_i x_i / sum_i w_i``. :class:`WeightedSum` accumulates
the running sum ``S = sum_i w_i x_i`` in float64 as updates arrive (accumulate, don't
collect), so that aggregating is one division, and the global model without update ``i`` is a
subtraction, ``x_{-i} = (S - w_i x_i) / (W - w_i)``: O(model) instead of the O(model x K) of a
full re-aggregation. The subtraction needs ``x_i``, so each buffered update is kept once, as
received (float32 stays float32, no float64 copy, not even a copy): memory is
O(model x buffer) plus one float64 model for ``S`` and a 1 MiB scratch block.

Numerical care
--------------
* ``S`` holds ``sum_i (w_i / scale) x_i`` with ``scale`` a power of two above every weight
  (raised, with 8 bits of headroom, when a larger weight arrives; rescaling by a power of two
  is exact), so tiny decayed weights (down to ``MIN_DECAY``) neither underflow nor lose
  precision, huge ones cannot overflow, and only the ratios of the weights matter.
* Products ``w_i x_i`` and sums are float64 (the update is cast block by block).
* ``W - w_i`` is never formed by subtraction: it is the compensated sum (``math.fsum``) of the
  other weights.
* When update ``i`` dominates, ``S - w_i x_i`` cancels catastrophically: its absolute error is
  about ``eps * W * max|x|``, i.e. a relative error ``eps * W / (W - w_i)`` in ``x_{-i}``. When
  ``W - w_i <= CANCELLATION_GUARD * W`` (that error would exceed about 2e-10),
  :meth:`WeightedSum.mean_without` re-sums the other buffered updates instead (O(model x K),
  exact to float64 rounding).

Arrays whose reference dtype is not floating point (integer counters such as batch-norm's
``num_batches_tracked``, booleans) are averaged too and rounded to the nearest value (half to
even) when cast back, so they keep their dtype (a bool mask is a weighted majority vote);
Flower's FedAvg returns their float64 average instead. A sum of deltas of such arrays takes
int64 as their reference (:func:`flower_edge.arrays.delta_reference`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from flower_edge import validate
from flower_edge.arrays import NDArray, cast_like
from flower_edge.errors import InputError

__all__ = [
    "update_too_far",
    "CANCELLATION_GUARD",
    "Array",
    "WeightedSum",
    "check_update",
    "weighted_average",
]

Array = NDArray
"""The package's array alias (:data:`flower_edge.arrays.NDArray`), kept under its old name."""

CANCELLATION_GUARD: float = 1e-6
"""``mean_without(i)`` re-sums the others when ``W - w_i <= CANCELLATION_GUARD * W``."""

_NUMERIC_KINDS = "fiub"  # float, signed and unsigned integer, boolean


def _kind_label(dtype: np.dtype[Any]) -> str:
    return "float" if dtype.kind == "f" else "non-float"


def _all_finite(array: Array) -> bool:
    """Return whether every element of a float array is finite, without an O(model) mask."""
    # NaN and +-Inf propagate through a sum; a finite sum proves all elements finite. Only
    # when the sum is not finite (a NaN/Inf, or an overflow of huge values) is the element-wise
    # test needed. Summing in the array's own dtype is the fastest pass (no cast).
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.add.reduce(array, axis=None))
    if math.isfinite(total):
        return True
    return bool(np.isfinite(array).all())


def check_update(
    arrays: Sequence[Array], reference: Sequence[Array], *, check_finite: bool = True
) -> str | None:
    """Say why a local update cannot be aggregated against the reference model, if it cannot.

    Parameters
    ----------
    arrays : Sequence[numpy.ndarray]
        The update, one array per model tensor, in the reference's order.
    reference : Sequence[numpy.ndarray]
        The global model (only shapes and dtypes are read).
    check_finite : bool (default: True)
        Look for NaN/Inf (one pass over the update, the only O(model) part of the check).

    Returns
    -------
    str or None
        ``None`` when the update is fine; otherwise the reason, naming the first bad array
        index: wrong number of arrays, not an array, wrong shape, dtype of the other kind
        (float where the reference is non-float or the reverse, or not numeric), NaN or Inf,
        or (when the dtypes differ) values beyond the range of the reference dtype.
    """
    if len(arrays) != len(reference):
        return f"expected {len(reference)} arrays, got {len(arrays)}"
    for index, (array, ref) in enumerate(zip(arrays, reference, strict=True)):
        if not isinstance(array, np.ndarray):
            return f"array {index} is a {type(array).__name__}, not a numpy array"
        if array.shape != ref.shape:
            return f"array {index} has shape {array.shape}, expected {ref.shape}"
        if array.dtype.kind not in _NUMERIC_KINDS:
            return f"array {index} has non-numeric dtype {array.dtype}"
        if (array.dtype.kind == "f") != (ref.dtype.kind == "f"):
            return (
                f"array {index} has {_kind_label(array.dtype)} dtype {array.dtype}, "
                f"expected {_kind_label(ref.dtype)} like {ref.dtype}"
            )
        if check_finite and array.dtype.kind == "f" and not _all_finite(array):
            return f"array {index} contains NaN or Inf"
        if array.dtype != ref.dtype and array.size and not _fits(array, ref.dtype):
            return f"array {index} has values beyond the range of the reference dtype {ref.dtype}"
    return None


def update_too_far(arrays: Sequence[Array], reference: Sequence[Array], ratio: float) -> str | None:
    """Say why an update lies absurdly far from the reference model, if it does.

    A finite update can still wreck the model: ``3.4e38`` in every weight passes every other
    check. The distance is the L2 norm of ``arrays - reference`` over the floating-point
    arrays, in float64 (one pass, one array at a time); it is absurd beyond ``ratio`` times
    ``max(||reference||, 1)``, the norm over the same arrays. Call it after
    :func:`check_update` accepted ``arrays`` (same count, shapes and kinds).

    Parameters
    ----------
    arrays : Sequence[numpy.ndarray]
        The update (the local model), one array per model tensor, in the reference's order.
    reference : Sequence[numpy.ndarray]
        The global model the update is measured against.
    ratio : float
        ``LoopConfig.max_update_ratio``, ``> 0``.

    Returns
    -------
    str or None
        ``None`` when the update is within the bound; otherwise the reason, naming the array
        that moved farthest (``array i ...``) and both norms.
    """
    total = ref_total = 0.0
    worst, worst_index = -1.0, 0
    with np.errstate(over="ignore", invalid="ignore"):
        for index, (array, ref) in enumerate(zip(arrays, reference, strict=True)):
            if array.dtype.kind != "f" or not array.size:
                continue
            ref64 = np.asarray(ref, dtype=np.float64)
            moved = float(np.linalg.norm(np.asarray(array, dtype=np.float64) - ref64))
            ref_total += float(np.dot(ref64.ravel(), ref64.ravel()))
            total += moved * moved
            if not moved <= worst:
                worst, worst_index = moved, index
    distance, norm = math.sqrt(total), math.sqrt(ref_total)
    if distance <= ratio * max(norm, 1.0):
        return None
    return (
        f"array {worst_index} moved {worst:.3g} (L2; the update {distance:.3g} in all) from "
        f"the global model of norm {norm:.3g}: more than max_update_ratio {ratio:g} times "
        f"max(norm, 1)"
    )


def _fits(array: Array, dtype: np.dtype[Any]) -> bool:
    """Return whether the values of ``array`` are within the range of ``dtype``.

    Only read when the update's dtype differs from the reference's (a float64 update of a
    float32 model, an int64 counter of an int32 one): its average is cast back to ``dtype``
    and must not overflow to Inf or wrap around.
    """
    if dtype.kind == "b":
        return True
    info = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        low, high = float(np.min(array)), float(np.max(array))
    return bool(low >= float(info.min) and high <= float(info.max))


def _check_reference(reference: Sequence[Array]) -> list[Array]:
    if len(reference) == 0:
        raise InputError("reference model must have at least one array, got 0")
    out = []
    for index, ref in enumerate(reference):
        if not isinstance(ref, np.ndarray) or ref.dtype.kind not in _NUMERIC_KINDS:
            raise InputError(
                f"reference array {index} must be a numeric numpy array (float, int, uint "
                f"or bool), got {getattr(ref, 'dtype', type(ref).__name__)}"
            )
        out.append(ref)
    return out


def _check_weight(weight: float, name: str = "weight") -> float:
    return validate.number(name, weight, low=0.0, low_inclusive=False, error=InputError)


class WeightedSum:
    """Running weighted sum of local models, with O(model) leave-one-out.

    Parameters
    ----------
    reference : Sequence[numpy.ndarray]
        The global model the updates are checked against (shapes and dtypes); the averages
        are cast back to its dtypes.

    Notes
    -----
    Each added update is stored by reference, not copied: do not modify its arrays
    afterwards. Memory: the buffered updates (as received) plus one float64 model.
    Adding costs O(model) (validation included); :meth:`mean` and :meth:`mean_without` cost
    O(model) each. :meth:`add` validates the update with :func:`check_update`: to reject and
    log a bad reply, catch its :class:`~flower_edge.errors.InputError` (the message carries the
    reason) rather than calling :func:`check_update` first, which would read the update twice.
    """

    def __init__(self, reference: Sequence[Array]) -> None:
        self._reference = _check_reference(reference)
        self._sum: list[npt.NDArray[np.float64]] = [
            np.zeros(ref.shape, dtype=np.float64) for ref in self._reference
        ]
        self._updates: dict[Hashable, Sequence[Array]] = {}
        self._weights: dict[Hashable, float] = {}
        self._scale = 0.0  # a power of two above every weight; S = sum_i (w_i / scale) x_i
        # One block of float64 products, reused by _axpy: no allocation per add.
        self._scratch = np.empty(_BLOCK, dtype=np.float64)

    # ------------------------------------------------------------ state
    @property
    def keys(self) -> tuple[Hashable, ...]:
        """Keys of the added updates, in the order they were added."""
        return tuple(self._weights)

    @property
    def weights(self) -> dict[Hashable, float]:
        """The weight of each update, as given to :meth:`add` (a copy)."""
        return dict(self._weights)

    @property
    def total_weight(self) -> float:
        """``W``, the compensated sum of the weights (0.0 when empty)."""
        return math.fsum(self._weights.values())

    @property
    def reference(self) -> list[Array]:
        """The reference model (a shallow copy of the list)."""
        return list(self._reference)

    def update(self, key: Hashable) -> Sequence[Array]:
        """Return the buffered update added under ``key``."""
        self._require(key)
        return self._updates[key]

    def __len__(self) -> int:
        return len(self._weights)

    def __contains__(self, key: object) -> bool:
        return key in self._weights

    def _require(self, key: Hashable) -> None:
        if key not in self._weights:
            raise InputError(f"no update with key {key!r} in the sum (keys: {list(self._weights)})")

    # ------------------------------------------------------------ accumulate
    def add(
        self, key: Hashable, arrays: Sequence[Array], weight: float, *, checked: bool = False
    ) -> None:
        """Add one local model to the sum.

        Parameters
        ----------
        key : Hashable
            Identifies the update (e.g. the node id); unique within the sum.
        arrays : Sequence[numpy.ndarray]
            The local model; must pass :func:`check_update` against the reference.
        weight : float
            ``w_i``; finite and ``> 0``.
        checked : bool (default: False)
            The caller already ran :func:`check_update` on this update against the same
            reference and got ``None``: skip the NaN/Inf pass (counts, shapes and dtype kinds
            are always checked; they are cheap).

        Raises
        ------
        InputError
            Duplicate key, bad weight, or an update that fails :func:`check_update`
            (the message carries its reason). Nothing is added then.
        """
        if key in self._weights:
            raise InputError(f"duplicate update key {key!r}: each update is added once")
        w = _check_weight(weight)
        reason = check_update(arrays, self._reference, check_finite=not checked)
        if reason is not None:
            raise InputError(f"update {key!r} rejected: {reason}")
        if w > self._scale:
            self._rescale(w)
        relative = w / self._scale
        for total, array in zip(self._sum, arrays, strict=True):
            _axpy(total, relative, array, self._scratch)
        self._updates[key] = arrays
        self._weights[key] = w

    # ------------------------------------------------------------ results
    def mean(self) -> list[Array]:
        """Return the weighted mean ``S / W``, cast to the reference dtypes.

        Raises
        ------
        InputError
            No update was added.
        """
        if not self._weights:
            raise InputError("cannot average: no update was added")
        denominator = self._relative_total()
        return [
            _combine(total, None, 0.0, denominator, ref, self._scratch)
            for total, ref in zip(self._sum, self._reference, strict=True)
        ]

    def mean_without(self, key: Hashable) -> list[Array]:
        """Return the weighted mean of all updates but ``key``: ``(S - w_i x_i) / (W - w_i)``.

        A subtraction, O(model); when update ``key`` dominates the sum
        (``W - w_i <= CANCELLATION_GUARD * W``) the other updates are re-summed instead to
        avoid catastrophic cancellation (see the module notes).

        Parameters
        ----------
        key : Hashable
            The update to leave out.

        Returns
        -------
        list[numpy.ndarray]
            The leave-one-out model, cast to the reference dtypes.

        Raises
        ------
        InputError
            Unknown key, or ``key`` is the only update (nothing would be left).
        """
        self._require(key)
        if len(self._weights) == 1:
            raise InputError(f"cannot leave out {key!r}: it is the only update (need at least 2)")
        relative = self._weights[key] / self._scale
        others = self._relative_total(without=(key,))
        if others <= CANCELLATION_GUARD * (others + relative):
            return self._resum_without(key)
        out = []
        for total, array, ref in zip(self._sum, self._updates[key], self._reference, strict=True):
            out.append(_combine(total, array, relative, others, ref, self._scratch))
        return out

    def means_without(self) -> Iterator[tuple[Hashable, list[Array]]]:
        """Yield ``(key, mean_without(key))`` for every update, in insertion order."""
        for key in self.keys:
            yield key, self.mean_without(key)

    # ------------------------------------------------------------ internals
    def _rescale(self, weight: float) -> None:
        """Raise the scale above ``weight``, with headroom, to a power of two.

        Relative weights stay in ``(0, 1]`` (a product cannot overflow), the rescaling
        of ``S`` is exact (a power of two) and, thanks to the headroom, happens only when a
        weight is ``2**RESCALE_HEADROOM`` times above the previous scale, not at every new
        maximum (each rescaling is a pass over ``S``).
        """
        exponent = min(math.frexp(weight)[1] + _RESCALE_HEADROOM, sys.float_info.max_exp - 1)
        scale = math.ldexp(1.0, exponent)
        if self._scale > 0.0:
            factor = self._scale / scale
            for total in self._sum:
                total *= factor
        self._scale = scale

    def _relative_total(self, without: tuple[Hashable, ...] = ()) -> float:
        scale = self._scale
        return math.fsum(w / scale for k, w in self._weights.items() if k not in without)

    def _resum_without(self, key: Hashable) -> list[Array]:
        others = {k: w for k, w in self._weights.items() if k != key}
        top = max(others.values())  # scale by the others' largest: no underflow
        relative = {k: w / top for k, w in others.items()}
        denominator = math.fsum(relative.values())
        out = []
        for index, ref in enumerate(self._reference):
            acc = np.zeros(ref.shape, dtype=np.float64)
            for other, weight in relative.items():
                _axpy(acc, weight, self._updates[other][index], self._scratch)
            acc /= denominator
            out.append(cast_like(acc, ref))
        return out


_RESCALE_HEADROOM = 8  # bits of headroom of the scale of WeightedSum


_BLOCK = 1 << 17  # elements per block of _axpy: 1 MiB of float64, stays in cache


def _axpy(
    total: npt.NDArray[np.float64],
    weight: float,
    array: Array,
    scratch: npt.NDArray[np.float64],
) -> None:
    """``total += weight * array`` in float64 (product and sum), in place.

    Works block by block through ``scratch`` (float64, ``_BLOCK`` elements): cast a block of
    the array into it, scale it, add it to the matching block of ``total``. The block stays in
    cache, so this is about 1.7x faster than numpy's mixed-dtype ``np.add`` over whole arrays,
    and it allocates nothing. ``total`` must be C-contiguous (the running sums are).
    """
    flat_total = total.reshape(-1)
    flat = array.reshape(-1)
    for start in range(0, flat.size, _BLOCK):
        stop = min(start + _BLOCK, flat.size)
        block = scratch[: stop - start]
        block[...] = flat[start:stop]
        block *= weight
        flat_total[start:stop] += block


def _combine(
    total: npt.NDArray[np.float64],
    array: Array | None,
    weight: float,
    denominator: float,
    ref: Array,
    scratch: npt.NDArray[np.float64],
) -> Array:
    """Return ``(total - weight * array) / denominator`` cast to ``ref``'s dtype.

    Without an array: ``total / denominator``. Non-float dtypes are rounded half to even.
    Block by block through ``scratch``, as :func:`_axpy`: the float64 intermediate never
    exists at model size; the only allocation is the result.
    """
    out = np.empty(ref.shape, dtype=ref.dtype)
    flat_out = out.reshape(-1)
    flat_total = total.reshape(-1)
    flat = None if array is None else array.reshape(-1)
    rounding = ref.dtype.kind != "f"
    for start in range(0, flat_total.size, _BLOCK):
        stop = min(start + _BLOCK, flat_total.size)
        block = scratch[: stop - start]
        if flat is None:
            block[...] = flat_total[start:stop]
        else:
            block[...] = flat[start:stop]
            block *= -weight
            block += flat_total[start:stop]
        block /= denominator
        if rounding:
            np.rint(block, out=block)
        flat_out[start:stop] = block
    return out


def weighted_average(updates: Sequence[Sequence[Array]], weights: Sequence[float]) -> list[Array]:
    """Return ``sum_i w_i x_i / sum_i w_i`` by brute force (the reference implementation).

    Sums in float64 over all updates at once and casts back to the first update's dtypes
    (non-floats rounded half to even), as :meth:`WeightedSum.mean` does.

    Parameters
    ----------
    updates : Sequence[Sequence[numpy.ndarray]]
        The local models, all of the same shapes.
    weights : Sequence[float]
        One finite weight ``> 0`` per update.

    Raises
    ------
    InputError
        No update, counts of updates and weights differ, a bad weight, or an update that
        fails :func:`check_update` against the first one.
    """
    if len(updates) == 0:
        raise InputError("cannot average: no update given")
    if len(updates) != len(weights):
        raise InputError(f"got {len(updates)} updates but {len(weights)} weights")
    ws = [_check_weight(w, f"weights[{i}]") for i, w in enumerate(weights)]
    reference = _check_reference(updates[0])
    for i, update in enumerate(updates):
        reason = check_update(update, reference)
        if reason is not None:
            raise InputError(f"updates[{i}] rejected: {reason}")
    top = max(ws)
    relative = np.asarray([w / top for w in ws])  # as WeightedSum: no underflow of tiny weights
    total = math.fsum(relative.tolist())
    out = []
    for index, ref in enumerate(reference):
        stacked = np.stack([np.asarray(u[index], dtype=np.float64) for u in updates])
        summed = np.tensordot(relative, stacked, axes=1) / total
        out.append(cast_like(np.asarray(summed, dtype=np.float64), ref))
    return out
