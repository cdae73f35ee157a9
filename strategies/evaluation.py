"""Server-side evaluation of the global model and the participants' values (seed 001, step 4).

:class:`ServerEvaluation` calls the ``evaluate_fn`` given to ``start()``, reads the metric the
run values and stops on (``ValuationConfig.metric_key``), and values the participants of an
aggregation: exact leave-one-out (one evaluation per participant of the global model without
it, a subtraction from the running weighted sum; or one batched ``evaluate_many_fn`` call) or
the first-order estimate from one gradient. A failed valuation falls back to equal values.

Of the ``evaluate_fn`` calls of an aggregation (all with its ``server_round``), the last one
scores the model the strategy serves: the leave-one-out models come before the aggregate,
and the served model is scored once more at the end when another model came after it
(:meth:`ServerEvaluation.evaluate_last`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from logging import INFO, WARNING
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from flwr.app import Array, ArrayRecord, MetricRecord
from flwr.common.logger import log

from flower_edge.aggregation import WeightedSum
from flower_edge.arrays import NDArray, cast_like
from flower_edge.errors import ConfigError, FlowerEdgeError, InputError
from flower_edge.valuation import (
    first_order_contributions,
    leave_one_out_values,
    values_from_contributions,
)
from strategies.config import ValuationConfig
from strategies.records import AggregationRecord, Combined

if TYPE_CHECKING:
    from strategies.loop import EventLoop

__all__ = [
    "EvaluateFn",
    "Scored",
    "ServerEvaluation",
    "Step",
    "check_metric_keys",
    "evaluate_served",
    "serve_better_of",
    "to_record",
]

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


def to_record(keys: Sequence[str], arrays: Sequence[NDArray]) -> ArrayRecord:
    """Return an ArrayRecord of ``arrays`` named ``keys``."""
    return ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(keys, arrays, strict=True)})


class ServerEvaluation:
    """Evaluate global models on the server and value the participants.

    Parameters
    ----------
    evaluate_fn : callable, optional
        ``evaluate_fn(round, arrays) -> MetricRecord``; without it nothing is evaluated and
        every participant gets the same value.
    keys : tuple[str, ...]
        Array names of the global model.
    config : ValuationConfig
        Mode, metric key and direction, batched and gradient functions.
    enabled : bool
        Whether the strategy values participants at all.
    name : str
        Strategy name for the logs.
    """

    def __init__(
        self,
        evaluate_fn: EvaluateFn | None,
        keys: tuple[str, ...],
        config: ValuationConfig,
        *,
        enabled: bool,
        name: str,
    ) -> None:
        self.evaluate_fn = evaluate_fn
        self.keys = keys
        self.config = config
        self.enabled = enabled
        self.name = name
        self.values: dict[int, float] = {}
        #: round, node ids and values of the last aggregation, as sent to the clients
        self.last_values: tuple[int, list[int], list[float]] = (0, [], [])
        #: ``evaluate_fn`` calls so far (a call's number tells whether a later one came)
        self.calls = 0
        #: what the last call returned
        self.last: MetricRecord | None = None
        #: whether a round's metrics without the valuation metric were warned about
        self.warned_missing = False

    def record_values(self, record: AggregationRecord) -> None:
        """Keep each participant's latest value (summed over its updates) to send out."""
        per_node: dict[int, float] = {}
        for node_id, value in zip(record.participants, record.values, strict=True):
            per_node[node_id] = per_node.get(node_id, 0.0) + value
        self.values.update(per_node)
        ids = sorted(per_node)
        self.last_values = (record.round, ids, [per_node[i] for i in ids])

    def evaluate(self, rnd: int, arrays: Sequence[NDArray]) -> MetricRecord | None:
        """Return ``evaluate_fn``'s metrics of ``arrays`` (``None`` without one)."""
        if self.evaluate_fn is None:
            return None
        metrics = self.evaluate_fn(rnd, to_record(self.keys, arrays))
        self.calls += 1
        self.last = metrics
        # round 0 is checked on its own (check_metric_keys): a run without the key is told once
        missing = rnd > 0 and self.enabled and self.metric(metrics) is None
        if missing and not self.warned_missing:
            self.warned_missing = True
            log(
                WARNING,
                "%s round %d: evaluate_fn returned no number for %r (it returned %s): the "
                "rounds whose metrics lack it give equal values and drop nothing (warned once)",
                self.name,
                rnd,
                self.config.metric_key,
                sorted(metrics.keys()) if metrics is not None else None,
            )
        return metrics

    def log_like_flower(self, metrics: MetricRecord | None, *, initial: bool = False) -> None:
        """Log the centralised-evaluation lines of Flower's ``Strategy.start``.

        With an ``evaluate_fn`` only: the initial results, or a round's served model's metrics.
        """
        if self.evaluate_fn is None:
            return
        if initial:
            log(INFO, "Initial global evaluation results: %s", metrics)
        else:
            log(INFO, "Global evaluation")
            log(INFO, "\t└──> MetricRecord: %s", metrics)

    def evaluate_last(self, rnd: int, arrays: Sequence[NDArray], at: int) -> None:
        """Score the served model ``arrays`` once more if call ``at`` was not the last one.

        ``at``: the call that scored it. An ``evaluate_fn`` that saves the model it is given
        then ends every round on the served one; the metrics recorded stay those of call
        ``at`` (the same for a deterministic ``evaluate_fn``).
        """
        if self.evaluate_fn is not None and at != self.calls:
            self.evaluate(rnd, arrays)

    def loo_due(self, count: int) -> bool:
        """Return whether the values of ``count`` updates need leave-one-out evaluations."""
        return (
            self.enabled
            and self.config.mode == "loo"
            and self.evaluate_fn is not None
            and count >= 2
        )

    def score(self, rnd: int, arrays: Sequence[NDArray], total: WeightedSum | None) -> Scored:
        """Evaluate the aggregate ``arrays`` and the models without each update of ``total``.

        The leave-one-out models (none when ``total`` is ``None``) are evaluated only when
        the aggregate has the valuation metric. They come first, so that the aggregate is
        the last model scored, when the last call so far returned the metric (and before
        the first call); otherwise the aggregate comes first, and decides.
        """
        if total is None:
            return Scored(self.evaluate(rnd, arrays), self.calls, None, None)
        if self.calls == 0 or self.metric(self.last) is not None:
            without, error = self._without(rnd, total)
            metrics = self.evaluate(rnd, arrays)
            if self.metric(metrics) is None:  # unused, as if never computed
                return Scored(metrics, self.calls, None, None)
            return Scored(metrics, self.calls, without, error)
        metrics = self.evaluate(rnd, arrays)
        at = self.calls
        if self.metric(metrics) is None:
            return Scored(metrics, at, None, None)
        return Scored(metrics, at, *self._without(rnd, total))

    def _without(
        self, rnd: int, total: WeightedSum
    ) -> tuple[list[float] | None, FlowerEdgeError | None]:
        """Return the leave-one-out metrics, or why they could not be computed."""
        try:
            return self.metrics_without(rnd, total), None
        except FlowerEdgeError as exc:
            return None, exc

    def check_metric_key(self, metrics: MetricRecord, *, needed: bool) -> None:
        """Raise ConfigError if the metric the run needs is missing from ``metrics``."""
        key = self.config.metric_key
        if (needed or self.enabled) and key not in metrics:
            raise ConfigError(
                f"evaluate_fn returned no metric {key!r} (valuation metric_key); it returned "
                f"{sorted(metrics.keys())}: return {key!r}, or set "
                "ValuationConfig(metric_key=...) to one of them"
            )

    def metric(self, metrics: MetricRecord | None, key: str | None = None) -> float | None:
        """Return the value of ``key`` (the metric key) in ``metrics``, if it is a number."""
        if metrics is None:
            return None
        value = metrics.get(self.config.metric_key if key is None else key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    @property
    def searches(self) -> bool:
        """Whether aggregations scale their step by the best ``step_search`` factor."""
        return bool(self.config.step_search) and self.enabled and self.evaluate_fn is not None

    @property
    def drops(self) -> bool:
        """Whether aggregations may leave out their worst update (``drop_worst``)."""
        return self.config.drop_worst and self.enabled and self.evaluate_fn is not None

    def worst_update(self, rnd: int, scored: Scored) -> int | None:
        """Return the update to leave out for ``drop_worst``, of :meth:`score`'s result.

        The update is the one whose removal improves the metric of the full aggregate
        the most, ``None`` when no removal improves it or the leave-one-out metrics could
        not be computed (logged; the full aggregate stands).
        """
        full, without = self.metric(scored.metrics), scored.without
        if scored.error is not None:
            log(
                WARNING,
                "%s round %d: leave-one-out failed (%s): nothing dropped",
                self.name,
                rnd,
                scored.error,
            )
        if full is None or not without:
            return None
        sign = 1.0 if self.config.higher_is_better else -1.0
        best = max(range(len(without)), key=lambda i: _score(sign, without[i]))
        return best if _score(sign, without[best]) > _score(sign, full) else None

    def valuate(
        self,
        rnd: int,
        total: WeightedSum | None,
        count: int,
        metrics: MetricRecord | None,
        without: list[float] | None = None,
        error: FlowerEdgeError | None = None,
    ) -> tuple[list[float], list[float]]:
        """Return the contributions and values of the ``count`` updates summed in ``total``.

        ``without``: the leave-one-out metrics when they are already known (:meth:`score`),
        ``error``: why they could not be computed; otherwise they are computed here.
        """
        equal = ([0.0] * count, [1.0 / count] * count)
        full = self.metric(metrics)
        cfg = self.config
        if not self.enabled or full is None or total is None or count < 2:
            return equal
        try:
            if cfg.mode == "first-order" and cfg.gradient_fn is not None:
                gradient = cfg.gradient_fn(to_record(self.keys, total.mean()))
                contributions = first_order_contributions([np.asarray(g) for g in gradient], total)
                return contributions.tolist(), values_from_contributions(
                    contributions.tolist()
                ).tolist()
            if error is not None:
                raise error
            if without is None:
                without = self.metrics_without(rnd, total)
            contrib, vals = leave_one_out_values(
                full, without, higher_is_better=cfg.higher_is_better
            )
            return contrib.tolist(), vals.tolist()
        except (InputError, FlowerEdgeError) as exc:
            log(WARNING, "%s round %d: valuation failed (%s): equal values", self.name, rnd, exc)
            return equal

    def metrics_without(self, rnd: int, total: WeightedSum) -> list[float]:
        """Return the metric of the global model without each update (leave-one-out)."""
        many = self.config.evaluate_many_fn
        if many is not None:
            records = [to_record(self.keys, arrays) for _, arrays in total.means_without()]
            results = list(many(rnd, records))
            if len(results) != len(records):
                raise InputError(
                    f"evaluate_many_fn returned {len(results)} results for {len(records)} models"
                )
        else:
            results = [self.evaluate(rnd, arrays) for _, arrays in total.means_without()]
        without: list[float] = []
        for key, metrics in zip(total.keys, results, strict=True):
            metric = self.metric(metrics)
            if metric is None:
                raise InputError(f"no {self.config.metric_key!r} for the model without {key}")
            without.append(metric)
        return without


def evaluate_served(
    loop: EventLoop, rnd: int, step: Step
) -> tuple[MetricRecord | None, MetricRecord | None]:
    """Return the metrics of the loop's served model and of the full aggregate.

    Without a moving average (``average_passes``) the served model is the global model,
    scored once (by :meth:`Step.of` when it scored the full aggregate and nothing was
    dropped); with one, the average is updated with the new global model and becomes
    the served model, and the aggregate is evaluated only when leave-one-out needs its
    metric. ``step.full``: the aggregate's metrics when already known; ``step.dropped``:
    the global model is the aggregate without that update, whose valuation metric the
    leave-one-out evaluations (``step.without``) gave.

    With ``serve_better`` the served model is whichever of the global model and the average
    scores better on the valuation metric (:func:`serve_better_of`). The last
    ``evaluate_fn`` call of the round scores the served model
    (:meth:`ServerEvaluation.evaluate_last`).
    """
    evaluation = loop.evaluation
    full, scored, dropped = step.full, step.full_at > 0, step.dropped is not None
    if loop.average is None:
        metrics: MetricRecord | None
        if step.searched is not None:
            metrics, at = step.searched, step.searched_at
        elif scored and not dropped:
            metrics, at = full, step.full_at
        else:
            metrics = evaluation.evaluate(rnd, loop.global_arrays)
            at = evaluation.calls
        evaluation.evaluate_last(rnd, loop.global_arrays, at)
        return metrics, (full if scored else metrics)
    own, own_at = full, step.full_at
    if not scored and evaluation.enabled:
        own = evaluation.evaluate(rnd, loop.global_arrays)
        own_at = evaluation.calls
    # the global model's metrics (or only its valuation metric) when known
    glob: MetricRecord | None = own
    glob_at, known = own_at, None
    if step.searched is not None:
        glob, glob_at = step.searched, step.searched_at
    elif step.dropped is not None:
        glob, glob_at, known = None, 0, step.chosen_metric(evaluation)
    loop.served = loop.average.update(loop.global_arrays)
    served = evaluation.evaluate(rnd, loop.served)
    at = evaluation.calls
    loop.serving_global = False
    if loop.strategy.serve_better:
        before = evaluation.calls
        served = serve_better_of(loop, rnd, served, glob, known)
        if loop.serving_global:  # scored here (last), or known before the average
            at = evaluation.calls if evaluation.calls != before else glob_at
    evaluation.evaluate_last(rnd, loop.served, at)
    return served, own


def scaled_move(base: Sequence[NDArray], arrays: Sequence[NDArray], factor: float) -> list[NDArray]:
    """Return ``base + factor * (arrays - base)`` for float tensors, ``arrays`` for the others.

    Computed in float64 and cast back to each array's dtype; integer tensors (counters,
    masks) keep the aggregate's values.
    """
    out = []
    for a, b in zip(arrays, base, strict=True):
        a = np.asarray(a)
        if a.dtype.kind != "f":
            out.append(a)
            continue
        b64 = np.asarray(b, dtype=np.float64)
        out.append(cast_like(b64 + factor * (a.astype(np.float64) - b64), a))
    return out


def _score(sign: float, metric: float) -> float:
    """Return ``sign * metric``, higher is better; a NaN metric (a diverged model) is worst."""
    return -math.inf if math.isnan(metric) else sign * metric


def serve_better_of(
    loop: EventLoop,
    rnd: int,
    average: MetricRecord | None,
    glob: MetricRecord | None,
    glob_metric: float | None,
) -> MetricRecord | None:
    """Serve the global model instead of the average if it scores better; return its metrics.

    ``glob``: the global model's metrics when known, else ``glob_metric``: its valuation
    metric when known (``drop_worst``). The global model is evaluated only when neither is
    known, or when it wins and its metrics are not known yet. A tie keeps the average.
    """
    evaluation = loop.evaluation
    a = evaluation.metric(average)
    if a is None:  # no evaluate_fn, or no valuation metric in its answer
        return average
    if glob is None and glob_metric is None:
        glob = evaluation.evaluate(rnd, loop.global_arrays)
    g = evaluation.metric(glob) if glob is not None else glob_metric
    sign = 1.0 if evaluation.config.higher_is_better else -1.0
    if g is None or not _score(sign, g) > _score(sign, a):
        return average
    loop.served = list(loop.global_arrays)
    loop.serving_global = True
    return glob if glob is not None else evaluation.evaluate(rnd, loop.global_arrays)


class Scored(NamedTuple):
    """An aggregate's metrics and its leave-one-out metrics (:meth:`ServerEvaluation.score`)."""

    metrics: MetricRecord | None  # the aggregate's
    at: int  # the evaluate_fn call that returned them
    without: list[float] | None  # the metric without each update, when computed
    error: FlowerEdgeError | None  # why they could not be


class Step(NamedTuple):
    """The new global model of an aggregation (:meth:`of`), as ``drop_worst`` chose it.

    With ``step_search`` the global model may then be a longer or shorter move along the
    same step (:meth:`search`): ``scale`` is its factor and ``searched`` its metrics.
    """

    arrays: list[NDArray]
    weights: list[float]
    full: MetricRecord | None  # the full aggregate's metrics, when evaluated here
    without: list[float] | None  # the leave-one-out metrics, when computed here
    dropped: int | None  # the update left out
    full_at: int = 0  # the evaluate_fn call that returned ``full`` (0: not evaluated here)
    error: FlowerEdgeError | None = None  # why the leave-one-out metrics could not be computed
    scale: float = 1.0  # the step_search factor of the move that became the global model
    searched: MetricRecord | None = None  # that model's metrics (scale != 1 only)
    searched_at: int = 0  # the evaluate_fn call that returned ``searched``

    @classmethod
    def of(
        cls,
        evaluation: ServerEvaluation,
        combined: Combined,
        rnd: int,
        base: Sequence[NDArray] | None = None,
    ) -> Step:
        """Return the full aggregate, or the aggregate without its worst update (:meth:`choose`).

        A sum with a ``commit`` method (EdgeStrategy's with a server optimizer) is then told
        which of its models became the global one (``None``: the full aggregate; else the
        key of the update left out), so that the optimizer's state takes that step once.
        With ``step_search`` and ``base`` (the global model before the aggregation) the move
        from ``base`` is then scaled (:meth:`search`).
        """
        step = cls.choose(evaluation, combined, rnd)
        commit = getattr(combined.total, "commit", None)
        if commit is not None and combined.total is not None:
            commit(None if step.dropped is None else combined.total.keys[step.dropped])
        if base is not None and evaluation.searches:
            step = step.search(evaluation, base, rnd)
        return step

    def chosen_metric(self, evaluation: ServerEvaluation) -> float | None:
        """Return the valuation metric of :attr:`arrays` before any search, when known."""
        if self.dropped is not None:
            return None if self.without is None else self.without[self.dropped]
        return evaluation.metric(self.full) if self.full_at > 0 else None

    def search(self, evaluation: ServerEvaluation, base: Sequence[NDArray], rnd: int) -> Step:
        """Return the step scaled by the ``step_search`` factor that scores best.

        The move ``arrays - base`` of the float tensors is scaled by each factor ``c``;
        integer tensors (counters, masks) keep the aggregate's values. The unscaled model
        is scored first when its metric is not known yet (the full aggregate's metrics of
        the values then come from that call). It wins ties; a NaN metric loses.
        """
        step, current = self, self.chosen_metric(evaluation)
        if current is None and self.dropped is None and self.full_at == 0:
            metrics = evaluation.evaluate(rnd, self.arrays)
            step = self._replace(full=metrics, full_at=evaluation.calls)
            current = evaluation.metric(metrics)
        if current is None:  # no valuation metric: nothing to compare
            return step
        sign = 1.0 if evaluation.config.higher_is_better else -1.0
        best = _score(sign, current)
        for factor in evaluation.config.step_search:
            if factor == 1.0:
                continue
            moved = scaled_move(base, self.arrays, factor)
            metrics = evaluation.evaluate(rnd, moved)
            value = evaluation.metric(metrics)
            if value is not None and _score(sign, value) > best:
                best = _score(sign, value)
                step = step._replace(
                    arrays=moved, scale=factor, searched=metrics, searched_at=evaluation.calls
                )
        return step

    @classmethod
    def choose(cls, evaluation: ServerEvaluation, combined: Combined, rnd: int) -> Step:
        """Return the full aggregate, or the aggregate without its worst update.

        The aggregate and its leave-one-out models are scored here when ``drop_worst`` or
        the values need them, the leave-one-out models first (:meth:`ServerEvaluation.score`).
        """
        step = cls(list(combined.arrays), list(combined.weights), None, None, None)
        total = combined.total
        if total is not None and evaluation.drops:
            scored = evaluation.score(rnd, step.arrays, total if len(total.keys) >= 2 else None)
        elif total is not None and evaluation.loo_due(len(step.weights)):
            scored = evaluation.score(rnd, step.arrays, total)
        else:
            return step
        step = step._replace(
            full=scored.metrics, without=scored.without, full_at=scored.at, error=scored.error
        )
        dropped = evaluation.worst_update(rnd, scored) if evaluation.drops else None
        if dropped is None:
            return step
        weights = list(step.weights)
        weights[dropped] = 0.0
        return step._replace(
            arrays=total.mean_without(total.keys[dropped]), weights=weights, dropped=dropped
        )


def check_metric_keys(loop: EventLoop, metrics: MetricRecord) -> None:
    """Check that ``evaluate_fn`` returns the metrics the run values and stops on.

    A missing key the user chose (``valuation`` or ``stop`` given) is a ConfigError; with
    the defaults, an app whose ``evaluate_fn`` names its metrics otherwise still runs, on
    equal values and without the convergence stop, and is told how to turn them on.
    """
    strategy, evaluation = loop.strategy, loop.evaluation
    key, stop = evaluation.config.metric_key, strategy.stop
    if stop.metric_key is not None and stop.metric_key not in metrics:
        raise ConfigError(
            f"evaluate_fn returned no metric {stop.metric_key!r} (StopConfig metric_key); "
            f"it returned {sorted(metrics.keys())}"
        )
    if key in metrics:
        return
    if strategy.valuation_given or strategy.stop_given:
        needed = stop.metric_key is None and (stop.target is not None or bool(stop.patience))
        evaluation.check_metric_key(metrics, needed=needed)
        return
    if evaluation.enabled or stop.patience:
        log(
            WARNING,
            "%s: evaluate_fn returns no %r metric (it returns %s): participants get equal "
            "values and the convergence stop is off. Return %r, or pass "
            "valuation=ValuationConfig(metric_key=...) naming one of its metrics",
            loop.name,
            key,
            sorted(metrics.keys()),
            key,
        )
    evaluation.enabled = False
