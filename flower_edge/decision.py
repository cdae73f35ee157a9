r"""The client's abandon rule of seed 001 (paragraphs 5, 8, 9): pure maths, no Flower types.

A node that is still training from an older global model when a newer one arrives computes a
weighted mean of its resources and its value,

.. math:: \mathrm{score} = \alpha R + (1 - \alpha) V,

and abandons its stale work (restarting from the new global model) iff ``score >= theta``;
otherwise it finishes the stale job and sends that result.

What the seed fixes and what this module chooses
------------------------------------------------
``V`` (fixed by the seed)
    The node's value in the latest valuation results if it took part in that aggregation
    (contribution over total contribution, so values sum to 1 over the participants), else
    its latest known value. A node never valued gets a **neutral** value,
    :func:`neutral_value`: the mean value of the latest results (``1 / participants``,
    about ``1 / (K + 1)``), or :data:`NEUTRAL_VALUE` before any results exist. Not 0: a
    node that has not been valued yet has not been shown to contribute nothing.
``R`` (a preset of the seed; our choice)
    A linear ``[0, 1]`` scale. The match ratio ``m`` of seed 000 is an area ratio, which
    grows with the *square* of the standardised scores (median 0.02-0.13 in the bundled
    scenarios), so ``R`` is its square root relative to the best node,
    :func:`linear_resources`: ``R_d = sqrt(m_d / max_d' m_d')``, the scale factor by which
    node d's polygon is a shrunken copy of the best node's when the shapes agree (a node
    whose scores are half the best node's on every axis has ``R = 0.5``). On a device it is
    scaled by the node's current availability in ``[0, 1]``.
``alpha`` (a preset; our choice)
    :data:`DEFAULT_ALPHA` = 0.5: resources and value weigh the same.
``theta`` (a preset; our choice)
    Derived by the server from the live distributions, :func:`derive_theta`: the
    ``quantile`` (:data:`DEFAULT_QUANTILE` = 0.5) of the current scores
    ``alpha * R_i + (1 - alpha) * V_i`` of the live nodes (``R_i`` scaled by the
    availability the node last reported, as the client scales it). With the median, the
    better-scoring half of the nodes drop stale work; a fixed threshold cannot do that,
    because ``V`` shrinks as ``1 / (K + 1)``
    and ``R``'s spread depends on the federation. The server sends it with every train
    message (:data:`flower_edge.wire.THETA`) unless the user set one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_QUANTILE",
    "NEUTRAL_VALUE",
    "Decision",
    "decide",
    "derive_theta",
    "linear_resources",
    "neutral_value",
    "node_value",
]

#: weight of the resource term ``R`` against the value ``V`` in the abandon score
DEFAULT_ALPHA: float = 0.5
#: quantile of the live scores that the server takes as theta (0.5: the median)
DEFAULT_QUANTILE: float = 0.5
#: value of a node never valued when no valuation results exist yet (no aggregation so far,
#: or a strategy that sends no values): the middle of ``[0, 1]``, the same for every node
NEUTRAL_VALUE: float = 0.5


@dataclass(frozen=True)
class Decision:
    """Outcome of the abandon rule at one preemption point.

    Attributes
    ----------
    score : float
        ``alpha * resource + (1 - alpha) * value``.
    abandon : bool
        ``score >= theta``: drop the stale job and restart from the newer global model.
    value : float
        ``V`` used in the score.
    resource : float
        ``R`` used in the score.
    participated : bool
        Whether ``value`` came from the latest results (the node took part in that
        aggregation) rather than from its latest known value or the default.
    """

    score: float
    abandon: bool
    value: float
    resource: float
    participated: bool


def _check_unit(name: str, x: float) -> float:
    return validate.probability(name, x, error=InputError)


def _unit_vector(name: str, values: object) -> NDArray[np.float64]:
    """Return a flat list of numbers in ``[0, 1]`` as a float array, or raise InputError."""
    if isinstance(values, str) or not hasattr(values, "__len__"):
        raise InputError(f"{name} must be a sequence of numbers, got {type(values).__name__}")
    try:  # no dtype here: validate.numbers names an entry that is not a number
        raw = np.asarray(values)
    except ValueError:  # a ragged nested list
        raise InputError(f"{name} must be a flat sequence of numbers, got {values!r}") from None
    if raw.ndim > 1:
        raise InputError(f"{name} must be a flat sequence of numbers, got shape {raw.shape}")
    return validate.numbers(name, raw.reshape(-1), low=0.0, high=1.0, error=InputError)


def neutral_value(values: Sequence[float]) -> float:
    """Return the value of a node that was never valued.

    Parameters
    ----------
    values : Sequence[float]
        Values of the latest valuation results, each in ``[0, 1]``; empty when none exist.

    Returns
    -------
    float
        The mean of ``values`` (``1 / participants`` when they sum to 1), or
        :data:`NEUTRAL_VALUE` when ``values`` is empty.

    Raises
    ------
    InputError
        If a value is outside ``[0, 1]``.
    """
    checked = [_check_unit("every entry of values", v) for v in values]
    if not checked:
        return NEUTRAL_VALUE
    return math.fsum(checked) / len(checked)


def node_value(
    node_id: int,
    value_node_ids: Sequence[int],
    values: Sequence[float],
    last_known: float | None,
    *,
    default: float | None = None,
) -> tuple[float, bool]:
    """Return the node's value ``V`` and whether it took part in the latest aggregation.

    Parameters
    ----------
    node_id : int
        This node's id (the id the server uses).
    value_node_ids : Sequence[int]
        Node ids of the latest valuation results (parallel to ``values``); empty before the
        first aggregation.
    values : Sequence[float]
        Values of those nodes, each in ``[0, 1]``.
    last_known : float | None
        The node's latest known value from earlier results, ``None`` if it was never valued.
    default : float, optional
        Value of a node never valued; ``None`` (default): :func:`neutral_value` of
        ``values``.

    Returns
    -------
    tuple[float, bool]
        ``(value, participated)``: its value in the latest results if it took part, else
        ``(last_known, False)``, else ``(default or the neutral value, False)``.

    Raises
    ------
    InputError
        If the two sequences differ in length, a node id repeats, or a value is outside
        ``[0, 1]``.
    """
    if len(value_node_ids) != len(values):
        raise InputError(
            f"value-node-ids and values must have the same length, got "
            f"{len(value_node_ids)} and {len(values)}"
        )
    if len(set(value_node_ids)) != len(value_node_ids):
        raise InputError(f"value-node-ids must not repeat a node id, got {list(value_node_ids)}")
    neutral = neutral_value(values)  # also checks every value
    for nid, v in zip(value_node_ids, values, strict=True):
        if nid == node_id:
            return float(v), True
    if last_known is not None:
        return _check_unit("last known value", last_known), False
    return _check_unit("default value", neutral if default is None else default), False


def linear_resources(match_ratios: Sequence[float] | NDArray[np.float64]) -> NDArray[np.float64]:
    """Put match ratios on the linear ``[0, 1]`` resource scale ``R`` of the abandon rule.

    Parameters
    ----------
    match_ratios : sequence of float
        Match ratios ``m_d`` in ``[0, 1]`` of every node (seed formula 6), at least one.

    Returns
    -------
    numpy.ndarray
        ``R_d = sqrt(m_d / max_d' m_d')``: 1 for the best-matched node; all 1 when every
        ratio is 0 (nothing tells the nodes apart).

    Raises
    ------
    InputError
        If the list is empty, not a flat sequence of numbers, or a ratio is outside
        ``[0, 1]``.
    """
    m = _unit_vector("match_ratios", match_ratios)
    if m.size == 0:
        raise InputError("match_ratios: the node list is empty; need at least 1 node")
    top = float(m.max())
    if top == 0.0:
        return np.ones_like(m)
    out: NDArray[np.float64] = np.clip(np.sqrt(m / top), 0.0, 1.0)
    return out


def derive_theta(
    resources: Sequence[float] | NDArray[np.float64],
    values: Sequence[float] | NDArray[np.float64],
    alpha: float = DEFAULT_ALPHA,
    quantile: float = DEFAULT_QUANTILE,
) -> float:
    """Derive the update threshold from the live distributions of ``R`` and ``V``.

    Parameters
    ----------
    resources : sequence of float
        ``R_i`` in ``[0, 1]`` of every live node.
    values : sequence of float
        ``V_i`` in ``[0, 1]`` of the same nodes (their latest known or neutral values).
    alpha : float (default: 0.5)
        Weight of the resource term, in ``[0, 1]``.
    quantile : float (default: 0.5)
        Which quantile of the scores is the threshold, in ``[0, 1]``: a node stale at the
        moment abandons iff its score is at least that quantile, so about a fraction
        ``1 - quantile`` of the nodes would abandon.

    Returns
    -------
    float
        The ``quantile`` of the scores ``alpha * R_i + (1 - alpha) * V_i``, interpolated
        linearly between order statistics (``numpy.quantile``'s default): with the scores
        sorted, ``s[j] + (h - j) (s[j + 1] - s[j])`` at ``h = quantile * (n - 1)``,
        ``j = floor(h)``.

    Raises
    ------
    InputError
        If the sequences are empty, not flat sequences of numbers or differ in length, or a
        number is out of its range.
    """
    a = _check_unit("alpha", alpha)
    q = _check_unit("quantile", quantile)
    r = _unit_vector("resources", resources)
    v = _unit_vector("values", values)
    if r.size == 0 or r.size != v.size:
        raise InputError(
            f"resources and values must be non-empty and of the same length, got {r.size} "
            f"and {v.size}"
        )
    scores = a * r + (1.0 - a) * v
    return float(np.quantile(scores, q))


def decide(
    alpha: float, theta: float, resource: float, value: float, participated: bool = True
) -> Decision:
    """Apply the abandon rule ``score = alpha * R + (1 - alpha) * V >= theta``.

    Parameters
    ----------
    alpha : float
        Weight of the resource term, in ``[0, 1]``.
    theta : float
        Update threshold, ``>= 0`` (``inf`` never abandons; ``0`` always does).
    resource : float
        ``R`` in ``[0, 1]``.
    value : float
        ``V`` in ``[0, 1]``.
    participated : bool (default: True)
        Carried into the record (see :func:`node_value`).

    Returns
    -------
    Decision
        The score and whether to abandon (``score >= theta``). Ties abandon; a score within
        a relative 1e-12 of ``theta`` counts as a tie, so that rounding in the weighted mean
        (``0.2 * 0.3 + 0.8 * 0.7 = 0.6199999999999999``) does not flip a hand-set threshold.

    Raises
    ------
    InputError
        If a parameter is outside its range or ``participated`` is not a bool (the message
        names it).
    """
    a = _check_unit("alpha", alpha)
    r = _check_unit("resource", resource)
    v = _check_unit("value", value)
    validate.number("theta", theta, low=0.0, finite=False, error=InputError)
    participated = validate.boolean("participated", participated, error=InputError)
    score = a * r + (1.0 - a) * v
    # guard the tie score == theta against rounding in the weighted mean (e.g. 0.5*0.2+0.5*0.4)
    abandon = score >= theta or math.isclose(score, theta, rel_tol=1e-12, abs_tol=1e-15)
    return Decision(score=score, abandon=abandon, value=v, resource=r, participated=participated)
