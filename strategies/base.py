"""SemiAsyncStrategy: the base of EdgeStrategy and the FedBuff / FedAsync baselines.

It subclasses Flower's :class:`~flwr.serverapp.strategy.Strategy` and overrides ``start()``
(same signature, returns Flower's ``Result``) with the event loop of :mod:`strategies.loop`.
Subclasses choose when to aggregate (:meth:`SemiAsyncStrategy.aggregation_due`) and how
(:meth:`SemiAsyncStrategy.combine`). The options every strategy shares are typed once, in
:class:`StrategyOptions`, so that subclasses pass them on without an untyped ``**options``.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable, Iterable, Sequence
from logging import INFO, WARNING
from pathlib import Path
from typing import TypedDict, TypeVar

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.app.constants import DEFAULT_TTL
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from flower_edge import validate
from flower_edge.aggregation import WeightedSum
from flower_edge.arrays import NDArray
from flower_edge.errors import ConfigError
from flower_edge.staleness import DECAY_RULES, make_decay
from strategies.checkpoint_options import CHECKPOINT_DIR_ENV, checkpoint_options
from strategies.client_eval import aggregate_evaluate_replies
from strategies.clock import Clock, WallClock
from strategies.config import (
    AbandonConfig,
    LoopConfig,
    ShareConfig,
    StopConfig,
    ValuationConfig,
)
from strategies.convergence import StopKind
from strategies.dispatch import check_train_config
from strategies.evaluation import EvaluateFn
from strategies.fedavg_options import (
    FedAvgOptions,
    MetricsAggrFn,
    unknown_options,
)
from strategies.loop import EventLoop
from strategies.records import (
    AggregationRecord,
    Combined,
    JobEvent,
    Update,
)
from strategies.sync_api import (
    log_start,
    sync_aggregate_train,
    sync_configure_evaluate,
    sync_configure_train,
    warn_synchronous_use,
)

__all__ = ["SemiAsyncStrategy", "StrategyOptions"]


class StrategyOptions(TypedDict, total=False):
    """The keyword options every semi-asynchronous strategy takes (see SemiAsyncStrategy)."""

    decay: str | Callable[[float], float]
    decay_a: float | None
    decay_b: float | None
    loop: LoopConfig | None
    shares: ShareConfig | None
    valuation: ValuationConfig | None
    stop: StopConfig | None
    abandon: AbandonConfig | None
    clock: Clock | None
    checkpoint_dir: str | Path | None
    resume: bool
    fraction_evaluate: float
    min_evaluate_nodes: int
    weighted_by_key: str
    arrayrecord_key: str
    configrecord_key: str
    train_metrics_aggr_fn: MetricsAggrFn | None
    evaluate_metrics_aggr_fn: MetricsAggrFn | None
    fraction_train: float
    min_train_nodes: int
    min_available_nodes: int


_C = TypeVar("_C")


def _decay(
    strategy: str, decay: str | Callable[[float], float], a: float | None, b: float | None
) -> Callable[[float], float]:
    """Return the decay ``g``; a parameter the named decay does not use is WARNED about."""
    params = {k: v for k, v in (("a", a), ("b", b)) if v is not None}
    built = make_decay(decay, **params)
    for k in params:
        if isinstance(decay, str) and k not in DECAY_RULES[decay].params:
            log(WARNING, "%s: decay_%s is ignored: decay %r does not use it", strategy, k, decay)
    return built


def _config(name: str, value: object, kind: type[_C]) -> _C:
    """Return ``value`` (``kind()`` when ``None``), or raise ConfigError naming ``name``."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ConfigError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _folder(value: object) -> Path:
    """Return ``checkpoint_dir`` as a Path; raise ConfigError if it cannot be a folder."""
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ConfigError(f"checkpoint_dir must be a folder name (str or Path), got {value!r}")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"checkpoint_dir {str(path)!r} exists and is not a folder")
    return path


class SemiAsyncStrategy(Strategy):
    """Base of the semi-asynchronous strategies: hooks, settings and ``start()``.

    Parameters
    ----------
    threshold : int
        ``K``. When an aggregation happens is the subclass's :meth:`aggregation_due`.
    decay : str or callable (default: "polynomial")
        ``g`` of the weights (see :func:`flower_edge.staleness.make_decay`).
    decay_a, decay_b : float, optional
        Parameters of a named decay (defaults of :class:`flower_edge.staleness.Decay`).
    loop, shares, valuation, stop, abandon : option groups
        See :mod:`strategies.config`. ``stop`` defaults to the class's
        :attr:`default_stop` (the edge strategy stops on a plateau); ``abandon`` drives the
        clients' abandon rule (theta derived from the live scores by default; strategies
        that send no values send ``theta = inf``).
    clock : Clock, optional
        Time source (default: :class:`~strategies.clock.WallClock`).
    checkpoint_dir : path, optional
        Folder for a checkpoint after each aggregation (and the audit log). ``None`` (the
        default) reads ``FLOWER_EDGE_CHECKPOINT_DIR`` and ``FLOWER_EDGE_RESUME`` of the
        ServerApp's environment (:func:`strategies.checkpoint_options`); ``""``: no
        checkpoints, whatever the environment says.
    resume : bool (default: False)
        Continue from the checkpoint in ``checkpoint_dir`` if there is one (with a folder from
        the environment: on unless ``FLOWER_EDGE_RESUME`` turns it off).
    fraction_evaluate : float (default: 0.0)
        Client-side evaluation as Flower's strategies do it: after each aggregation, this
        fraction of the nodes (at least ``min_evaluate_nodes``, idle ones only) gets an
        ``evaluate`` message with the new global; the replies, averaged by ``num-examples``,
        go to ``Result.evaluate_metrics_clientapp`` (:mod:`strategies.client_eval`).
        ``0``: none (logged once).
    min_evaluate_nodes : int (default: 2)
        Least nodes evaluated per aggregation when ``fraction_evaluate > 0``.
    weighted_by_key, arrayrecord_key, configrecord_key : str
        As FedAvg's (defaults ``"num-examples"``, ``"arrays"``, ``"config"``): the metric a
        plain ClientApp's replies hold their example count in, and the keys of the records
        in the train and evaluate messages (:class:`~strategies.fedavg_options.FedAvgOptions`;
        flower-edge's own ClientApp reads a message's only records under any key).
    train_metrics_aggr_fn, evaluate_metrics_aggr_fn : callable, optional
        As FedAvg's: ``fn(records, weighted_by_key) -> MetricRecord`` for the app's metrics
        of an aggregation's updates and of a round's evaluate replies.
    min_available_nodes : int, optional
        As FedAvg's: the nodes to wait for before the first round (at least the fewest that
        can trigger an aggregation); ``LoopConfig.min_nodes`` if that is not set, a
        ConfigError if it is set to another value.
    fraction_train, min_train_nodes
        FedAvg's sampling arguments: validated and ignored, with a WARNING each.
    """

    #: name used in logs and checkpoints
    name = "semi-async"
    #: whether :meth:`combine` reads the base models of the updates (deltas)
    needs_bases = False
    #: convergence stop when ``stop`` is not given (none: the round budget only)
    default_stop = StopConfig()

    def __init__(
        self,
        threshold: int,
        *,
        decay: str | Callable[[float], float] = "polynomial",
        decay_a: float | None = None,
        decay_b: float | None = None,
        loop: LoopConfig | None = None,
        shares: ShareConfig | None = None,
        valuation: ValuationConfig | None = None,
        stop: StopConfig | None = None,
        abandon: AbandonConfig | None = None,
        clock: Clock | None = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
        fraction_evaluate: float = 0.0,
        min_evaluate_nodes: int = 2,
        **unknown: object,
    ) -> None:
        self.fedavg, unknown = FedAvgOptions.take(type(self).__name__, unknown)
        self.weighted_by_key = self.fedavg.weighted_by_key
        self.arrayrecord_key = self.fedavg.arrayrecord_key
        self.configrecord_key = self.fedavg.configrecord_key
        if unknown:
            raise TypeError(unknown_options(type(self).__name__, unknown))
        validate.integer("threshold K", threshold, low=1)
        validate.boolean("resume", resume)
        self.fraction_evaluate = validate.probability("fraction_evaluate", fraction_evaluate)
        self.min_evaluate_nodes = validate.integer("min_evaluate_nodes", min_evaluate_nodes, low=0)
        self.threshold = threshold
        self.decay_spec = decay
        self.decay = _decay(type(self).__name__, decay, decay_a, decay_b)
        self.loop = _config("loop", loop, LoopConfig)
        self.fedavg.check_min_nodes(self.loop.min_nodes)
        self.shares = _config("shares", shares, ShareConfig)
        self.valuation = _config("valuation", valuation, ValuationConfig)
        self.stop = self.default_stop if stop is None else _config("stop", stop, StopConfig)
        #: whether the user chose the metric settings (a missing metric is then an error)
        self.valuation_given, self.stop_given = valuation is not None, stop is not None
        self.abandon = _config("abandon", abandon, AbandonConfig)
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigError(f"clock must be a strategies Clock, got {type(clock).__name__}")
        self.clock: Clock = WallClock() if clock is None else clock
        off = checkpoint_dir == ""  # explicitly none, whatever the environment says
        if off:
            checkpoint_dir = None
        if resume and checkpoint_dir is None:
            raise ConfigError("resume=True needs checkpoint_dir")
        #: where the checkpoint folder came from: the keyword, or the ServerApp's environment
        self.checkpoint_source = "checkpoint_dir"
        if checkpoint_dir is None and not off:  # the two-line change: the environment switch
            from_env = checkpoint_options({}, os.environ)
            checkpoint_dir = from_env.get("checkpoint_dir")
            resume = from_env.get("resume", False)
            self.checkpoint_source = CHECKPOINT_DIR_ENV
        self.checkpoint_dir = None if checkpoint_dir is None else _folder(checkpoint_dir)
        self.resume = resume
        self.history: list[AggregationRecord] = []
        self.events: list[JobEvent] = []
        #: why the last start() ended, in words and as a kind (None before any run)
        self.stop_reason = ""
        self.stop_kind: StopKind | None = None
        self.evaluate_fn_given = False
        self.sync_warned = False  # Flower's synchronous rounds warned about (configure_train)

    #: serve the moving average of the global models over this many passes (EdgeStrategy)
    average_passes: float | None = None
    #: serve the better of the global model and its average on the valuation metric
    serve_better: bool = False

    # ------------------------------------------------------------------ hooks
    def aggregation_due(self, buffered: int) -> bool:
        """Return whether ``buffered`` updates trigger an aggregation (seed: more than K)."""
        return buffered > self.threshold

    def combine(
        self,
        global_arrays: list[NDArray],
        updates: Sequence[Update],
        version: int,
        bases: dict[int, list[NDArray]],
    ) -> Combined:
        """Return the new global model from the buffered updates.

        The seed's rule: ``x = sum_i w_i x_i / sum_i w_i`` with ``w_i = c_i * g(dt_i)``.
        ``bases`` maps every base version of ``updates`` to its global model (for baselines
        that aggregate deltas).
        """
        total = WeightedSum(global_arrays)
        weights = []
        for update in updates:
            weight = self.coefficient(update) * self.decay(update.delay)
            total.add((update.node_id, update.job_id), list(update.arrays), weight, checked=True)
            weights.append(weight)
        return Combined(total.mean(), tuple(weights), total)

    def coefficient(self, update: Update) -> float:
        """Return ``c_i``, the weight coefficient of an update (``ShareConfig.weight_by``)."""
        basis = self.shares.weight_by
        if basis == "uniform":
            return 1.0
        if basis == "share" and update.share > 0:
            return float(update.share)
        return float(update.num_examples)

    def updates_per_aggregation(self) -> int:
        """Return the fewest buffered updates that trigger an aggregation (K + 1 here)."""
        return next(n for n in range(1, self.threshold + 2) if self.aggregation_due(n))

    def min_nodes(self) -> int:
        """Return the nodes to wait for: ``loop.min_nodes``, or the fewest that can trigger.

        FedAvg's ``min_available_nodes`` raises the latter (:meth:`FedAvgOptions.nodes_to_wait`).
        """
        return self.fedavg.nodes_to_wait(self.loop.min_nodes, self.updates_per_aggregation())

    def check_node_count(self, count: int) -> None:
        """Raise ConfigError if ``count`` nodes can never reach the aggregation trigger."""
        if not self.aggregation_due(count):
            relation = "<=" if self.aggregation_due(self.threshold) else "<"
            raise ConfigError(
                f"threshold K = {self.threshold} must be {relation} the number of nodes "
                f"({count}): the count of updates must be able to reach the trigger "
                f"({self.trigger_text()})"
            )

    def values_enabled(self) -> bool:
        """Return whether this strategy values participants (baselines do not)."""
        return self.valuation.mode != "off"

    def sends_values(self) -> bool:
        """Return whether train messages carry the latest values."""
        return True

    # ------------------------------------------------------------------ Strategy API
    def summary(self) -> None:
        """Log the settings."""
        what = "\t%s (K = %d; aggregates when buffered updates %s)"
        log(INFO, what, type(self).__name__, self.threshold, self.trigger_text())
        log(INFO, "\t├── decay: %r", self.decay)
        log(INFO, "\t├── loop: %s", self.loop)
        log(INFO, "\t├── shares: %s", self.shares)
        log(INFO, "\t├── valuation: %s", self.valuation)
        if self.values_enabled() and not self.evaluate_fn_given:
            log(
                INFO,
                "\t│   (no evaluate_fn: no leave-one-out values, every node gets the same value)",
            )
        log(INFO, "\t├── stop: %s", self.stop)
        log(INFO, "\t├── abandon: %s", self.abandon if self.sends_values() else "off")
        log(INFO, "\t├── clock: %r", self.clock)
        log(
            INFO,
            "\t├── checkpoint: %s (resume: %s)%s",
            self.checkpoint_dir,
            self.resume,
            f" from {CHECKPOINT_DIR_ENV}"
            if self.checkpoint_dir is not None and self.checkpoint_source == CHECKPOINT_DIR_ENV
            else "",
        )
        for line in [*self.summary_lines(), self.fedavg.summary_line(self.min_nodes())]:
            log(INFO, "\t├── %s", line)
        if self.fraction_evaluate > 0:
            log(
                INFO,
                "\t└── client-side evaluation: fraction_evaluate %s, min_evaluate_nodes %d",
                self.fraction_evaluate,
                self.min_evaluate_nodes,
            )
        else:
            log(
                INFO,
                "\t└── client-side evaluation: off (fraction_evaluate=0.0; set it > 0 to run "
                "the ClientApp's evaluate after each aggregation, as FedAvg does)",
            )

    def summary_lines(self) -> list[str]:
        """Return the settings a subclass adds to ``summary()`` (before its last line)."""
        return []

    def trigger_text(self) -> str:
        """Describe the aggregation trigger for ``summary()``."""
        return f"> K = {self.threshold}"

    def too_few_hint(self) -> str:
        """Say how to fix a federation smaller than :meth:`min_nodes` (ends that error)."""
        need = self.min_nodes()
        more = (
            f"run {need} or more SuperNodes (simulation: "
            f'--federation-config "num-supernodes={need}")'
        )
        if self.loop.min_nodes:
            return f": lower LoopConfig.min_nodes ({self.loop.min_nodes}) or {more}"
        if need > self.updates_per_aggregation():
            return f": lower min_available_nodes ({need}) or {more}"
        return (
            f": {type(self).__name__} aggregates when buffered updates {self.trigger_text()}; "
            f"set threshold K below the number of nodes, or {more}"
        )

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Build one train message per node (synchronous use: WARNING once; ``start`` does not)."""
        warn_synchronous_use(self, SemiAsyncStrategy)
        return sync_configure_train(server_round, arrays, config, grid, self.fedavg)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average valid replies by ``num-examples`` (synchronous use; bad replies dropped).

        The metrics are the app's, averaged as FedAvg averages them, and ``participants``;
        or ``train_metrics_aggr_fn``'s record where one is given.
        """
        return sync_aggregate_train(server_round, replies, self.fedavg)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Build evaluate messages for ``fraction_evaluate`` of the nodes (synchronous use)."""
        return sync_configure_evaluate(self, server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Average the evaluate replies' metrics by ``num-examples`` (bad replies skipped).

        ``start()`` calls it with each round's evaluate replies when a subclass overrides it
        (a FedAvg subclass that logs or saves there; the final round's again once the nodes
        asked after training stopped have replied); otherwise it aggregates them itself.
        """
        fn, factor = self.fedavg.evaluate_metrics_aggr_fn, self.shares.absurd_factor
        return aggregate_evaluate_replies(
            replies, weight_key=self.weighted_by_key, aggr_fn=fn, absurd_factor=factor
        )

    def _log_start(
        self,
        num_rounds: int,
        initial_arrays: ArrayRecord,
        train_config: ConfigRecord | None,
        evaluate_config: ConfigRecord | None,
    ) -> None:
        """Log the lines of Flower's ``Strategy.start``, the settings and what start() ignores."""
        log_start(
            self, SemiAsyncStrategy, num_rounds, initial_arrays, train_config, evaluate_config
        )

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float | None = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> Result:
        """Run the semi-asynchronous loop; ``num_rounds`` counts aggregations.

        Parameters
        ----------
        grid : Grid
            Flower's Grid (or :class:`~strategies.inprocess.InProcessGrid`).
        initial_arrays : ArrayRecord
            The initial global model.
        num_rounds : int (default: 3)
            Aggregations to run (the round budget).
        timeout : float, optional (default: 3600)
            Real seconds after which an unanswered message is forgotten (also its TTL).
            ``None`` (which FedAvg passes on to ``Grid.send_and_receive`` as "no limit"):
            Flower's default message TTL, 12 hours.
        train_config : ConfigRecord, optional
            Extra config sent with every train message.
        evaluate_config : ConfigRecord, optional
            Config of the client-side evaluate messages (``fraction_evaluate > 0``).
        evaluate_fn : callable, optional
            ``evaluate_fn(round, arrays) -> MetricRecord``: server-side evaluation, used for
            the Result, leave-one-out values and convergence. Called several times per
            aggregation with its round; the last call scores the served model.

        Returns
        -------
        Result
            ``evaluate_metrics_serverapp[r]`` and ``train_metrics_clientapp[r]`` per
            aggregation ``r`` (``participants``, ``mean-staleness``, ``clock-time``,
            ``value-<node id>``, ``weight-<node id>``, ...).
        """
        validate.integer("num_rounds", num_rounds, low=0)
        if timeout is None:  # FedAvg waits without a limit; a message lives Flower's default TTL
            timeout = float(DEFAULT_TTL)
        validate.number("timeout (seconds)", timeout, low=0.0, low_inclusive=False)
        if not isinstance(initial_arrays, ArrayRecord):
            got = type(initial_arrays).__name__
            raise ConfigError(f"initial_arrays must be a flwr.app.ArrayRecord, got {got}")
        if evaluate_fn is not None and not callable(evaluate_fn):
            raise ConfigError(f"evaluate_fn must be callable, got {type(evaluate_fn).__name__}")
        check_train_config(train_config)
        if len(initial_arrays) == 0:
            raise ConfigError("initial_arrays must hold at least one array")
        for key in initial_arrays:
            kind: str = "?"
            with contextlib.suppress(TypeError):
                kind = np.dtype(initial_arrays[key].dtype).kind
            if kind not in "fiub":
                raise ConfigError(
                    f"initial_arrays[{key!r}] has dtype {initial_arrays[key].dtype!r}; "
                    "arrays must be numeric (float, int, uint or bool)"
                )
            if kind == "f" and not np.isfinite(initial_arrays[key].numpy()).all():
                raise ConfigError(f"initial_arrays[{key!r}] contains NaN or Inf")
        self.evaluate_fn_given = evaluate_fn is not None
        self.history.clear()
        self.events.clear()
        self._log_start(num_rounds, initial_arrays, train_config, evaluate_config)
        run = EventLoop(
            self,
            grid,
            initial_arrays,
            num_rounds,
            float(timeout),
            train_config,
            evaluate_fn,
            evaluate_config,
        )
        if type(self).aggregate_evaluate is not SemiAsyncStrategy.aggregate_evaluate:
            run.client_eval.aggregate = self.aggregate_evaluate  # a subclass's, as FedAvg's
        started = time.time()
        result = run.execute()
        self.stop_reason = run.stopper.reason or "round budget"
        self.stop_kind = run.stopper.kind or "rounds"
        # the closing lines of Flower's own Strategy.start, so that logs read the same
        log(INFO, "")
        log(INFO, "Strategy execution finished in %.2fs", time.time() - started)
        log(INFO, "")
        log(INFO, "Final results:")
        log(INFO, "")
        for line in io.StringIO(str(result)):
            log(INFO, "\t%s", line.strip("\n"))
        log(INFO, "")
        return result
