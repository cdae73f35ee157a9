"""The notes that ``flower-edge plan`` prints beside a plan: suspect ratings, no radar area.

Split out of :mod:`flower_edge.cli_plan` (which re-exports these names) to keep it small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["SUSPECT_RATING"]

_RESOURCES = ("cpu", "gpu", "memory", "disk")


#: a node rated above this many times the median of the other nodes on a resource gets a
#: note: a claim that big is more likely a broken or dishonest profile than a device
SUSPECT_RATING = 1e4


def _median_of_positive_others(column: NDArray[np.float64]) -> NDArray[np.float64]:
    """Return, for each entry, the median of the other entries that are > 0 (0 if none).

    One sort, then O(1) per entry: dropping the entry at sorted position ``k`` from the
    ``m`` positive values leaves ``q[j] = p[j + (j >= k)]``, whose median is read off at
    ``(m - 2) // 2`` and ``(m - 1) // 2``. Equal to ``np.median`` of the others (the mean of
    the two middle values when their count is even), O(n log n) instead of O(n^2).
    """
    import numpy as np

    positive = np.sort(column[column > 0])
    m = positive.size
    out = np.zeros(column.shape, dtype=np.float64)
    if m == 0:
        return out
    # an entry <= 0 is not among the positive values: its others' median is theirs
    if m % 2:
        out[:] = positive[m // 2]
    else:
        with np.errstate(over="ignore"):
            out[:] = (positive[m // 2 - 1] + positive[m // 2]) / 2.0
    rated = np.flatnonzero(column > 0)
    if m == 1:
        out[rated] = 0.0  # no other positive value
        return out
    k = np.searchsorted(positive, column[rated])  # one copy of a tie is as good as another
    lo, hi = (m - 2) // 2, (m - 1) // 2  # the middle of the m - 1 values left
    a = positive[lo + (lo >= k)]
    b = positive[hi + (hi >= k)]
    with np.errstate(over="ignore"):
        out[rated] = a if lo == hi else (a + b) / 2.0
    return out


def _suspect_ratings(ids: Sequence[str], ev: NDArray[np.float64]) -> list[str]:
    """Return a note for each node rated far above the others on a resource.

    A node is compared with the median of the other nodes' ratings > 0 on each resource
    (:func:`_median_of_positive_others`, O(n log n) for n nodes).
    """
    import numpy as np

    out: list[str] = []
    if len(ids) < 2:
        return out
    for r, resource in enumerate(_RESOURCES):
        column = ev[:, r]
        medians = _median_of_positive_others(column)
        with np.errstate(over="ignore"):  # a median near the float range: inf, as in Python
            far = (medians > 0) & (column > SUSPECT_RATING * medians)
        for d in np.flatnonzero(far):
            median = float(medians[d])
            out.append(
                f"node {ids[int(d)]}: its {resource} rating {column[d]:.3g} is "
                f"{column[d] / median:.3g}x the other nodes' median ({median:.3g}); check "
                "its profile, or cap every node with --max-share-fraction"
            )
    return out


def _zero_length_axes(compute_share: float) -> str:
    """Say which axes ``p_c`` 0 or 1 gives length 0 (``""`` for a ``p_c`` strictly between).

    Found by a CLI probe: with ``--compute-share 1`` GPU-less nodes rated on cpu, memory and
    disk got "which gives no radar area; ... pass --drop-empty-axes", naming neither the
    cause (p_m = 0: the memory and disk axes have length 0) nor a fix that works.
    """
    if compute_share >= 1.0:
        return " (p_c = 1 gives the memory and disk axes length 0: only cpu and gpu count)"
    if compute_share <= 0.0:
        return " (p_c = 0 gives the cpu and gpu axes length 0: only memory and disk count)"
    return ""


def _no_area(
    ids: Sequence[str],
    ev: NDArray[np.float64],
    ratios: NDArray[np.float64],
    shaped: NDArray[np.bool_],
    dropped: bool,
    compute_share: float = 0.5,
    helped: NDArray[np.bool_] | None = None,
    observed: Sequence[bool] | None = None,
) -> list[str]:
    """Return a note for each node whose match ratio is 0 (it gets no samples).

    ``shaped[d]`` says whether node ``d``'s rated axes span a radar area (its ratio with
    every rating > 0 set to 1): if so its ratio is 0 only because its scores are negligible
    next to the best node's (the area underflows), and the note says so instead of
    pointing at the axes. ``helped[d]`` (default: every node) says whether
    ``--drop-empty-axes`` would give node ``d`` an area: the note suggests it only then.
    A ``compute_share`` of 0 or 1 is named as the cause where it leaves two axes length 0.
    ``observed[d]`` (default: none) says whether node ``d``'s observations give it a time
    model: it then gets no samples from the initial split, but the rebalancing may move it
    some (the note said "so no samples" beside a node given 637 of 1000: CLI probe).
    """
    import numpy as np

    out: list[str] = []
    top = ev.max(axis=0)
    for d, node_id in enumerate(ids):
        if ratios[d] > 0:
            continue
        gets = (
            "so no samples from the initial split (its observations' time model may get it "
            "some in the rebalancing)"
            if observed is not None and observed[d]
            else "so no samples"
        )
        rated = [i for i in range(len(_RESOURCES)) if ev[d, i] > 0]
        names = ", ".join(_RESOURCES[i] for i in rated) if rated else "no resource"
        if rated and shaped[d]:
            exponent = max(float(np.log10(ev[d, i]) - np.log10(top[i])) for i in rated)
            fraction = f"{10.0**exponent:.3g}" if exponent > -300 else f"1e{exponent:.0f}"
            out.append(
                f"node {node_id}: match ratio 0, {gets}: rated on {names}, but its "
                f"scores are negligible next to the best node's (at most {fraction} of the "
                "best rating on each resource), so its radar area rounds to 0; check its "
                "profile and the best node's"
            )
            continue
        drop = " or pass --drop-empty-axes" if helped is None or helped[d] else ""
        hint = "" if dropped else f"; rate all four resources{drop}"
        out.append(
            f"node {node_id}: match ratio 0, {gets}: rated on {names}, which gives "
            f"no radar area{_zero_length_axes(compute_share)}{hint}"
        )
    return out
