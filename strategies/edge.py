"""EdgeStrategy: semi-asynchronous, threshold-triggered, time-decayed aggregation with values.

Seed 001 (``../shared/seeds/001_895444edf83ec060.txt``; DESIGN.md "Seed 001"): the server
aggregates as soon as the number of received local models exceeds the threshold K, weights
each by ``c_i * g(dt_i)`` (``c_i`` its sample share, ``g`` a decreasing function of its delay),
values every participant by leave-one-out on the server's test metric, and sends the values
back so that clients still training on a stale global can decide to abandon it. Sample shares
come from seed 000 (resource profiles -> distorted radar match ratios -> shares, rebalanced
after each aggregation from each node's fitted ``T = k f + b``).
"""

from __future__ import annotations

from strategies.loop import SemiAsyncStrategy

__all__ = ["EdgeStrategy"]


class EdgeStrategy(SemiAsyncStrategy):
    """The semi-asynchronous edge strategy of seed 001 on Flower's Message API.

    Aggregation trigger: after a finished update is accepted, if the number of accepted
    updates since the last aggregation is **greater than** K (``> threshold``, as the seed
    has it), those updates are aggregated and the count restarts from 0. With K = 3 the
    4th update triggers.

    Weights: ``w_i = c_i * g(dt_i)``; ``c_i`` the job's sample share (``ShareConfig.weight_by``),
    ``g`` the decay chosen by name (``"exponential"``, ``"polynomial"``, ``"hinge"``,
    ``"constant"``) or a callable, ``dt_i`` the receive time of the update minus the send time
    of the global it started from, on the server's clock (virtual under a virtual clock). The
    new global model is ``sum_i w_i x_i / sum_i w_i``.

    Values: leave-one-out on ``evaluate_fn``'s metric (``ValuationConfig``): contribution
    ``metric(x) - metric(x_{-i})`` (reversed for a loss), value = contribution / sum of
    contributions after clamping negatives to 0; equal values when no contribution is
    positive or without an ``evaluate_fn``. Values go into the next train messages and into
    ``Result.train_metrics_clientapp[r]["value-<node id>"]``.

    Parameters
    ----------
    threshold : int
        K, ``>= 1`` and ``<`` the number of nodes.
    **options
        See :class:`~strategies.loop.SemiAsyncStrategy`: ``decay``, ``decay_a``, ``decay_b``,
        ``loop``, ``shares``, ``valuation``, ``stop``, ``clock``, ``checkpoint_dir``,
        ``resume``.

    Examples
    --------
    >>> from strategies import EdgeStrategy
    >>> strategy = EdgeStrategy(threshold=4, decay="polynomial", decay_a=0.5)
    """

    name = "edge"
