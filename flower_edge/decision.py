r"""The client's abandon rule of seed 001 (paragraphs 5, 8, 9): pure maths, no Flower types.

A node that is still training from an older global model when a newer one arrives computes a
weighted mean of its resources and its value,

.. math:: \mathrm{score} = \alpha R + (1 - \alpha) V,

and abandons its stale work (restarting from the new global model) iff ``score >= theta``;
otherwise it finishes the stale job and sends that result.

``V`` is the node's value in the latest valuation results if it took part in that aggregation,
else its latest known value, else :data:`DEFAULT_VALUE` (a node never valued is assumed to have
contributed nothing yet, so its score rests on its resources alone). ``R`` in ``[0, 1]`` is the
node's local storage/compute resource: by default its match ratio scaled by its current
availability (see ``clients``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from flower_edge.errors import InputError

__all__ = ["DEFAULT_VALUE", "Decision", "decide", "node_value"]

#: value of a node that has never been valued (first round, or never aggregated so far)
DEFAULT_VALUE: float = 0.0


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
    if isinstance(x, bool) or not isinstance(x, int | float) or not 0.0 <= x <= 1.0:
        raise InputError(f"{name} must be a number in [0, 1], got {x!r}")
    return float(x)


def node_value(
    node_id: int,
    value_node_ids: Sequence[int],
    values: Sequence[float],
    last_known: float | None,
    *,
    default: float = DEFAULT_VALUE,
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
    default : float (default: 0.0)
        Value of a node never valued (:data:`DEFAULT_VALUE`).

    Returns
    -------
    tuple[float, bool]
        ``(value, participated)``: its value in the latest results if it took part, else
        ``(last_known, False)``, else ``(default, False)``.

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
    for v in values:
        _check_unit("every entry of values", v)
    for nid, v in zip(value_node_ids, values, strict=True):
        if nid == node_id:
            return float(v), True
    if last_known is not None:
        return _check_unit("last known value", last_known), False
    return _check_unit("default value", default), False


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
        If a parameter is outside its range (the message names it).
    """
    a = _check_unit("alpha", alpha)
    r = _check_unit("resource", resource)
    v = _check_unit("value", value)
    if isinstance(theta, bool) or not isinstance(theta, int | float) or not theta >= 0.0:
        raise InputError(f"theta must be a number >= 0 (inf allowed), got {theta!r}")
    score = a * r + (1.0 - a) * v
    # guard the tie score == theta against rounding in the weighted mean (e.g. 0.5*0.2+0.5*0.4)
    abandon = score >= theta or math.isclose(score, theta, rel_tol=1e-12, abs_tol=1e-15)
    return Decision(score=score, abandon=abandon, value=v, resource=r, participated=participated)
