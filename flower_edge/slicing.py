"""Slice length on a wall clock, chosen from the runtime's per-message overhead.

Local training runs in slices: one train message buys at most ``slice_budget`` seconds of
training, and each slice boundary is a preemption point where the client takes the abandon
decision. Every message also pays a fixed cost of the runtime that trains nothing: on Flower's
deployment runtime the SuperNode starts a ``flwr-clientapp`` process (which imports torch),
pulls the message and the model, and pushes the reply. Call that cost ``o`` (seconds per
message). A slice of ``s`` seconds then spends the share ``o / (s + o)`` of the node's time on
overhead, so

    slice = max(floor, factor * o)

keeps that share at or below ``1 / (1 + factor)`` (9 % for the default ``factor = 10``) while
keeping slices, and so the preemption points, as short as the overhead allows. ``floor`` keeps
the slice meaningful when the overhead is tiny (in process, in tests).

The overhead is measured, not assumed: :func:`message_overhead` takes, for finished messages,
the round trip seen on the server's clock and the seconds the client reports it spent
training, and returns the median of the differences (robust to one slow straggler).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from flower_edge.errors import InputError
from flower_edge.validate import number

__all__ = [
    "DEFAULT_FACTOR",
    "DEFAULT_FLOOR",
    "message_overhead",
    "overhead_share",
    "slice_budget_for_overhead",
]

#: slice length in units of the per-message overhead (overhead share <= 1 / (1 + factor))
DEFAULT_FACTOR = 10.0
#: shortest slice, seconds
DEFAULT_FLOOR = 1.0


def slice_budget_for_overhead(
    overhead: float, *, factor: float = DEFAULT_FACTOR, floor: float = DEFAULT_FLOOR
) -> float:
    """Return the slice budget (seconds) for a runtime that costs ``overhead`` s per message.

    Parameters
    ----------
    overhead : float
        Seconds per message that train nothing (process start, transfers), ``>= 0``.
    factor : float (default: 10.0)
        Slice length in units of the overhead, ``> 0``; the overhead's share of a node's
        time is then at most ``1 / (1 + factor)``.
    floor : float (default: 1.0)
        Shortest slice, seconds, ``> 0``.

    Returns
    -------
    float
        ``max(floor, factor * overhead)``.

    Raises
    ------
    ConfigError
        A setting is out of its range (the message names it).
    """
    o = number("overhead", overhead, low=0.0)
    c = number("factor", factor, low=0.0, low_inclusive=False)
    f = number("floor", floor, low=0.0, low_inclusive=False)
    return max(f, c * o)


def overhead_share(slice_budget: float, overhead: float) -> float:
    """Return the share of a node's time spent on overhead: ``o / (s + o)``.

    Parameters
    ----------
    slice_budget : float
        Seconds of training per message, ``> 0``.
    overhead : float
        Seconds per message that train nothing, ``>= 0``.
    """
    s = number("slice_budget", slice_budget, low=0.0, low_inclusive=False)
    o = number("overhead", overhead, low=0.0)
    return o / (s + o)


def message_overhead(round_trips: Sequence[float], compute: Sequence[float]) -> float:
    """Return the per-message overhead: the median of ``round_trip - compute``, at least 0.

    Parameters
    ----------
    round_trips : Sequence[float]
        Seconds from sending each message to receiving its reply, on the server's clock.
    compute : Sequence[float]
        Seconds the client reported training for the same messages (same order).

    Returns
    -------
    float
        The median difference, clamped at 0 (clocks and rounding can make one negative).

    Raises
    ------
    InputError
        The sequences are empty, differ in length, or hold a negative or non-finite value.
    """
    if len(round_trips) != len(compute):
        raise InputError(
            f"round_trips and compute must have the same length, got "
            f"{len(round_trips)} and {len(compute)}"
        )
    if not round_trips:
        raise InputError("round_trips must hold at least one message, got none")
    gaps = []
    for i, (rtt, work) in enumerate(zip(round_trips, compute, strict=True)):
        r = number(f"round_trips[{i}]", rtt, low=0.0, error=InputError)
        w = number(f"compute[{i}]", work, low=0.0, error=InputError)
        gaps.append(r - w)
    return max(0.0, statistics.median(gaps))
