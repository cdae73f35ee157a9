"""The share planner's log lines: capped or absurd profile claims, nodes of match ratio 0.

Split out of :mod:`strategies.shares` (which re-exports them); pure logging over plain data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from logging import INFO, WARNING

from flwr.common.logger import log

from strategies.records import ProfileRecord

__all__ = ["SUSPECT_OVER_CAP", "SUSPECT_RATIO_GAP", "log_capped", "log_zero_ratios"]

#: a profile claiming more than this many times the share cap is logged as a WARNING (absurd);
#: up to it the cap is doing its designed work (the ``edge`` preset caps at 3x the mean share,
#: so a fast device's honest claim is a few times its cap): INFO
SUSPECT_OVER_CAP = 10.0
#: ... or a match ratio more than this many times the best other node's (an absurd profile)
SUSPECT_RATIO_GAP = 100.0


def log_capped(
    name: str,
    ids: list[int],
    ratios: list[float],
    total: int,
    cap: int | None,
    fraction: float,
    shares: Sequence[int] | None = None,
) -> None:
    """Log each node whose profile claims more than the cap, or looks absurd.

    The cap doing its designed work (e.g. the ``edge`` preset's 3x the mean share on a fast
    device) is INFO. A profile looks absurd, and is a WARNING, when its claim is more than
    :data:`SUSPECT_OVER_CAP` (10) times the cap, or its match ratio more than
    :data:`SUSPECT_RATIO_GAP` (100) times the best other node's (10x its scores on every
    axis: a claim is bounded by the total, so a boast shows in the ratio, not the claim). An
    absurd ratio the cap does not bound (``edge-seed``: ``max_share_fraction`` 1) is a
    WARNING too, naming the nodes its claim leaves without samples (``shares``: those given).
    """
    if cap is None or not total:
        return
    whole = math.fsum(ratios)
    for k, (node_id, ratio) in enumerate(zip(ids, ratios, strict=True)):
        claimed = total * ratio / whole
        best_other = max((r for i, r in enumerate(ratios) if i != k), default=0.0)
        gap = ratio > SUSPECT_RATIO_GAP * best_other if best_other > 0 else False
        versus = f"{ratio / best_other:.3g}x the best other node's match ratio" if gap else ""
        if claimed > cap:
            log(
                WARNING if claimed > SUSPECT_OVER_CAP * cap or gap else INFO,
                "%s: node %s share capped at %d samples (max_share_fraction %s); "
                "its profile claims %.0f%s",
                name,
                node_id,
                cap,
                fraction,
                claimed,
                f" ({versus})" if gap else "",
            )
        elif gap:  # found by a new-user probe: a 1000x boast took every sample, unlogged
            empty = [i for i, n in zip(ids, shares or (), strict=False) if n == 0]
            log(
                WARNING,
                "%s: node %s's profile claims %s: its share is %.0f of %d samples "
                "(max_share_fraction %s does not cap it)%s",
                name,
                node_id,
                versus,
                claimed,
                total,
                fraction,
                f"; nodes {empty} get no samples and no job" if empty else "",
            )


def log_zero_ratios(
    name: str,
    zero: list[int],
    shares: dict[int, int],
    profiles: dict[int, ProfileRecord],
    *,
    every_zero: bool,
) -> None:
    """Log each profiled node of match ratio 0 and the share it got (``zero_ratio``)."""
    for i in zero:
        axes = ", ".join(f"{e:g}" for e in profiles[i].evaluations)
        if shares[i] == 0 and not every_zero:
            what = "0 samples and no training job (zero_ratio='none': the seed's rule)"
        elif every_zero:
            what = f"an equal share of {shares[i]} (every profiled node has match ratio 0)"
        else:
            what = (
                f"an equal share of {shares[i]} (zero_ratio='equal'; the seed's "
                "F m_d / sum m would give it none)"
            )
        log(
            WARNING,
            "%s: node %s has match ratio 0 (its radar polygon has no area; evaluations "
            "C, G, M, D = %s): %s",
            name,
            i,
            axes,
            what,
        )
