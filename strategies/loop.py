"""The event loop shared by EdgeStrategy and the FedBuff / FedAsync baselines.

:class:`SemiAsyncStrategy` subclasses Flower's :class:`~flwr.serverapp.strategy.Strategy` and
overrides ``start()`` (same signature, returns Flower's ``Result``) with its own loop over
``grid.push_messages`` / ``grid.pull_messages``. Subclasses choose when to aggregate
(:meth:`SemiAsyncStrategy.aggregation_due`) and how (:meth:`SemiAsyncStrategy.combine`).

Events and clocks
-----------------
Every reply becomes an event with an event time. Under a wall clock (deployment) it is the
reply's arrival time on the server's clock. Under a :class:`~strategies.clock.VirtualClock`
it is the virtual send time of the message plus the reply's ``VIRTUAL_SECONDS``, and the loop
processes events in event-time order (ties broken by node id, then send order): an event at
time ``t`` is processed once every outstanding message has returned or was sent after
``t - lookahead``. The history is then the same whatever the host's speed and whatever order
the engine returns replies in. Soft deadlines are events too (virtual under a virtual clock).

Rules
-----
- A busy node never gets a second train message: one message per node is outstanding.
- A node that finishes an update, or whose reply is rejected, waits for the next global
  version before it gets a new job (an idle node whose last base is older gets one at once).
- A progress reply (slice, ``DONE = 0``) is answered at once with the same job id, the
  newest global's arrays if they are newer than anything sent to the node in this job, and the
  latest values.
- A node that misses its soft deadline is dropped from the round (marked late, not waited on).
  Its late reply is accepted once, with its decayed weight, unless ``accept_late`` is false
  or it is beyond the staleness bound.
- A message with no reply within ``timeout`` real seconds (``start``'s argument, also its
  TTL) is forgotten: a later reply to it is rejected as consumed, and the node gets a fresh job
  with the full model (this is also how a restarted node rejoins). After ``max_misses``
  forgotten messages in a row a registered node is dropped until it registers again.
- Wall clock only: membership is re-read about every second while waiting; nodes that left get
  no jobs, nodes that register (again) get jobs, new nodes join with the median share.
- The loop stops at the round budget, a convergence criterion, the time budget, or when no
  event can happen any more (every node gone or stuck), logging why.
"""

from __future__ import annotations

import contextlib
import heapq
import io
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from flower_edge import wire
from flower_edge.aggregation import WeightedSum, check_update, weighted_average
from flower_edge.allocation import TimeModel, fit_time_model, initial_shares, rebalance
from flower_edge.errors import ConfigError, FlowerEdgeError, InputError
from flower_edge.radar import match_ratios
from flower_edge.staleness import make_decay
from flower_edge.valuation import (
    first_order_contributions,
    leave_one_out_values,
    values_from_contributions,
)
from strategies.checkpoint import CheckpointStore
from strategies.clock import Clock, WallClock
from strategies.config import LoopConfig, ShareConfig, StopConfig, ValuationConfig
from strategies.records import (
    AggregationRecord,
    EventKind,
    JobEvent,
    ProfileRecord,
    TrainReply,
    parse_profile_reply,
    parse_train_reply,
)

__all__ = ["Combined", "EvaluateFn", "SemiAsyncStrategy", "Update"]

NDArray = npt.NDArray[Any]
EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]
JOB_EPOCH = 1_000_000_000  # job ids of the k-th resume start at k * JOB_EPOCH
#: (share, seconds) observations kept per node for the time model T = k f + b: the most recent
#: ones (the fit follows a device whose speed changes, and the state stays bounded)
MAX_OBSERVATIONS = 32


@dataclass(frozen=True)
class Update:
    """A finished local update accepted into the buffer.

    Attributes
    ----------
    node_id, job_id, base_version : int
        Who, which job, from which global version.
    arrays : tuple of numpy arrays
        The local model.
    num_examples : int
        Reported examples.
    share : int
        The job's sample share (0 when unknown).
    delay : float
        ``dt``: receive time minus the send time of the global it started from.
    received_at : float
        Event time of the reply.
    late : bool
        It missed its soft deadline.
    train_loss : float, optional
        Reported training loss.
    """

    node_id: int
    job_id: int
    base_version: int
    arrays: tuple[NDArray, ...]
    num_examples: int
    share: int
    delay: float
    received_at: float
    late: bool
    train_loss: float | None


@dataclass(frozen=True)
class Combined:
    """The result of :meth:`SemiAsyncStrategy.combine`.

    Attributes
    ----------
    arrays : list of numpy arrays
        The new global model.
    weights : tuple[float, ...]
        Weight of each update (any scale; normalised for the history).
    total : WeightedSum, optional
        The running sum the model is the mean of (enables leave-one-out values).
    """

    arrays: list[NDArray]
    weights: tuple[float, ...]
    total: WeightedSum | None = None


@dataclass
class _Job:
    job_id: int
    share: int
    started_at: float
    base_version: int
    delivered: dict[int, float] = field(default_factory=dict)  # version -> send time
    abandoned: int = 0


@dataclass
class _Node:
    node_id: int
    share: int = 0
    ratio: float = 0.0
    profiled: bool = False
    job: _Job | None = None
    outstanding: str | None = None
    last_base: int = -1
    late: bool = False
    gone: bool = False
    registered: bool = True
    misses: int = 0
    observations: list[tuple[float, float]] = field(default_factory=list)


@dataclass(frozen=True)
class _Sent:
    message_id: str
    node_id: int
    job_id: int
    send_time: float
    real_send: float
    seq: int


@dataclass(frozen=True)
class _ReplyEvent:
    sent: _Sent
    reply: TrainReply | None
    reason: str | None


@dataclass(frozen=True)
class _DeadlineEvent:
    sent: _Sent


_Event = _ReplyEvent | _DeadlineEvent


def _to_record(keys: Sequence[str], arrays: Sequence[NDArray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.asarray(a)) for k, a in zip(keys, arrays, strict=True)})


class SemiAsyncStrategy(Strategy):
    """Base of the semi-asynchronous strategies: the event loop and everything around it.

    Parameters
    ----------
    threshold : int
        ``K``. When an aggregation happens is the subclass's :meth:`aggregation_due`.
    decay : str or callable (default: "polynomial")
        ``g`` of the weights (see :func:`flower_edge.staleness.make_decay`).
    decay_a, decay_b : float, optional
        Parameters of a named decay (defaults of :class:`flower_edge.staleness.Decay`).
    loop, shares, valuation, stop : option groups
        See :mod:`strategies.config`.
    clock : Clock, optional
        Time source (default: :class:`~strategies.clock.WallClock`).
    checkpoint_dir : path, optional
        Folder for a checkpoint after each aggregation (and the audit log).
    resume : bool (default: False)
        Continue from the checkpoint in ``checkpoint_dir`` if there is one.
    """

    #: name used in logs and checkpoints
    name = "semi-async"
    #: whether :meth:`combine` reads the base models of the updates (deltas)
    needs_bases = False

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
        clock: Clock | None = None,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ConfigError(f"threshold K must be an integer >= 1, got {threshold!r}")
        params = {k: v for k, v in (("a", decay_a), ("b", decay_b)) if v is not None}
        self.threshold = threshold
        self.decay_spec = decay
        self.decay = make_decay(decay, **params)
        self.loop = LoopConfig() if loop is None else loop
        self.shares = ShareConfig() if shares is None else shares
        self.valuation = ValuationConfig() if valuation is None else valuation
        self.stop = StopConfig() if stop is None else stop
        self.clock: Clock = WallClock() if clock is None else clock
        if resume and checkpoint_dir is None:
            raise ConfigError("resume=True needs checkpoint_dir")
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.resume = resume
        self.history: list[AggregationRecord] = []
        self.events: list[JobEvent] = []
        self.evaluate_fn_given = False

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

    def values_enabled(self) -> bool:
        """Return whether this strategy values participants (baselines do not)."""
        return self.valuation.mode != "off"

    def sends_values(self) -> bool:
        """Return whether train messages carry the latest values."""
        return True

    # ------------------------------------------------------------------ Strategy API
    def summary(self) -> None:
        """Log the settings."""
        log(
            INFO,
            "\t%s (K = %d; aggregates when buffered updates %s)",
            type(self).__name__,
            self.threshold,
            self.trigger_text(),
        )
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
        log(INFO, "\t├── clock: %r", self.clock)
        log(INFO, "\t└── checkpoint: %s (resume: %s)", self.checkpoint_dir, self.resume)

    def trigger_text(self) -> str:
        """Describe the aggregation trigger for ``summary()``."""
        return f"> K = {self.threshold}"

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Build one train message per registered node (synchronous use; ``start`` does not)."""
        cfg = ConfigRecord(dict(config))
        cfg[wire.SERVER_ROUND] = server_round
        return [
            Message(RecordDict({wire.ARRAYS: arrays, wire.CONFIG: cfg}), node, MessageType.TRAIN)
            for node in grid.get_node_ids()
        ]

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Average valid replies by ``num-examples`` (synchronous use; bad replies dropped)."""
        parsed: list[TrainReply] = []
        keys: list[str] | None = None
        for msg in replies:
            if keys is None and msg.has_content() and msg.content.array_records:
                keys = list(next(iter(msg.content.array_records.values())).keys())
            try:
                reply = parse_train_reply(msg, keys or [])
            except InputError as exc:
                log(
                    WARNING,
                    "round %s: rejected reply of node %s: %s",
                    server_round,
                    msg.metadata.src_node_id,
                    exc,
                )
                continue
            if reply.arrays is not None:
                parsed.append(reply)
        if not parsed or keys is None:
            return None, None
        arrays = weighted_average(
            [list(r.arrays or ()) for r in parsed], [float(r.num_examples) for r in parsed]
        )
        metrics = MetricRecord({"participants": len(parsed)})
        return _to_record(keys, arrays), metrics

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Return no messages: the semi-asynchronous loop evaluates on the server only."""
        return []

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """Return ``None``: no client-side evaluation."""
        return None

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
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
        timeout : float (default: 3600)
            Real seconds after which an unanswered message is forgotten (also its TTL).
        train_config : ConfigRecord, optional
            Extra config sent with every train message.
        evaluate_config : ConfigRecord, optional
            Unused (no client-side evaluation); accepted for signature compatibility.
        evaluate_fn : callable, optional
            ``evaluate_fn(round, arrays) -> MetricRecord``: server-side evaluation, used for
            the Result, leave-one-out values and convergence.

        Returns
        -------
        Result
            ``evaluate_metrics_serverapp[r]`` and ``train_metrics_clientapp[r]`` per
            aggregation ``r`` (``participants``, ``mean-staleness``, ``clock-time``,
            ``value-<node id>``, ``weight-<node id>``, ...).
        """
        if isinstance(num_rounds, bool) or not isinstance(num_rounds, int) or num_rounds < 0:
            raise ConfigError(f"num_rounds must be an integer >= 0, got {num_rounds!r}")
        if not (isinstance(timeout, int | float) and timeout > 0 and math.isfinite(timeout)):
            raise ConfigError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
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
        self.evaluate_fn_given = evaluate_fn is not None
        self.history.clear()
        self.events.clear()
        log(INFO, "Starting %s strategy:", type(self).__name__)
        log(INFO, "\t├── Number of rounds (aggregations): %d", num_rounds)
        self.summary()
        run = _Run(
            self, grid, initial_arrays, num_rounds, float(timeout), train_config, evaluate_fn
        )
        result = run.execute()
        for line in io.StringIO(str(result)):
            log(INFO, "\t%s", line.strip("\n"))
        return result


class _Run:  # the state of one start() call
    def __init__(
        self,
        strategy: SemiAsyncStrategy,
        grid: Grid,
        initial: ArrayRecord,
        num_rounds: int,
        timeout: float,
        train_config: ConfigRecord | None,
        evaluate_fn: EvaluateFn | None,
    ) -> None:
        self.s = strategy
        self.grid = grid
        self.clock = strategy.clock
        self.num_rounds = num_rounds
        self.timeout = timeout
        self.train_config = ConfigRecord() if train_config is None else train_config
        self.evaluate_fn = evaluate_fn
        self.keys = tuple(initial.keys())
        self.global_arrays = [np.asarray(initial[k].numpy()) for k in self.keys]
        self.global_record = initial
        self.version = 0
        self.versions: dict[int, list[NDArray]] = {0: self.global_arrays}
        self.nodes: dict[int, _Node] = {}
        self.inflight: dict[str, _Sent] = {}  # sent, reply not yet pulled
        self.open: dict[str, _Sent] = {}  # sent, reply not yet processed
        self.heap: list[tuple[float, int, int, int, _Event]] = []  # see _schedule
        self.buffer: list[Update] = []
        self.seq = itertools.count()
        self.jobs = 0
        self.job_base = 0
        self.values: dict[int, float] = {}
        self.last_values: tuple[int, list[int], list[float]] = (0, [], [])
        self.result = Result(arrays=initial)
        self.best: float | None = None
        self.since_best = 0
        self.stop_reason = ""
        self.start_time = 0.0
        self.abandoned_total = 0
        self.store = (
            None if strategy.checkpoint_dir is None else CheckpointStore(strategy.checkpoint_dir)
        )
        self.warned_virtual = False
        self.next_refresh = 0.0

    # ================================================================== top level
    def execute(self) -> Result:
        self.start_time = self.clock.now()  # times in the history count from here
        node_ids = self._register()
        self._check_nodes(node_ids)
        resumed = self._resume(node_ids)
        if not resumed:
            metrics = self._evaluate(0, self.global_arrays)
            if metrics is not None:
                self._check_metric_key(metrics)  # before any message is sent
                self.result.evaluate_metrics_serverapp[0] = metrics
            self._profile(node_ids)
        elif self.buffer and self.s.aggregation_due(len(self.buffer)) and not self._finished():
            # killed while checkpointing the aggregation these updates triggered: redo it
            self._aggregate(max(u.received_at for u in self.buffer))
        self._start_idle_jobs()
        while not self._finished():
            if not self._pump():
                if self._stalled():
                    self.stop_reason = "stalled: no reply can arrive and no job can start"
                    log(WARNING, "%s: stopping, %s", self.s.name, self.stop_reason)
                    break
                self._wait()
        log(
            INFO,
            "%s finished after %d aggregations (%s) at clock %.3f",
            self.s.name,
            self.version,
            self.stop_reason or "round budget",
            self.clock.now(),
        )
        self.result.arrays = _to_record(self.keys, self.global_arrays)
        return self.result

    def _finished(self) -> bool:
        if self.stop_reason:
            return True
        if self.version >= self.num_rounds:
            self.stop_reason = "round budget"
            return True
        budget = self.s.loop.time_budget
        if budget is not None and self.clock.now() - self.start_time >= budget:
            self.stop_reason = "time budget"
            return True
        return False

    # ================================================================== registration
    def _register(self) -> list[int]:
        trigger = next(n for n in range(1, self.s.threshold + 2) if self.s.aggregation_due(n))
        need = self.s.loop.min_nodes or trigger
        deadline = self.clock.real_now() + self.s.loop.registration_timeout
        while True:
            ids = sorted(int(n) for n in self.grid.get_node_ids())
            if len(ids) >= need or self.clock.real_now() >= deadline:
                break
            self.clock.sleep(min(self.s.loop.poll_interval, deadline - self.clock.real_now()))
        if len(ids) < need:
            raise ConfigError(
                f"only {len(ids)} nodes registered within {self.s.loop.registration_timeout} s;"
                f" need at least {need} (min_nodes; default: the fewest that can trigger an "
                f"aggregation)"
            )
        log(INFO, "%s: %d nodes registered", self.s.name, len(ids))
        return ids

    def _check_nodes(self, ids: list[int]) -> None:
        s = self.s
        if not s.aggregation_due(len(ids)):
            relation = "<=" if s.aggregation_due(s.threshold) else "<"
            raise ConfigError(
                f"threshold K = {s.threshold} must be {relation} the number of nodes "
                f"({len(ids)}): the count of updates must be able to reach the trigger "
                f"({s.trigger_text()})"
            )
        if s.shares.max_share_fraction * len(ids) < 1:
            raise ConfigError(
                f"max_share_fraction = {s.shares.max_share_fraction} must be >= 1 / number of "
                f"nodes ({len(ids)}) so that the shares can add up to the total"
            )
        for n in ids:
            self.nodes[n] = _Node(n)

    # ================================================================== shares
    def _profile(self, ids: list[int]) -> None:
        profiles: dict[int, ProfileRecord] = {}
        if self.s.shares.profile:
            profiles = self._query_profiles(ids)
        self._assign_initial_shares(ids, profiles)

    def _query_profiles(self, ids: list[int]) -> dict[int, ProfileRecord]:
        cfg = ConfigRecord({wire.PROFILE_MODE: self.s.shares.profile_mode})
        msgs = [
            Message(
                RecordDict({wire.CONFIG: cfg}),
                n,
                wire.PROFILE_MESSAGE_TYPE,
                ttl=self.s.shares.profile_timeout or None,
            )
            for n in ids
        ]
        pushed = set(self.grid.push_messages(msgs))
        pending = {
            m.metadata.message_id: m.metadata.dst_node_id
            for m in msgs
            if m.metadata.message_id in pushed
        }
        out: dict[int, ProfileRecord] = {}
        deadline = self.clock.real_now() + self.s.shares.profile_timeout
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                node = pending.pop(reply.metadata.reply_to_message_id, None)
                if node is None:
                    continue
                try:
                    record = parse_profile_reply(reply)
                    if record.node_id != node:
                        raise InputError(f"profile reply claims node {record.node_id}")
                    out[node] = record
                except InputError as exc:
                    log(
                        WARNING,
                        "%s: node %s gets an equal share: bad profile reply: %s",
                        self.s.name,
                        node,
                        exc,
                    )
            if not pending or self.clock.real_now() >= deadline:
                break
            self.clock.sleep(min(self.s.loop.poll_interval, deadline - self.clock.real_now()))
        for node in sorted(pending.values()):
            log(WARNING, "%s: node %s gets an equal share: no profile reply", self.s.name, node)
        return out

    def _assign_initial_shares(self, ids: list[int], profiles: dict[int, ProfileRecord]) -> None:
        cfg = self.s.shares
        n = len(ids)
        reported = [p.local_samples for p in profiles.values() if p.local_samples > 0]
        total = cfg.total_samples
        if total is None:
            total = round(sum(reported) / len(reported) * n) if reported else 0
        cap = max(1, math.ceil(cfg.max_share_fraction * total)) if total else None
        profiled = [i for i in ids if i in profiles]
        ratios_by_node: dict[int, float] = {}
        if profiled:
            evaluations = np.array([profiles[i].evaluations for i in profiled], dtype=np.float64)
            try:
                ratios = match_ratios(
                    evaluations, cfg.compute_share, order_invariant=cfg.order_invariant
                )
                ratios_by_node = {i: float(r) for i, r in zip(profiled, ratios, strict=True)}
            except InputError as exc:
                log(WARNING, "%s: match ratios unavailable (%s): equal shares", self.s.name, exc)
        equal = [i for i in ids if i not in ratios_by_node or not ratios_by_node[i] > 0]
        matched = [i for i in ids if i not in equal]
        # unprofiled nodes get total / n each; the rest is split by match ratio
        equal_part = total * len(equal) // n if matched else total
        shares: dict[int, int] = {}
        if equal:
            split = initial_shares(equal_part, [1.0] * len(equal), [cap] * len(equal))
            shares.update(zip(equal, split, strict=True))
        if matched:
            matched_ratios = [ratios_by_node[i] for i in matched]
            split = initial_shares(total - equal_part, matched_ratios, [cap] * len(matched))
            shares.update(zip(matched, split, strict=True))
            self._log_capped(matched, matched_ratios, total - equal_part, cap)
        for i in ids:
            node = self.nodes[i]
            node.share = shares[i]
            node.ratio = ratios_by_node.get(i, 0.0)
            node.profiled = i in ratios_by_node
        log(
            INFO,
            "%s: total %d samples per round; shares %s",
            self.s.name,
            total,
            {i: shares[i] for i in ids},
        )

    def _log_capped(self, ids: list[int], ratios: list[float], total: int, cap: int | None) -> None:
        if cap is None or not total:
            return
        whole = math.fsum(ratios)
        for node_id, ratio in zip(ids, ratios, strict=True):
            claimed = total * ratio / whole
            if claimed > cap:
                log(
                    WARNING,
                    "%s: node %s share capped at %d samples (max_share_fraction %s); "
                    "its profile claims %.0f",
                    self.s.name,
                    node_id,
                    cap,
                    self.s.shares.max_share_fraction,
                    claimed,
                )

    def _rebalance(self) -> None:
        method = self.s.shares.rebalance
        if method == "off":
            return
        chosen: list[_Node] = []
        models: list[TimeModel] = []
        for node in self.nodes.values():
            obs = [(f, t) for f, t in node.observations if f > 0 and t > 0]
            if node.gone or node.share <= 0 or not obs:
                continue
            prior = TimeModel(k=sum(t for _, t in obs) / sum(f for f, _ in obs), b=0.0)
            try:
                models.append(fit_time_model(obs[-20:], prior))
            except InputError:
                continue
            chosen.append(node)
        if len(chosen) < 2:
            return
        total = sum(n.share for n in self.nodes.values() if not n.gone)
        cap = max(1, math.ceil(self.s.shares.max_share_fraction * total))
        shares = [n.share for n in chosen]
        allocation = rebalance(
            shares, models, method=method, capacities=[max(cap, s) for s in shares]
        )
        for node, share in zip(chosen, allocation.samples, strict=True):
            node.share = int(share)
        log(
            INFO,
            "%s: rebalanced (%s): shares %s, predicted makespan %.3f s",
            self.s.name,
            method,
            {n.node_id: n.share for n in chosen},
            allocation.makespan,
        )

    # ================================================================== sending
    def _start_idle_jobs(self) -> None:
        messages: list[tuple[Message, _Node, _Job, int]] = []
        for node in self.nodes.values():
            if node.outstanding is not None or node.gone or node.last_base >= self.version:
                continue
            self.jobs += 1
            job = _Job(self.job_base + self.jobs, node.share, self.clock.now(), self.version)
            node.job = job
            node.late = False
            messages.append(
                (self._train_message(node, job, with_arrays=True), node, job, self.version)
            )
        self._push(messages)

    def _train_message(self, node: _Node, job: _Job, *, with_arrays: bool) -> Message:
        cfg = ConfigRecord(dict(self.train_config))
        cfg[wire.SERVER_ROUND] = self.version + 1
        cfg[wire.GLOBAL_VERSION] = self.version
        cfg[wire.JOB_ID] = job.job_id
        if job.share > 0:  # 0 = unknown: the client uses its own default
            cfg[wire.SAMPLE_SHARE] = job.share
        cfg[wire.SLICE_BUDGET] = float(self.s.loop.slice_budget)
        cfg[wire.MATCH_RATIO] = float(node.ratio)
        cfg[wire.SEND_TIME] = float(self.clock.now())
        if self.s.sends_values():
            rnd, ids, vals = self.last_values
            cfg[wire.VALUE_NODE_IDS] = list(ids)
            cfg[wire.VALUES] = list(vals)
            cfg[wire.VALUES_ROUND] = rnd
        content = RecordDict({wire.CONFIG: cfg})
        if with_arrays:
            content[wire.ARRAYS] = self.global_record
        return Message(
            content,
            node.node_id,
            MessageType.TRAIN,
            ttl=self.timeout,
            group_id=str(self.version + 1),
        )

    def _push(self, messages: list[tuple[Message, _Node, _Job, int]]) -> None:
        if not messages:
            return
        accepted = set(self.grid.push_messages([m for m, _, _, _ in messages]))
        now, real = self.clock.now(), self.clock.real_now()
        for msg, node, job, carried in messages:
            msg_id = msg.metadata.message_id
            if msg_id not in accepted:
                log(
                    WARNING,
                    "%s: grid refused a message to node %s; it waits for the next version",
                    self.s.name,
                    node.node_id,
                )
                self._event(node, job.job_id, "refused", self.version)
                node.job = None
                node.last_base = self.version
                continue
            if carried >= 0:
                job.delivered[carried] = now
            sent = _Sent(msg_id, node.node_id, job.job_id, now, real, next(self.seq))
            node.outstanding = msg_id
            self.inflight[msg_id] = sent
            self.open[msg_id] = sent
            if self.s.loop.deadline is not None:
                self._schedule(now + self.s.loop.deadline, 1, _DeadlineEvent(sent))
            self._event(node, job.job_id, "sent", self.version)

    def _schedule(self, when: float, order: int, event: _Event) -> None:
        # key: event time, replies before deadlines, then send order (deterministic: sends
        # happen in event order), so that a message sent at t never overtakes an older event
        heapq.heappush(self.heap, (when, order, event.sent.seq, next(self.seq), event))

    # ================================================================== receiving
    def _pump(self) -> bool:
        got = list(self.grid.pull_messages(list(self.inflight))) if self.inflight else []
        for msg in got:
            self._receive(msg)
        self._expire()
        handled = 0
        while (
            self.heap
            and not self._finished()
            and self._processable(self.heap[0][0], self.heap[0][2])
        ):
            when, _, _, _, event = heapq.heappop(self.heap)
            self.clock.advance_to(when)
            if isinstance(event, _DeadlineEvent):
                self._on_deadline(event.sent)
            else:
                self._on_reply(event, when)
            self._start_idle_jobs()
            handled += 1
        return bool(got) or handled > 0

    def _receive(self, msg: Message) -> None:
        reply_to = msg.metadata.reply_to_message_id
        src = int(msg.metadata.src_node_id)
        sent = self.inflight.pop(reply_to, None)
        if sent is None:
            log(
                WARNING,
                "%s: rejected reply from node %s: reply to an unknown or already consumed message",
                self.s.name,
                src,
            )
            self._event_raw(src, -1, "rejected", "unknown or consumed message")
            return
        reply: TrainReply | None = None
        reason: str | None = None
        if msg.has_error():
            # Flower's own errors (node unavailable, message expired) come from the SuperLink
            # (node 1), not from the node the message was for: report Flower's reason
            error = msg.error
            reason = f"client error for node {sent.node_id} (code {error.code}): {error.reason}"
        elif src != sent.node_id:
            reason = f"reply from node {src} to a message for node {sent.node_id}"
        else:
            try:
                reply = parse_train_reply(msg, self.keys)
            except InputError as exc:
                reason = str(exc)
        if (
            reply is not None
            and not reply.done
            and self.clock.is_virtual
            and not (reply.virtual_seconds or 0.0) > 0.0
        ):
            # slices that take no virtual time would never let the clock move on
            reason = f"progress report without {wire.VIRTUAL_SECONDS} > 0 under a virtual clock"
            reply = None
        when = self._event_time(sent, reply)
        self._schedule(when, 0, _ReplyEvent(sent, reply, reason))

    def _event_time(self, sent: _Sent, reply: TrainReply | None) -> float:
        if not self.clock.is_virtual:
            return self.clock.now()
        seconds = None if reply is None else reply.virtual_seconds
        if seconds is None:
            if reply is not None and not self.warned_virtual:
                self.warned_virtual = True
                log(
                    WARNING,
                    "%s: virtual clock but node %s sent no %s: its reply takes 0 virtual seconds",
                    self.s.name,
                    sent.node_id,
                    wire.VIRTUAL_SECONDS,
                )
            seconds = 0.0
        return sent.send_time + seconds

    def _processable(self, when: float, seq: int) -> bool:
        if not self.clock.is_virtual:
            return when <= self.clock.now()
        # safe once no outstanding message can still produce an earlier-keyed event
        lookahead = self.s.loop.lookahead
        return all((s.send_time + lookahead, s.seq) > (when, seq) for s in self.inflight.values())

    def _expire(self) -> None:
        real = self.clock.real_now()
        expired = [s for s in self.inflight.values() if real - s.real_send >= self.timeout]
        if not expired:
            return
        registered = {int(n) for n in self.grid.get_node_ids()}
        for sent in expired:
            del self.inflight[sent.message_id]
            self.open.pop(sent.message_id, None)
            node = self.nodes[sent.node_id]
            log(
                WARNING,
                "%s: node %s sent no reply within %.1f s: message forgotten",
                self.s.name,
                node.node_id,
                self.timeout,
            )
            self._event(node, sent.job_id, "forgotten", self.version)
            node.outstanding = None
            node.job = None
            node.last_base = -1
            node.misses += 1
            node.registered = node.node_id in registered
            node.gone = not node.registered or node.misses >= self.s.loop.max_misses
            if not node.registered:
                log(
                    INFO,
                    "%s: node %s is not registered: no jobs until it is back",
                    self.s.name,
                    node.node_id,
                )
            elif node.gone:
                log(
                    WARNING,
                    "%s: node %s dropped (%d missed messages in a row) until it registers again",
                    self.s.name,
                    node.node_id,
                    node.misses,
                )
        self._start_idle_jobs()

    def _refresh_nodes(self, force: bool = False) -> None:
        """Admit nodes that registered after the start; mark idle nodes that left as gone."""
        real = self.clock.real_now()
        if not force and real < self.next_refresh:
            return
        self.next_refresh = real + max(1.0, 20 * self.s.loop.poll_interval)
        registered = {int(n) for n in self.grid.get_node_ids()}
        shares = sorted(n.share for n in self.nodes.values() if not n.gone)
        typical = shares[len(shares) // 2] if shares else 0
        for node_id in sorted(registered - set(self.nodes)):
            self.nodes[node_id] = _Node(node_id, share=typical)
            log(INFO, "%s: node %s joined: share %d (the median)", self.s.name, node_id, typical)
        for node in self.nodes.values():
            now = node.node_id in registered
            if now and not node.registered:
                node.misses = 0  # it registered again (restarted): a fresh start
                log(INFO, "%s: node %s is back", self.s.name, node.node_id)
            elif node.registered and not now:
                log(INFO, "%s: node %s left", self.s.name, node.node_id)
            node.registered = now
            node.gone = not now or node.misses >= self.s.loop.max_misses
        self._start_idle_jobs()

    def _stalled(self) -> bool:
        if self.inflight or self.heap:
            return False
        if not self.clock.is_virtual:
            self._refresh_nodes(force=True)
            if self.inflight:
                return False
        return all(
            n.gone or n.outstanding is not None or n.last_base >= self.version
            for n in self.nodes.values()
        )

    def _wait(self) -> None:
        if not self.clock.is_virtual:  # membership changes would break virtual determinism
            self._refresh_nodes()
        step = self.s.loop.poll_interval
        if not self.clock.is_virtual and self.heap:
            step = min(step, max(self.heap[0][0] - self.clock.now(), 0.0))
        real = self.clock.real_now()
        if self.inflight:
            oldest = min(s.real_send for s in self.inflight.values())
            step = min(step, max(oldest + self.timeout - real, 0.0))
        self.clock.sleep(max(step, 1e-6))

    # ================================================================== handlers
    def _on_deadline(self, sent: _Sent) -> None:
        if sent.message_id not in self.open:
            return
        node = self.nodes[sent.node_id]
        node.late = True
        log(
            INFO,
            "%s: node %s missed its deadline: dropped from the round",
            self.s.name,
            node.node_id,
        )
        self._event(node, sent.job_id, "late", self.version)

    def _reject(self, node: _Node, job_id: int, reason: str) -> None:
        log(
            WARNING,
            "%s: rejected reply of node %s (job %s): %s",
            self.s.name,
            node.node_id,
            job_id,
            reason,
        )
        self._event(node, job_id, "rejected", self.version, detail=reason)
        node.job = None
        node.last_base = self.version

    def _on_reply(self, event: _ReplyEvent, when: float) -> None:
        sent = event.sent
        self.open.pop(sent.message_id, None)
        node = self.nodes[sent.node_id]
        node.outstanding = None
        node.misses = 0
        job = node.job
        if job is None or job.job_id != sent.job_id:
            self._reject(node, sent.job_id, "reply for a job that is no longer running")
            return
        if event.reason is not None or event.reply is None:
            self._reject(node, job.job_id, event.reason or "unparsable reply")
            return
        reply = event.reply
        reason = self._protocol_problem(reply, job)
        if reason is not None:
            self._reject(node, job.job_id, reason)
            return
        if not reply.done:
            self._on_progress(node, job, reply)
        else:
            self._on_finished(node, job, reply, when)

    def _protocol_problem(self, reply: TrainReply, job: _Job) -> str | None:
        if reply.job_id is not None and reply.job_id != job.job_id:
            return f"job id {reply.job_id} but the message was for job {job.job_id}"
        if reply.base_version is not None and reply.base_version not in job.delivered:
            return (
                f"base version {reply.base_version} was never sent to this node "
                f"(sent: {sorted(job.delivered)})"
            )
        return None

    def _on_progress(self, node: _Node, job: _Job, reply: TrainReply) -> None:
        base = int(reply.base_version or 0)
        node.late = False  # lateness is per message: the next slice has its own deadline
        if reply.abandoned:
            job.abandoned += 1
            self.abandoned_total += 1
            self._event(node, job.job_id, "abandoned", base, reply.samples_processed or 0)
        job.base_version = base
        self._event(node, job.job_id, "progress", base, reply.samples_processed or 0)
        newer = self.version > max(job.delivered)
        msg = self._train_message(node, job, with_arrays=newer)
        self._push([(msg, node, job, self.version if newer else -1)])

    def _on_finished(self, node: _Node, job: _Job, reply: TrainReply, when: float) -> None:
        base = job.base_version if reply.base_version is None else reply.base_version
        staleness = self.version - base
        bound = self.s.loop.staleness_bound
        if bound is not None and staleness > bound:
            self._reject(node, job.job_id, f"staleness {staleness} beyond the bound {bound}")
            return
        if node.late and not self.s.loop.accept_late:
            self._reject(node, job.job_id, "missed its deadline (accept_late is off)")
            return
        arrays = reply.arrays or ()
        reason = check_update(list(arrays), self.global_arrays)
        if reason is not None:
            self._reject(node, job.job_id, reason)
            return
        if job.share > 0 and reply.num_examples > self.s.shares.absurd_factor * job.share:
            self._reject(
                node,
                job.job_id,
                f"absurd {wire.NUM_EXAMPLES} {reply.num_examples} for a share of {job.share}",
            )
            return
        delay = max(when - job.delivered[base], 0.0)
        if job.abandoned == 0 and job.share > 0:
            node.observations.append((float(job.share), max(when - job.started_at, 0.0)))
            del node.observations[:-MAX_OBSERVATIONS]
        self.buffer.append(
            Update(
                node.node_id,
                job.job_id,
                base,
                arrays,
                reply.num_examples,
                job.share,
                delay,
                when,
                node.late,
                reply.train_loss,
            )
        )
        self._event(node, job.job_id, "finished", base, reply.samples_processed or 0)
        node.job = None
        node.last_base = base
        node.late = False
        if self.store is not None:
            # persisted before any aggregation it may trigger: a kill during that
            # aggregation's checkpoint loses nothing accepted (resume re-aggregates it)
            update = self.buffer[-1]
            self.store.save_buffered(
                [self._buffer_entry(u) for u in self.buffer],
                self._buffer_entry(update),
                update.arrays,
            )
        if self.s.aggregation_due(len(self.buffer)):
            self._aggregate(when)

    def _buffer_entry(self, u: Update) -> dict[str, Any]:
        return {
            "node": u.node_id,
            "job": u.job_id,
            "base_version": u.base_version,
            "num_examples": u.num_examples,
            "share": u.share,
            "delay": u.delay,
            "received": u.received_at - self.start_time,
            "late": u.late,
            "train_loss": u.train_loss,
            "file": f"update-{u.node_id}-{u.job_id}.npz",
        }

    # ================================================================== aggregation
    def _aggregate(self, when: float) -> None:
        updates, self.buffer = self.buffer, []
        bases = {
            u.base_version: self.versions[u.base_version]
            for u in updates
            if u.base_version in self.versions
        }
        combined = self.s.combine(self.global_arrays, updates, self.version, bases)
        self.version += 1
        rnd = self.version
        self.global_arrays = [np.asarray(a) for a in combined.arrays]
        self.global_record = _to_record(self.keys, self.global_arrays)
        self.versions[rnd] = self.global_arrays
        self._prune_versions()
        metrics = self._evaluate(rnd, self.global_arrays)
        contributions, values = self._valuate(rnd, updates, combined, metrics)
        total_w = math.fsum(combined.weights)
        weights = tuple(w / total_w for w in combined.weights)
        record = AggregationRecord(
            round=rnd,
            time=when - self.start_time,
            participants=tuple(u.node_id for u in updates),
            job_ids=tuple(u.job_id for u in updates),
            base_versions=tuple(u.base_version for u in updates),
            staleness=tuple(rnd - 1 - u.base_version for u in updates),
            delays=tuple(u.delay for u in updates),
            weights=weights,
            raw_weights=tuple(combined.weights),
            late=tuple(u.late for u in updates),
            contributions=tuple(contributions),
            values=tuple(values),
            metrics={}
            if metrics is None
            else {k: float(v) for k, v in metrics.items() if isinstance(v, int | float)},
        )
        self.s.history.append(record)
        self._record_values(record)
        self.result.train_metrics_clientapp[rnd] = self._train_metrics(record, updates)
        if metrics is not None:
            self.result.evaluate_metrics_serverapp[rnd] = metrics
        log(
            INFO,
            "[%s round %d] t=%.3f participants=%s staleness=%s weights=%s values=%s metric=%s",
            self.s.name,
            rnd,
            record.time,
            list(record.participants),
            list(record.staleness),
            [round(w, 4) for w in weights],
            [round(v, 4) for v in values],
            self._metric(metrics),
        )
        self._rebalance()
        self._check_convergence(metrics)
        self._checkpoint(record)

    def _prune_versions(self) -> None:
        keep = {self.version}
        keep.update(n.job.base_version for n in self.nodes.values() if n.job is not None)
        keep.update(v for n in self.nodes.values() if n.job is not None for v in n.job.delivered)
        keep.update(u.base_version for u in self.buffer)
        for v in [v for v in self.versions if v not in keep]:
            del self.versions[v]

    def _record_values(self, record: AggregationRecord) -> None:
        per_node: dict[int, float] = {}
        for node_id, value in zip(record.participants, record.values, strict=True):
            per_node[node_id] = per_node.get(node_id, 0.0) + value
        self.values.update(per_node)
        ids = sorted(per_node)
        self.last_values = (record.round, ids, [per_node[i] for i in ids])

    def _train_metrics(self, record: AggregationRecord, updates: Sequence[Update]) -> MetricRecord:
        out: dict[str, int | float | list[int] | list[float]] = {
            "participants": len(record.participants),
            "mean-staleness": float(np.mean(record.staleness)),
            "max-staleness": int(max(record.staleness)),
            "mean-delay": float(np.mean(record.delays)),
            "clock-time": float(record.time),
            "late-updates": sum(record.late),
            "abandoned-jobs": self.abandoned_total,
            "num-examples": sum(u.num_examples for u in updates),
        }
        losses = [(u.train_loss, u.num_examples) for u in updates if u.train_loss is not None]
        if losses:
            out["train-loss"] = math.fsum(loss * n for loss, n in losses) / sum(
                n for _, n in losses
            )
        per_node: dict[str, float] = {}
        for node_id, value, weight in zip(
            record.participants, record.values, record.weights, strict=True
        ):
            per_node[f"value-{node_id}"] = per_node.get(f"value-{node_id}", 0.0) + value
            per_node[f"weight-{node_id}"] = per_node.get(f"weight-{node_id}", 0.0) + weight
        out.update(per_node)
        return MetricRecord(out)

    # ================================================================== evaluation
    def _evaluate(self, rnd: int, arrays: Sequence[NDArray]) -> MetricRecord | None:
        if self.evaluate_fn is None:
            return None
        return self.evaluate_fn(rnd, _to_record(self.keys, arrays))

    def _check_metric_key(self, metrics: MetricRecord) -> None:
        key = self.s.valuation.metric_key
        needs = self.s.values_enabled() or self.s.stop.target is not None or self.s.stop.patience
        if needs and key not in metrics:
            raise ConfigError(
                f"evaluate_fn returned no metric {key!r} (valuation metric_key); it returned "
                f"{sorted(metrics.keys())}"
            )

    def _metric(self, metrics: MetricRecord | None) -> float | None:
        if metrics is None:
            return None
        value = metrics.get(self.s.valuation.metric_key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value)

    def _valuate(
        self,
        rnd: int,
        updates: Sequence[Update],
        combined: Combined,
        metrics: MetricRecord | None,
    ) -> tuple[list[float], list[float]]:
        n = len(updates)
        equal = ([0.0] * n, [1.0 / n] * n)
        full = self._metric(metrics)
        total = combined.total
        cfg = self.s.valuation
        if not self.s.values_enabled() or full is None or total is None or n < 2:
            return equal
        try:
            if cfg.mode == "first-order" and cfg.gradient_fn is not None:
                gradient = cfg.gradient_fn(_to_record(self.keys, total.mean()))
                contributions = first_order_contributions([np.asarray(g) for g in gradient], total)
                return contributions.tolist(), values_from_contributions(
                    contributions.tolist()
                ).tolist()
            without = self._metrics_without(rnd, total)
            contrib, vals = leave_one_out_values(
                full, without, higher_is_better=cfg.higher_is_better
            )
            return contrib.tolist(), vals.tolist()
        except (InputError, FlowerEdgeError) as exc:
            log(WARNING, "%s round %d: valuation failed (%s): equal values", self.s.name, rnd, exc)
            return equal

    def _metrics_without(self, rnd: int, total: WeightedSum) -> list[float]:
        many = self.s.valuation.evaluate_many_fn
        if many is not None:
            records = [_to_record(self.keys, arrays) for _, arrays in total.means_without()]
            results = list(many(rnd, records))
            if len(results) != len(records):
                raise InputError(
                    f"evaluate_many_fn returned {len(results)} results for {len(records)} models"
                )
        else:
            results = [self._evaluate(rnd, arrays) for _, arrays in total.means_without()]
        without: list[float] = []
        for key, metrics in zip(total.keys, results, strict=True):
            metric = self._metric(metrics)
            if metric is None:
                raise InputError(f"no {self.s.valuation.metric_key!r} for the model without {key}")
            without.append(metric)
        return without

    def _check_convergence(self, metrics: MetricRecord | None) -> None:
        metric = self._metric(metrics)
        stop = self.s.stop
        if metric is None:
            return
        sign = 1.0 if self.s.valuation.higher_is_better else -1.0
        if stop.target is not None and sign * (metric - stop.target) >= 0:
            self.stop_reason = f"target {stop.target} reached ({metric})"
            return
        if self.best is None or sign * (metric - self.best) > stop.min_delta:
            self.best = metric
            self.since_best = 0
        else:
            self.since_best += 1
            if stop.patience is not None and self.since_best >= stop.patience:
                self.stop_reason = (
                    f"plateau: no improvement > {stop.min_delta} in {stop.patience} aggregations"
                )

    # ================================================================== events
    def _event(
        self,
        node: _Node,
        job_id: int,
        kind: EventKind,
        version: int,
        samples: int = 0,
        detail: str = "",
    ) -> None:
        self.s.events.append(
            JobEvent(
                self.clock.now() - self.start_time,
                node.node_id,
                job_id,
                kind,
                version,
                samples,
                detail,
            )
        )

    def _event_raw(self, node_id: int, job_id: int, kind: EventKind, detail: str) -> None:
        self.s.events.append(
            JobEvent(
                self.clock.now() - self.start_time, node_id, job_id, kind, self.version, 0, detail
            )
        )

    # ================================================================== checkpoints
    def _checkpoint(self, record: AggregationRecord) -> None:
        if self.store is None:
            return
        self.store.append_audit(
            [
                {
                    "round": record.round,
                    "node": node,
                    "job": job,
                    "base_version": base,
                    "weight": weight,
                    "staleness": stale,
                    "delay": delay,
                }
                for node, job, base, weight, stale, delay in zip(
                    record.participants,
                    record.job_ids,
                    record.base_versions,
                    record.weights,
                    record.staleness,
                    record.delays,
                    strict=True,
                )
            ]
        )
        state = {
            "strategy": self.s.name,
            "version": self.version,
            "clock": self.clock.now(),
            "elapsed": self.clock.now() - self.start_time,
            "jobs": self.job_base + self.jobs,
            "best": self.best,
            "since_best": self.since_best,
            "abandoned_total": self.abandoned_total,
            "values": {str(k): v for k, v in self.values.items()},
            "last_values": [self.last_values[0], self.last_values[1], self.last_values[2]],
            "nodes": {
                str(n.node_id): {
                    "share": n.share,
                    "ratio": n.ratio,
                    "profiled": n.profiled,
                    "observations": n.observations,
                }
                for n in self.nodes.values()
            },
            "history": [h.to_json() for h in self.s.history],
            "train_metrics": {
                str(r): dict(m) for r, m in self.result.train_metrics_clientapp.items()
            },
            "evaluate_metrics": {
                str(r): dict(m) for r, m in self.result.evaluate_metrics_serverapp.items()
            },
        }
        self.store.save(record.round, self.keys, self.global_arrays, state)
        self.store.save_buffered([self._buffer_entry(u) for u in self.buffer])

    def _restore_buffer(self, store: CheckpointStore) -> None:
        counted = {(int(e["node"]), int(e["job"])) for e in store.audit()}
        for entry, arrays in store.buffered(len(self.keys)):
            node_id, job_id = int(entry["node"]), int(entry["job"])
            base = int(entry["base_version"])
            if (node_id, job_id) in counted:
                continue  # aggregated before the kill: in the audit already
            if self.s.needs_bases and base != self.version:
                log(
                    WARNING,
                    "%s: buffered update of node %s dropped: its base version %d "
                    "is not in the checkpoint",
                    self.s.name,
                    node_id,
                    base,
                )
                continue
            if check_update(list(arrays), self.global_arrays) is not None:
                continue
            loss = entry.get("train_loss")
            self.buffer.append(
                Update(
                    node_id,
                    job_id,
                    base,
                    arrays,
                    int(entry["num_examples"]),
                    int(entry["share"]),
                    float(entry["delay"]),
                    float(entry["received"]) + self.start_time,
                    bool(entry["late"]),
                    None if loss is None else float(loss),
                )
            )
            if node_id in self.nodes:
                self.nodes[node_id].last_base = max(self.nodes[node_id].last_base, base)
        if self.buffer:
            log(
                INFO,
                "%s: %d accepted updates restored into the buffer",
                self.s.name,
                len(self.buffer),
            )

    def _resume(self, ids: list[int]) -> bool:
        store = self.store
        if store is None or not self.s.resume or not store.exists():
            return False
        ckpt = store.load()
        if ckpt.keys != self.keys:
            raise ConfigError(
                f"checkpoint in {store.directory} holds a different model "
                f"({len(ckpt.keys)} arrays named {list(ckpt.keys)[:3]}...)"
            )
        st = ckpt.state
        store.truncate_audit(ckpt.round)
        self.version = int(st["version"])
        self.global_arrays = list(ckpt.arrays)
        self.global_record = _to_record(self.keys, self.global_arrays)
        self.versions = {self.version: self.global_arrays}
        self.clock.advance_to(float(st["clock"]))
        self.start_time = self.clock.now() - float(st["elapsed"])  # wall clocks restart
        previous_jobs = int(st["jobs"])
        self.job_base = (previous_jobs // JOB_EPOCH + 1) * JOB_EPOCH
        self.best = st["best"]
        self.since_best = int(st["since_best"])
        self.abandoned_total = int(st["abandoned_total"])
        self.values = {int(k): float(v) for k, v in st["values"].items()}
        rnd, vids, vals = st["last_values"]
        self.last_values = (int(rnd), [int(i) for i in vids], [float(v) for v in vals])
        self.s.history[:] = [AggregationRecord.from_json(h) for h in st["history"]]
        self.result.train_metrics_clientapp = {
            int(r): MetricRecord(m) for r, m in st["train_metrics"].items()
        }
        self.result.evaluate_metrics_serverapp = {
            int(r): MetricRecord(m) for r, m in st["evaluate_metrics"].items()
        }
        saved = {int(k): v for k, v in st["nodes"].items()}
        if set(ids) <= set(saved):
            for i in ids:
                node, data = self.nodes[i], saved[i]
                node.share = int(data["share"])
                node.ratio = float(data["ratio"])
                node.profiled = bool(data["profiled"])
                node.observations = [(float(f), float(t)) for f, t in data["observations"]]
        else:
            log(INFO, "%s: the nodes changed since the checkpoint: profiling again", self.s.name)
            self._profile(ids)
        self._restore_buffer(store)
        log(
            INFO,
            "%s: resumed from %s at round %d (clock %.3f); job ids from %d",
            self.s.name,
            store.directory,
            self.version,
            self.clock.now(),
            self.job_base + 1,
        )
        return True
