"""Leave-one-out values of the participants of an aggregation (seed 001, step 4).

Node ``i``'s *contribution* is ``metric(x) - metric(x_{-i})``: the test metric of the new global
model ``x`` minus that of the global re-aggregated without ``i`` (for a loss, where lower is
better, the sign flips: ``loss(x_{-i}) - loss(x)``). Its *value* is its contribution over the
sum of contributions.

The seed leaves undefined what happens when contributions are negative or sum to zero. The
rule here (:func:`values_from_contributions`):

1. negative contributions are clamped to 0 (a node that hurt the model is worth nothing, not a
   negative share that would inflate the others above 1);
2. if the clamped contributions sum to 0 (every contribution ``<= 0``, e.g. all nodes sent the
   same model, or the metric is saturated), every node gets the equal value ``1 / n``;
3. otherwise ``value_i = max(c_i, 0) / sum_j max(c_j, 0)``.

Values are in ``[0, 1]`` and sum to 1; a single participant gets 1.

Exact leave-one-out costs K evaluations of the test set (the re-aggregations are subtractions,
:meth:`flower_edge.aggregation.WeightedSum.mean_without`). :func:`first_order_contributions`
is a cheap approximation: one gradient of the test loss at ``x`` and K dot products.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from flower_edge import validate
from flower_edge.aggregation import Array, WeightedSum
from flower_edge.errors import InputError

__all__ = [
    "first_order_contributions",
    "leave_one_out_values",
    "values_from_contributions",
]


def _finite_vector(values: Sequence[float], name: str) -> npt.NDArray[np.float64]:
    checked = [validate.number(f"{name}[{i}]", v, error=InputError) for i, v in enumerate(values)]
    return np.asarray(checked, dtype=np.float64).reshape(len(checked))


def values_from_contributions(contributions: Sequence[float]) -> npt.NDArray[np.float64]:
    """Turn leave-one-out contributions into values that sum to 1.

    Parameters
    ----------
    contributions : Sequence[float]
        One finite contribution per participant (at least one).

    Returns
    -------
    numpy.ndarray
        float64 values in ``[0, 1]`` summing to 1: negatives clamped to 0, then normalised;
        equal values ``1 / n`` when no contribution is positive (module docstring).

    Raises
    ------
    InputError
        Empty input, or a NaN, infinite or non-numeric contribution (the message names its
        index).
    """
    if len(contributions) == 0:
        raise InputError("contributions must hold at least one participant, got 0")
    clamped = np.maximum(_finite_vector(contributions, "contributions"), 0.0)
    top = float(clamped.max())
    if top <= 0.0:
        return np.full(len(clamped), 1.0 / len(clamped))
    try:
        total = math.fsum(clamped.tolist())
    except OverflowError:  # fsum raises where the running sum passes the largest float
        total = math.inf
    if math.isfinite(total):  # the seed's c_i / sum_j c_j, as computed since the first session
        out: npt.NDArray[np.float64] = clamped / total
        return out
    relative = clamped / top  # huge contributions: scaled first, so the sum cannot overflow
    scaled: npt.NDArray[np.float64] = relative / math.fsum(relative.tolist())
    return scaled


def leave_one_out_values(
    metric_full: float,
    metrics_without: Sequence[float],
    *,
    higher_is_better: bool = True,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Return the contributions and values from the test metric with and without each node.

    Parameters
    ----------
    metric_full : float
        Test metric of the new global model ``x``.
    metrics_without : Sequence[float]
        Test metric of ``x_{-i}`` for each participant ``i``, in participant order.
    higher_is_better : bool (default: True)
        ``True`` for an accuracy-like metric (contribution ``metric(x) - metric(x_{-i})``),
        ``False`` for a loss (contribution ``metric(x_{-i}) - metric(x)``).

    Returns
    -------
    tuple[numpy.ndarray, numpy.ndarray]
        ``(contributions, values)``, values by :func:`values_from_contributions`.

    Raises
    ------
    InputError
        A metric is NaN, infinite or not a number, or ``metrics_without`` is empty.
    """
    full = _finite_vector([metric_full], "metric_full")[0]
    without = _finite_vector(metrics_without, "metrics_without")
    if without.size == 0:
        raise InputError("metrics_without must hold at least one participant, got 0")
    contributions = full - without if higher_is_better else without - full
    return contributions, values_from_contributions(contributions.tolist())


def _float_layers(gradient: Sequence[Array], reference: Sequence[Array]) -> list[int]:
    """Check the gradient on the float tensors of the model; return their indices."""
    if len(gradient) != len(reference):
        raise InputError(f"gradient has {len(gradient)} arrays, expected {len(reference)}")
    layers = []
    for index, ref in enumerate(reference):
        if ref.dtype.kind != "f":
            continue  # integer counters have no gradient: ignored
        g = gradient[index]
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
            raise InputError(
                f"gradient[{index}] must be a float numpy array, got "
                f"{getattr(g, 'dtype', type(g).__name__)}"
            )
        if g.shape != ref.shape:
            raise InputError(f"gradient[{index}] has shape {g.shape}, expected {ref.shape}")
        if not np.isfinite(g).all():
            raise InputError(f"gradient[{index}] contains NaN or Inf")
        layers.append(index)
    return layers


def first_order_contributions(
    gradient: Sequence[Array], total: WeightedSum
) -> npt.NDArray[np.float64]:
    """Approximate the loss-based leave-one-out contributions from one gradient.

    With ``x`` the weighted mean of the updates and ``g`` the gradient of the test loss at
    ``x``, the contribution of update ``i`` is

        ``loss(x_{-i}) - loss(x)  ~=  g . (x_{-i} - x)  =  w_i / (W - w_i) * g . (x - x_i)``

    (a first-order Taylor expansion; exact for a loss linear in the parameters, off by
    ``0.5 d^T H d`` with ``d = x_{-i} - x`` for a quadratic one). It costs one gradient of the
    test loss at the new global model (about three forward evaluations) plus K O(model) dot
    products, instead of K evaluations. It is an approximation: trust it when the updates are
    close to each other and no update dominates (``w_i / (W - w_i)`` small); positive means
    that removing ``i`` would raise the loss, i.e. ``i`` helped, the same sign convention as
    :func:`leave_one_out_values`.

    Parameters
    ----------
    gradient : Sequence[numpy.ndarray]
        ``dloss/dx`` at ``total.mean()``, one array per model tensor (shapes of the
        reference); entries of non-float tensors (integer counters) are ignored.
    total : WeightedSum
        The aggregation, with at least two updates.

    Returns
    -------
    numpy.ndarray
        float64 contributions, in the order of ``total.keys``.

    Raises
    ------
    InputError
        Fewer than two updates, or a gradient of the wrong count, or, on a float tensor, of
        the wrong shape or dtype kind or with NaN/Inf (the message names the index).
    """
    if len(total) < 2:
        raise InputError(f"leave-one-out needs at least 2 updates, got {len(total)}")
    layers = _float_layers(gradient, total.reference)
    mean = total.mean()
    weights = total.weights
    top = max(weights.values())
    relative = {key: w / top for key, w in weights.items()}
    out = np.empty(len(total), dtype=np.float64)
    for position, key in enumerate(total.keys):
        update = total.update(key)
        dot = math.fsum(
            float(np.dot(gradient[i].reshape(-1), (mean[i] - update[i]).reshape(-1)))
            for i in layers
        )
        others = math.fsum(r for k, r in relative.items() if k != key)
        out[position] = relative[key] / others * dot
    return out
