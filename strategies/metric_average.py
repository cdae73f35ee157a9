"""Average the metrics of several nodes' replies by their example counts, as FedAvg does.

Flower's ``FedAvg`` (``aggregate_metricrecords``) averages each metric, numbers and lists of
numbers element by element, weighted by the example count. It asks more of the replies than a
federation of edge devices gives: a reply whose keys differ from the others' makes it skip the
whole round's aggregation, and lists of different lengths end the run (``zip(strict=True)``
raises). Here each metric is averaged over the nodes that sent a usable value of it, and a
value is left out, with a WARNING naming the metric and the node, when it

- is not a number nor a list of numbers, or holds NaN or infinity;
- makes its weighted sum overflow (``1e300`` weighted by ``2**62`` examples);
- is missing from a reply (one WARNING per metric names the nodes);
- has another shape than the metric's kept shape: the one the most examples sent (then the
  most nodes; then a number before a list, and a shorter list before a longer one), so that
  the result does not depend on the order the replies came in, and one node that sends a
  list of another length cannot make the others' values be dropped.

The average is ``fsum(w_i * v_i / W)``: correctly rounded, whatever the order of the replies.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from logging import WARNING

from flwr.common.logger import log

__all__ = ["average_metrics"]


@dataclass(frozen=True)
class _Value:
    """One node's usable value of one metric."""

    node: int
    weight: int
    numbers: tuple[float, ...]
    is_list: bool

    @property
    def shape(self) -> tuple[bool, int]:
        return self.is_list, len(self.numbers)


def _describe(shape: tuple[bool, int]) -> str:
    is_list, length = shape
    return f"a list of {length} values" if is_list else "a number"


def _usable(value: object, weight: int) -> tuple[tuple[float, ...] | None, str]:
    """Return the value's numbers, or ``None`` and why it is left out."""
    values: list[object] = list(value) if isinstance(value, list | tuple) else [value]
    numbers = tuple(float(v) for v in values if isinstance(v, int | float))
    if len(numbers) != len(values) or any(isinstance(v, bool) for v in values):
        return None, f"{value!r} is not a number"
    if not all(math.isfinite(v) for v in numbers):
        return None, f"{value!r} is not finite"
    if not all(math.isfinite(weight * v) for v in numbers):
        return None, f"{value!r} weighted by its {weight} examples overflows the average"
    return numbers, ""


def _kept_shape(values: list[_Value]) -> tuple[bool, int]:
    """Return the shape the most examples sent (then the most nodes; a number, a short list)."""
    tally: dict[tuple[bool, int], tuple[int, int]] = {}
    for v in values:
        weight, count = tally.get(v.shape, (0, 0))
        tally[v.shape] = (weight + v.weight, count + 1)
    return max(tally, key=lambda s: (tally[s][0], tally[s][1], not s[0], -s[1]))


def average_metrics(
    rows: Iterable[tuple[int, int, Mapping[str, object]]], what: str
) -> dict[str, float | list[float]]:
    """Average each metric over the nodes that sent a usable value of it, by example count.

    Parameters
    ----------
    rows : iterable of (int, int, mapping)
        ``(node id, example count > 0, metrics)`` per reply; the metrics hold only the app's
        own keys (the weighting key is left out by the caller).
    what : str
        ``"evaluate"`` or ``"train"``: the reply kind the WARNING lines name.

    Returns
    -------
    dict
        Metric name (sorted) to its average: a float, or a list of floats for a list metric.
    """
    by_key: dict[str, list[_Value]] = {}
    sent: list[tuple[int, set[str]]] = []
    for node, weight, metrics in rows:
        sent.append((node, {str(key) for key in metrics}))
        for key, value in metrics.items():
            numbers, problem = _usable(value, weight)
            if numbers is None:
                log(WARNING, "%s metric %r of node %s skipped: %s", what, key, node, problem)
                continue
            is_list = isinstance(value, list | tuple)
            by_key.setdefault(str(key), []).append(_Value(node, weight, numbers, is_list))
    out: dict[str, float | list[float]] = {}
    for key in sorted(by_key):
        missing = [node for node, keys in sent if key not in keys]
        if missing:  # Flower's FedAvg skips the whole round's aggregation for it
            log(
                WARNING,
                "%s metric %r is missing from the replies of node(s) %s: averaged over the others",
                what,
                key,
                missing,
            )
        shape = _kept_shape(by_key[key])
        kept = [v for v in by_key[key] if v.shape == shape]
        total = sum(v.weight for v in kept)
        for v in by_key[key]:
            if v.shape != shape:
                log(
                    WARNING,
                    "%s metric %r of node %s skipped: %s where the other replies (%d examples)"
                    " sent %s",
                    what,
                    key,
                    v.node,
                    _describe(v.shape),
                    total,
                    _describe(shape),
                )
        if total <= 0:
            continue
        try:
            means = [
                math.fsum(v.weight * v.numbers[i] / total for v in kept) for i in range(shape[1])
            ]
        except OverflowError:  # values near the float maximum: fsum's partial sums overflow
            log(WARNING, "%s metric %r skipped: its weighted sum overflows", what, key)
            continue
        out[key] = means if shape[0] else means[0]
    return out
