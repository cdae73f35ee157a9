"""Distorted radar chart and match ratio (seed 000, claims 5-6; DESIGN.md steps 5-6).

Each compute node has one resource evaluation per axis (seed formula 4), in the seed's order
:data:`AXES` = C (CPU), G (GPU), M (memory), D (disk).

Geometry
--------
1. **Standardise** each axis over the nodes: ``s[d, r] = N[d, r] / max_d' N[d', r]``
   (an axis on which every node scores 0 stays 0).
2. **Axes in the chart.** By default all four axes, as the seed draws them: an axis on
   which no node scores (a CPU-only federation has no GPU) stays in the chart with every
   node at 0 on it, so it still shapes the areas. ``drop_empty_axes=True`` leaves such an
   axis out instead (the chart becomes a triangle; this changes the shares: two GPU-less
   nodes split 70/30 on four axes can split 63/37 on three). An axis whose length is zero
   (see 3) is always left out: it cannot hold any area. The ``k`` remaining axes keep the
   seed's relative order and are spread evenly, ``2*pi/k`` apart (the seed's 90 degrees
   when ``k = 4``; a triangle, 120 degrees apart, when one axis is left out).
3. **Distortion.** Compute axes (C, G) have length ``p_c`` (the model's compute-intensive
   operator share), storage axes (M, D) length ``p_m = 1 - p_c``.
4. **Areas.** A node's polygon has its vertex on axis ``i`` at radius ``a_i = s_i * L_i``; with
   ``k >= 3`` evenly spread axes its area is ``sin(2*pi/k)/2 * sum_i a_i * a_(i+1)`` (cyclic),
   and the chart's own area is the same sum over the axis lengths ``L_i``.
5. **Match ratio** (seed formula 6): ``m = S_node / S_radar`` in ``[0, 1]``. With all four axes
   and ``p_c + p_m = 1`` this is the closed form of DESIGN.md,
   ``m = p_c^2 s_C s_G + p_c p_m (s_G s_M + s_D s_C) + p_m^2 s_M s_D``.

Degenerate charts (fewer than three axes; our decision, the seed does not cover them)
    Two axes spread evenly would lie on one line (zero area for everyone), so two remaining
    axes are drawn 90 degrees apart: the polygon is the right triangle on the two vertices
    and ``m = s_1 * s_2``, which is also what the cyclic-sum formula gives. A single
    remaining axis has no area: ``m = s`` (the ratio of lengths). No axis at all (every
    evaluation is zero) is an :class:`~flower_edge.errors.InputError`.

Order-invariant variant
    The area depends on which axes are neighbours. Averaging both areas over every cyclic
    order of the ``k`` axes, each pair of axes is adjacent equally often, so
    ``m = sum_{i<j} a_i a_j / sum_{i<j} L_i L_j`` (ratio of the mean areas).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "AXES",
    "RadarChart",
    "match_ratios",
    "polygon_area",
    "radar_chart",
    "standardise",
]

#: resource axes in the seed's order: C, G, M, D
AXES: tuple[str, str, str, str] = ("cpu", "gpu", "memory", "disk")
_COMPUTE_AXES = frozenset({"cpu", "gpu"})


def _check_evaluations(evaluations: ArrayLike) -> NDArray[np.float64]:
    """Return ``evaluations`` as a float array ``(n_nodes, 4)`` or raise :class:`InputError`."""
    try:  # no dtype here: validate.numbers names an entry that is not a number
        arr = np.asarray(evaluations)
    except ValueError:  # a ragged list of rows
        raise InputError(
            f"evaluations must be a (n_nodes, {len(AXES)}) array of numbers with columns "
            f"{AXES}; its rows differ in length"
        ) from None
    if arr.ndim != 2 or arr.shape[1] != len(AXES):
        raise InputError(
            f"evaluations must have shape (n_nodes, {len(AXES)}) with columns {AXES}, "
            f"got shape {arr.shape}"
        )
    if arr.shape[0] == 0:
        raise InputError("evaluations: the node list is empty; need at least 1 node")
    return validate.numbers("evaluations", arr, low=0.0, columns=AXES, error=InputError)


def _check_share(compute_share: float) -> float:
    return validate.probability("compute_share", compute_share, error=InputError)


def standardise(evaluations: ArrayLike) -> NDArray[np.float64]:
    """Standardise resource evaluations per axis over the nodes.

    Parameters
    ----------
    evaluations : array-like, shape (n_nodes, 4)
        Resource evaluations ``N`` (seed formula 4), columns in :data:`AXES` order; finite
        and ``>= 0``.

    Returns
    -------
    numpy.ndarray, shape (n_nodes, 4)
        ``s[d, r] = N[d, r] / max_d' N[d', r]`` in ``[0, 1]``; 0 on an axis where every node
        scores 0.

    Raises
    ------
    InputError
        Wrong shape, no node, or a NaN, infinite or negative evaluation.
    """
    arr = _check_evaluations(evaluations)
    top = arr.max(axis=0)
    out: NDArray[np.float64] = np.zeros_like(arr)
    present = top > 0
    out[:, present] = arr[:, present] / top[present]
    return out


def polygon_area(radii: Sequence[float], angles: Sequence[float]) -> float:
    """Area of the polygon with one vertex per axis, by the shoelace formula.

    Parameters
    ----------
    radii : sequence of float
        Distance of each vertex from the centre, along its axis.
    angles : sequence of float
        Angle of each axis in radians, in drawing order.

    Returns
    -------
    float
        The (unsigned) area; 0 for fewer than three vertices.
    """
    r = np.asarray(radii, dtype=np.float64)
    a = np.asarray(angles, dtype=np.float64)
    if r.shape != a.shape:
        raise InputError(f"radii and angles must have the same length, got {r.shape} and {a.shape}")
    if r.size < 3:
        return 0.0
    x, y = r * np.cos(a), r * np.sin(a)
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)


@dataclass(frozen=True)
class RadarChart:
    """The distorted radar chart of a set of nodes.

    Attributes
    ----------
    axes : tuple of str
        Axes in the chart, in the seed's order (those left out are absent).
    lengths : tuple of float
        Length of each axis: ``p_c`` for cpu/gpu, ``p_m`` for memory/disk.
    angles : tuple of float
        Angle of each axis in radians (evenly spread; 90 degrees apart when two remain).
    scores : numpy.ndarray, shape (n_nodes, 4)
        Standardised scores on all four :data:`AXES` (left-out axes included, all 0).
    compute_share : float
        ``p_c``.
    """

    axes: tuple[str, ...]
    lengths: tuple[float, ...]
    angles: tuple[float, ...]
    scores: NDArray[np.float64]
    compute_share: float

    @property
    def memory_share(self) -> float:
        """``p_m = 1 - p_c``."""
        return 1.0 - self.compute_share

    def radii(self) -> NDArray[np.float64]:
        """Vertex radii ``s * L`` of every node on the chart's axes, shape (n_nodes, k)."""
        idx = [AXES.index(a) for a in self.axes]
        out: NDArray[np.float64] = self.scores[:, idx] * np.asarray(self.lengths)
        return out


def radar_chart(
    evaluations: ArrayLike, compute_share: float, *, drop_empty_axes: bool = False
) -> RadarChart:
    """Build the distorted radar chart of the nodes (see the module docstring).

    Parameters
    ----------
    evaluations : array-like, shape (n_nodes, 4)
        Resource evaluations, columns in :data:`AXES` order.
    compute_share : float
        ``p_c`` in ``[0, 1]``, the model's compute-intensive operator share.
    drop_empty_axes : bool (default: False)
        Leave out an axis on which no node scores above zero (the seed keeps all four).

    Raises
    ------
    InputError
        Bad evaluations (see :func:`standardise`), ``compute_share`` outside ``[0, 1]``, or no
        axis left in the chart (every evaluation is 0 on the axes of non-zero length).
    """
    scores = standardise(evaluations)
    p_c = _check_share(compute_share)
    p_m = 1.0 - p_c
    axes: list[str] = []
    lengths: list[float] = []
    scored = False
    for j, name in enumerate(AXES):
        length = p_c if name in _COMPUTE_AXES else p_m
        empty = not scores[:, j].max() > 0
        scored = scored or (length > 0 and not empty)
        if length > 0 and not (drop_empty_axes and empty):
            axes.append(name)
            lengths.append(length)
    if not scored:
        raise InputError(
            "evaluations: no node scores above zero on any resource axis of non-zero length "
            f"(compute_share={p_c}); need at least one evaluation > 0"
        )
    k = len(axes)
    step = math.pi / 2 if k <= 2 else 2 * math.pi / k
    angles = tuple(math.pi / 2 - i * step for i in range(k))  # first axis up, clockwise
    return RadarChart(tuple(axes), tuple(lengths), angles, scores, p_c)


def _cyclic_pair_sum(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``sum_i v_i * v_(i+1)`` over cyclic neighbours, along the last axis (k >= 3)."""
    out: NDArray[np.float64] = np.sum(values * np.roll(values, -1, axis=-1), axis=-1)
    return out


def _all_pair_sum(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``sum_{i<j} v_i * v_j`` along the last axis."""
    total = values.sum(axis=-1)
    out: NDArray[np.float64] = (total * total - np.sum(values * values, axis=-1)) / 2.0
    return out


def match_ratios(
    evaluations: ArrayLike,
    compute_share: float,
    *,
    order_invariant: bool = False,
    drop_empty_axes: bool = False,
) -> NDArray[np.float64]:
    """Match ratio of each node to the model, ``m = S_node / S_radar`` (seed formula 6).

    Parameters
    ----------
    evaluations : array-like, shape (n_nodes, 4)
        Resource evaluations ``N`` (seed formula 4), columns in :data:`AXES` order.
    compute_share : float
        ``p_c`` in ``[0, 1]``; storage axes get ``p_m = 1 - p_c``.
    order_invariant : bool (default: False)
        Average both areas over every cyclic order of the axes instead of the seed's order.
    drop_empty_axes : bool (default: False)
        Leave out an axis on which no node scores above zero (see :func:`radar_chart`).

    Returns
    -------
    numpy.ndarray, shape (n_nodes,)
        Match ratios in ``[0, 1]``. On four axes a node that scores on fewer than two
        neighbouring axes has no area: its ratio is 0.

    Raises
    ------
    InputError
        See :func:`radar_chart`.
    """
    chart = radar_chart(evaluations, compute_share, drop_empty_axes=drop_empty_axes)
    radii = chart.radii()
    lengths = np.asarray(chart.lengths)
    k = len(chart.axes)
    ratios: NDArray[np.float64]
    if k == 1:
        ratios = radii[:, 0] / lengths[0]
    elif k == 2 or order_invariant:
        ratios = _all_pair_sum(radii) / float(_all_pair_sum(lengths))
    else:
        ratios = _cyclic_pair_sum(radii) / float(_cyclic_pair_sum(lengths))
    return np.clip(ratios, 0.0, 1.0)
