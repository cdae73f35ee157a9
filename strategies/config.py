"""Option groups of the semi-asynchronous strategies, as frozen dataclasses validated on creation.

:class:`~strategies.EdgeStrategy` takes the few options everyone sets as keywords
(``threshold``, ``decay``, ``checkpoint_dir``, ...) and the rest grouped here, so that the
baselines share them without copying ten arguments each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy.typing as npt
from flwr.app import ArrayRecord, MetricRecord

from flower_edge import validate
from flower_edge.allocation import MAX_SAMPLES
from flower_edge.errors import ConfigError
from flower_edge.server_opt import PRESET_STEP_SEARCH

__all__ = [
    "DEFAULT_ABSURD_FACTOR",
    "DEFAULT_PATIENCE",
    "DEFAULT_PATIENCE_PASSES",
    "DEFAULT_WINDOW_PASSES",
    "PRESET_STEP_SEARCH",
    "REBALANCE_METHODS",
    "VALUATION_MODES",
    "WEIGHT_BASES",
    "ZERO_RATIOS",
    "AbandonConfig",
    "LoopConfig",
    "RebalanceMethod",
    "ShareConfig",
    "StopConfig",
    "ValuationConfig",
    "ValuationMode",
    "WeightBasis",
    "ZeroRatio",
]

RebalanceMethod = Literal["seed", "optimal", "off"]
REBALANCE_METHODS: tuple[str, ...] = get_args(RebalanceMethod)
ZeroRatio = Literal["equal", "none"]
#: what a profiled node whose match ratio is 0 trains (``ShareConfig.zero_ratio``)
ZERO_RATIOS: tuple[str, ...] = get_args(ZeroRatio)
#: dtype of the operator analysis' example batch (``ShareConfig.input_dtype``; the same as
#: :data:`flower_edge.operators.INPUT_DTYPES`, which imports torch)
InputDtype = Literal["float32", "float64", "int64"]
INPUT_DTYPES: tuple[str, ...] = get_args(InputDtype)
ValuationMode = Literal["loo", "first-order", "off"]
VALUATION_MODES: tuple[str, ...] = get_args(ValuationMode)
WeightBasis = Literal["share", "num-examples", "uniform"]
WEIGHT_BASES: tuple[str, ...] = get_args(WeightBasis)
ProfileMode = Literal["quick", "full"]
#: the edge strategy's plateau: stop after this many aggregations without a new best metric
DEFAULT_PATIENCE = 20
#: ShareConfig's absurd_factor: more examples than this times the reference are absurd
DEFAULT_ABSURD_FACTOR = 100.0
#: the plateau waits at least this many passes over the federation (StopConfig.patience_passes)
DEFAULT_PATIENCE_PASSES = 4.0
#: the plateau is judged on the mean metric of the last pass over the federation
#: (StopConfig.window_passes): one aggregation's metric on label-skewed data is noise
DEFAULT_WINDOW_PASSES = 1.0
PROFILE_MODES: tuple[str, ...] = get_args(ProfileMode)

GradientFn = Callable[[ArrayRecord], Sequence[npt.NDArray[Any]]]
EvaluateManyFn = Callable[[int, list[ArrayRecord]], Sequence[MetricRecord | None]]


def _positive(
    name: str, value: float | None, *, allow_zero: bool = False, optional: bool = False
) -> None:
    """Check a finite number ``> 0`` (``>= 0`` with ``allow_zero``; ``None`` if ``optional``)."""
    validate.number(name, value, low=0.0, low_inclusive=allow_zero, allow_none=optional)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Check that ``value`` is one of ``allowed``."""
    validate.choice(name, value, allowed)


@dataclass(frozen=True)
class LoopConfig:
    """How the event loop sends, waits and times out.

    Parameters
    ----------
    slice_budget : float or "auto" (default: "auto")
        Seconds of local training per train message (virtual seconds under a virtual
        clock); the client answers each slice with a progress report, which is a preemption
        point where it may abandon stale work. ``0`` = no slicing: each message runs the job
        to completion. ``"auto"``: slices on, their length chosen from the per-message
        overhead measured on the run (wall clock), 10 s until it is known and under a
        virtual clock (:mod:`strategies.slices`).
    deadline : float, "auto" or None (default: "auto")
        Soft per-message deadline in clock seconds. A node whose reply is not in by then is
        dropped from the round (marked late, logged, never waited on); its late reply is
        accepted once, with its decayed weight, unless ``accept_late`` is false or it is
        beyond ``staleness_bound``. Under a wall clock a node that is no longer registered
        at its deadline is forgotten there and then (not only after ``start``'s
        ``timeout``). ``"auto"``: wall clock only, ``deadline_factor`` times the longest of
        the node's recent message round trips (every node's before it has its own), at
        least ``deadline_floor``; no deadline before any round trip is known, nor under a
        virtual clock (:mod:`strategies.deadlines`). ``None`` = no soft deadline.
    deadline_factor : float (default: 3.0)
        ``"auto"`` deadline: multiple of the observed round trip, ``>= 1``.
    deadline_floor : float (default: 10.0)
        ``"auto"`` deadline: its least value in seconds, ``> 0``.
    accept_late : bool (default: True)
        Whether a finished update that missed its deadline may still be aggregated.
    staleness_bound : int, optional
        Reject finished updates whose base is more than this many versions old.
    max_update_ratio : float, optional (default: 1e6)
        Reject a finished update farther from the global model (L2 norm of the difference
        over the float arrays) than this many times the global model's norm (at least 1): a
        finite but absurd update, e.g. ``3.4e38`` in every weight, would wreck the model.
        ``None`` turns the check off.
    lookahead : float (default: 0.0)
        Virtual clock only: a lower bound on any reply's virtual duration. An event at time t
        is processed once every outstanding message has returned or was sent after
        ``t - lookahead``; 0 waits for all outstanding replies (exact, least parallel).
    poll_interval : float (default: 0.05)
        Real seconds between two polls of the grid when nothing is ready.
    registration_timeout : float (default: 120.0)
        Real seconds to wait for ``min_nodes`` nodes to register before the first round.
    min_nodes : int, optional
        Nodes to wait for before starting (default: the fewest that can trigger an
        aggregation: ``K + 1`` for EdgeStrategy, ``K`` for FedBuff, 1 for FedAsync).
    time_budget : float, optional
        Stop once this many clock seconds have passed since the start.
    max_misses : int (default: 3)
        A node whose messages go unanswered (forgotten after ``start``'s ``timeout``) this
        many times in a row is dropped for the rest of the run; the loop stops when no node
        is left to wait for.
    """

    slice_budget: float | Literal["auto"] = "auto"
    deadline: float | Literal["auto"] | None = "auto"
    deadline_factor: float = 3.0
    deadline_floor: float = 10.0
    accept_late: bool = True
    staleness_bound: int | None = None
    max_update_ratio: float | None = 1e6
    lookahead: float = 0.0
    poll_interval: float = 0.05
    registration_timeout: float = 120.0
    min_nodes: int | None = None
    time_budget: float | None = None
    max_misses: int = 3

    def __post_init__(self) -> None:
        if self.slice_budget != "auto":
            if isinstance(self.slice_budget, str):
                raise ConfigError(
                    f"slice_budget must be a number >= 0 or 'auto', got {self.slice_budget!r}"
                )
            _positive("slice_budget", self.slice_budget, allow_zero=True)
        if self.deadline != "auto":
            if isinstance(self.deadline, str):
                raise ConfigError(
                    f"deadline must be a number > 0, 'auto' or None, got {self.deadline!r}"
                )
            _positive("deadline", self.deadline, optional=True)
        validate.number("deadline_factor", self.deadline_factor, low=1.0)
        validate.number("deadline_floor", self.deadline_floor, low=0.0, low_inclusive=False)
        validate.integer("staleness_bound", self.staleness_bound, low=0, allow_none=True)
        _positive("max_update_ratio", self.max_update_ratio, optional=True)
        _positive("lookahead", self.lookahead, allow_zero=True)
        _positive("poll_interval", self.poll_interval)
        _positive("registration_timeout", self.registration_timeout, allow_zero=True)
        validate.integer("min_nodes", self.min_nodes, low=1, allow_none=True)
        _positive("time_budget", self.time_budget, optional=True)
        validate.integer("max_misses", self.max_misses, low=1)
        validate.boolean("accept_late", self.accept_late)


@dataclass(frozen=True)
class ShareConfig:
    """Sample shares (seed 000) and the weight coefficient ``c_i`` of each update.

    Parameters
    ----------
    profile : bool (default: True)
        Ask each node for its resource profile in its first train message (``profile-mode``;
        no separate ``query.profile`` message, which a plain ClientApp could not answer).
        Nodes that do not answer, or answer badly, get equal shares (logged).
    profile_mode : {"quick", "full"} (default: "quick")
        Sent to the clients with the profile query.
    profile_timeout : float (default: 120.0)
        Real seconds to wait for profile replies.
    profile_with_job : bool, optional
        Ask for the profile in the node's first train message *and* let it train that job
        (its profile comes back with the update; the share until the plan is the client's
        own default). ``False``: the first message asks for the profile only and the node
        waits for the plan. ``None`` (default): ``True`` under a wall clock, where every
        message costs a round trip (in Flower 1.42 a SuperNode starts one ClientApp process
        per message), ``False`` under a virtual clock, where the profile-only answer takes
        no virtual time and the shares are planned before any work is done.
    total_samples : int, optional
        Training samples per round over all nodes, ``F`` in seed formula 7 (default: the
        mean of the reported local sample counts times the number of nodes; 0 when nobody
        reports, which tells every client to use its own default).
    compute_share : float or "auto" (default: "auto")
        ``p_c`` of the distorted radar chart, in ``[0, 1]``. ``"auto"``: the operator
        analysis of the served model (:func:`flower_edge.operators.compute_share_of` on
        ``model`` and ``input_shape``), run once before the first round; 0.5 (logged) when
        no model is given.
    model : torch.nn.Module or callable, optional
        The served model, or a factory returning it (``"auto"`` only).
    input_shape : tuple of int, optional
        Shape of one training batch of ``model``, batch first, e.g. ``(32, 64)``.
    input_dtype : {"float32", "float64", "int64"} (default: "float32")
        dtype of that batch (zeros): ``"int64"`` for a model whose input is integer ids,
        such as the tokens of an ``nn.Embedding``.
    order_invariant : bool (default: False)
        Average the radar area over axis orders instead of the seed's C-G-M-D order.
    drop_empty_axes : bool (default: False)
        Leave a resource axis on which no node scores out of the radar chart (the seed keeps
        all four; see :func:`flower_edge.radar.radar_chart`).
    zero_ratio : {"equal", "none"} (default: "equal")
        The share of a profiled node whose match ratio is 0 (its radar polygon has no area,
        e.g. it scores 0 on two neighbouring axes). ``"none"``: the seed's
        ``f_d = F m_d / sum m = 0``, the node gets no training job (the ``edge-seed``
        preset). ``"equal"``: ``F / n`` like a node without a profile, so that its data still
        takes part (logged as a WARNING that names the node). Either way a node that a plan
        or a rebalancing leaves with 0 samples out of a positive total gets no job: 0
        samples means it does not train (:mod:`flower_edge.allocation`).
    max_share_fraction : float (default: 0.5)
        Cap on any node's share as a fraction of the total, against absurd profile claims;
        in ``(0, 1]`` and at least ``1 / number of nodes``.
    max_epochs : float, optional
        Cap on each node's share at this many epochs of its own local samples (as its
        profile reports them), ``> 0``; the rest of the total goes to the other nodes by
        match ratio, and rebalancing keeps within the caps. With label-skewed data a fast
        node given many epochs of its own data over-fits its labels and dominates the
        global model (docs/benchmarks/simulations.md). When every node's update is needed
        for an aggregation (a synchronous run), the samples the caps take off are not handed
        to slower nodes beyond their match-ratio share: the round trains fewer samples
        rather than wait for a slow node. ``None``: no per-node cap (the seed).
    min_epochs : float, optional
        Floor on each node's share at this many epochs of its own local samples (as its
        profile reports them), ``> 0`` and at most ``max_epochs``. A node that the match
        ratios or the rebalancing would give less (a slow device: seed 000 gives a node 10x
        slower a tenth of a fast one's share, or none once rebalancing finds that it cannot
        finish with the others) trains this much anyway, so that its data still takes part:
        with label-skewed data a slow node may hold labels that no other node has much of
        (docs/benchmarks/deployment.md, run 25). Its update arrives later and counts with
        its delay's decayed weight. The floor adds samples to the round's total and takes
        none from the other nodes. Not with ``zero_ratio="none"``. ``None``: no floor (the
        seed).
    rebalance : {"seed", "optimal", "off"} (default: "seed")
        After each aggregation refit ``T = k f + b`` per node and move samples (seed 000
        step 9, or the equal-finish optimum).
    weight_by : {"share", "num-examples", "uniform"} (default: "share")
        ``c_i``: the job's sample share (the seed names a weight coefficient and leaves it
        open; the share is this project's choice), the reported ``num-examples``, or 1.
    absurd_factor : float (default: 100.0)
        Reject a finished update claiming more than ``absurd_factor`` times its share of
        examples (when the share is known).
    """

    profile: bool = True
    profile_mode: ProfileMode = "quick"
    profile_timeout: float = 120.0
    profile_with_job: bool | None = None
    total_samples: int | None = None
    compute_share: float | Literal["auto"] = "auto"
    model: Any = None
    input_shape: tuple[int, ...] | None = None
    input_dtype: InputDtype = "float32"
    order_invariant: bool = False
    drop_empty_axes: bool = False
    zero_ratio: ZeroRatio = "equal"
    max_share_fraction: float = 0.5
    max_epochs: float | None = None
    min_epochs: float | None = None
    rebalance: RebalanceMethod = "seed"
    weight_by: WeightBasis = "share"
    absurd_factor: float = DEFAULT_ABSURD_FACTOR

    def __post_init__(self) -> None:
        validate.boolean("profile", self.profile)
        _choice("profile_mode", self.profile_mode, PROFILE_MODES)
        _positive("profile_timeout", self.profile_timeout, allow_zero=True)
        if self.profile_with_job is not None:
            validate.boolean("profile_with_job", self.profile_with_job)
        validate.integer(
            "total_samples", self.total_samples, low=0, high=MAX_SAMPLES, allow_none=True
        )
        if self.compute_share != "auto":
            if isinstance(self.compute_share, str):
                raise ConfigError(
                    f"compute_share must be in [0, 1] or 'auto', got {self.compute_share!r}"
                )
            _positive("compute_share", self.compute_share, allow_zero=True)
            if self.compute_share > 1:
                raise ConfigError(
                    f"compute_share must be in [0, 1] or 'auto', got {self.compute_share!r}"
                )
        if self.model is not None and self.input_shape is None:
            raise ConfigError("model needs input_shape (one training batch, batch first)")
        if self.input_shape is not None:
            shape = self.input_shape
            if (
                not isinstance(shape, tuple | list)
                or len(shape) < 2
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape)
            ):
                raise ConfigError(
                    "input_shape must be a tuple of at least 2 ints >= 1 (one training batch, "
                    f"batch first, e.g. (32, 64)), got {shape!r}"
                )
        _choice("input_dtype", self.input_dtype, INPUT_DTYPES)
        validate.boolean("order_invariant", self.order_invariant)
        validate.boolean("drop_empty_axes", self.drop_empty_axes)
        if self.model is not None and not callable(self.model):
            raise ConfigError(
                f"model must be a torch.nn.Module or a factory, got {type(self.model).__name__}"
            )
        _choice("zero_ratio", self.zero_ratio, ZERO_RATIOS)
        _positive("max_share_fraction", self.max_share_fraction)
        if self.max_share_fraction > 1:
            raise ConfigError(
                f"max_share_fraction must be in (0, 1], got {self.max_share_fraction!r}"
            )
        self._check_epochs()
        _choice("rebalance", self.rebalance, REBALANCE_METHODS)
        _choice("weight_by", self.weight_by, WEIGHT_BASES)
        _positive("absurd_factor", self.absurd_factor)
        if self.absurd_factor < 1:
            raise ConfigError(f"absurd_factor must be >= 1, got {self.absurd_factor!r}")

    def _check_epochs(self) -> None:
        """Check ``max_epochs`` and ``min_epochs``, alone and together."""
        validate.number(
            "max_epochs", self.max_epochs, low=0.0, low_inclusive=False, allow_none=True
        )
        validate.number(
            "min_epochs", self.min_epochs, low=0.0, low_inclusive=False, allow_none=True
        )
        if (
            self.min_epochs is not None
            and self.max_epochs is not None
            and self.min_epochs > self.max_epochs
        ):
            raise ConfigError(
                f"min_epochs ({self.min_epochs!r}) must be <= max_epochs ({self.max_epochs!r})"
            )
        if self.min_epochs is not None and self.zero_ratio == "none":
            raise ConfigError(
                "min_epochs cannot be combined with zero_ratio='none' (the seed's rule gives a "
                "node of match ratio 0 no job; the floor would give it one): drop one of them"
            )

    def with_job(self, *, virtual: bool) -> bool:
        """Return whether the first message asks for the profile *and* a job (see above)."""
        return not virtual if self.profile_with_job is None else self.profile_with_job


@dataclass(frozen=True)
class ValuationConfig:
    """Leave-one-out values of the participants (seed 001, step 4).

    Parameters
    ----------
    mode : {"loo", "first-order", "off"} (default: "loo")
        ``"loo"``: exact leave-one-out, one ``evaluate_fn`` call per participant on the
        global model without it (a subtraction from the running weighted sum).
        ``"first-order"``: the cheaper loss-based estimate from one gradient of the test
        loss (needs ``gradient_fn``). ``"off"``: equal values.
    metric_key : str (default: "accuracy")
        Key of the ``evaluate_fn`` MetricRecord to value by and to test convergence on.
    higher_is_better : bool (default: True)
        ``False`` for a loss-like metric.
    gradient_fn : callable, optional
        ``gradient_fn(arrays) -> list of arrays``: gradient of the test loss at ``arrays``
        (``"first-order"`` only).
    evaluate_many_fn : callable, optional
        ``evaluate_many_fn(round, [arrays, ...]) -> [MetricRecord, ...]``: evaluates the K
        leave-one-out models in one call (``"loo"`` only), e.g. one pass over the test set
        with the models stacked, instead of K calls of ``evaluate_fn``.
    drop_worst : bool (default: False)
        Not in the seed: use the leave-one-out evaluations before the step as well as after
        it. When the global model without one update scores better on ``metric_key`` than
        the full aggregate, the server keeps the best such model as the new global version
        (that update's weight is 0 in the history, and its value is 0 as the seed defines
        it); the values are still those of the full aggregate. It costs no evaluation that
        the values do not already make (``"loo"`` only). It selects on ``evaluate_fn``'s
        metric: give it a validation metric (e.g. ``metric_key="val-loss"`` on a server-held
        validation set), never the test set the run is reported on.
    step_search : tuple of float (default: ())
        Not in the seed: after the step (and ``drop_worst``'s choice) the server also tries
        the moves ``x + c (x_new - x)`` for each ``c`` (``x`` the global model before the
        aggregation, ``x_new`` after it; float tensors only) and keeps the one that scores
        best on ``metric_key``; ``x_new`` itself (``c = 1``) wins ties. One ``evaluate_fn``
        call per ``c``; a server line search on the validation set the values already use.
        Each ``c`` in ``(0, 100]``; empty: off. The ``edge`` preset's apps, which value on a
        validation set, search :data:`PRESET_STEP_SEARCH`.
    """

    mode: ValuationMode = "loo"
    metric_key: str = "accuracy"
    higher_is_better: bool = True
    gradient_fn: GradientFn | None = None
    evaluate_many_fn: EvaluateManyFn | None = None
    drop_worst: bool = False
    step_search: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        _choice("valuation mode", self.mode, VALUATION_MODES)
        if isinstance(self.step_search, str) or not isinstance(self.step_search, Sequence):
            got = type(self.step_search).__name__
            raise ConfigError(f"step_search must be a tuple of step factors, got {got}")
        factors = validate.numbers(
            "step_search", self.step_search, low=0.0, low_inclusive=False, high=100.0
        )
        object.__setattr__(self, "step_search", tuple(float(c) for c in factors))
        validate.text("metric_key", self.metric_key)
        validate.boolean("higher_is_better", self.higher_is_better)
        if self.mode == "first-order" and self.gradient_fn is None:
            raise ConfigError("valuation mode 'first-order' needs gradient_fn")
        validate.boolean("drop_worst", self.drop_worst)
        if self.drop_worst and self.mode != "loo":
            raise ConfigError(
                f"drop_worst needs the exact leave-one-out (mode 'loo'), got mode {self.mode!r}"
            )
        for name in ("gradient_fn", "evaluate_many_fn"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name} must be callable, got {type(fn).__name__}")


@dataclass(frozen=True)
class StopConfig:
    """Convergence criteria besides the round budget (``num_rounds`` of ``start``).

    Parameters
    ----------
    target : float, optional
        Stop once the test metric (``ValuationConfig.metric_key``) reaches it (>= when higher
        is better, <= otherwise).
    patience : int, optional
        Stop after this many aggregations without an improvement of more than ``min_delta``.
    min_delta : float (default: 0.0)
        Smallest improvement that resets the patience counter; ``>= 0``.
    patience_passes : float, optional
        With ``patience`` set: wait at least this many passes over the federation, i.e.
        ``ceil(patience_passes * nodes / updates per aggregation)`` aggregations, before
        calling a plateau (``> 0``). With many nodes and few updates per aggregation most
        nodes have not contributed yet after ``patience`` aggregations, and a noisy metric
        on label-skewed data is not a plateau (measured on ``mnist1d-200-skew``).
    window_passes : float, optional
        With ``patience`` set: judge the plateau on the mean metric of the last
        ``ceil(window_passes * nodes / updates per aggregation)`` aggregations instead of the
        last one (``> 0``; no plateau is called before the window is full). On non-IID data
        the metric of one aggregation swings by several points from one aggregation to the
        next: a single lucky high is not a best to beat (docs/benchmarks/simulations.md).
        ``target`` is always checked on the raw metric.
    metric_key : str, optional
        The ``evaluate_fn`` metric to stop on, when it is not the valuation's
        (``ValuationConfig.metric_key``), e.g. a target on the reported ``accuracy`` while the
        values and ``drop_worst`` read a validation loss.
    higher_is_better : bool, optional
        The direction of ``metric_key`` (default: the valuation's when ``metric_key`` is
        unset, else ``True``).
    """

    target: float | None = None
    patience: int | None = None
    min_delta: float = 0.0
    patience_passes: float | None = None
    window_passes: float | None = None
    metric_key: str | None = None
    higher_is_better: bool | None = None

    def __post_init__(self) -> None:
        if self.metric_key is not None:
            validate.text("metric_key", self.metric_key)
        if self.higher_is_better is not None:
            validate.boolean("higher_is_better", self.higher_is_better)
        validate.number("target", self.target, allow_none=True)
        validate.integer("patience", self.patience, low=1, allow_none=True)
        _positive("min_delta", self.min_delta, allow_zero=True)
        validate.number(
            "patience_passes",
            self.patience_passes,
            low=0.0,
            low_inclusive=False,
            allow_none=True,
        )
        validate.number(
            "window_passes",
            self.window_passes,
            low=0.0,
            low_inclusive=False,
            allow_none=True,
        )

    def key_and_direction(self, valuation: ValuationConfig) -> tuple[str, bool]:
        """Return the metric the stop reads and whether higher is better."""
        if self.metric_key is None:
            key, default = valuation.metric_key, valuation.higher_is_better
        else:
            key, default = self.metric_key, True
        return key, default if self.higher_is_better is None else self.higher_is_better

    def effective_patience(self, nodes: int, per_aggregation: int) -> int | None:
        """Return the plateau patience for ``nodes`` nodes and ``per_aggregation`` updates.

        ``max(patience, ceil(patience_passes * nodes / per_aggregation))``; ``patience``
        alone when ``patience_passes`` is unset; ``None`` when there is no plateau rule.
        """
        if self.patience is None or self.patience_passes is None:
            return self.patience
        validate.integer("nodes", nodes, low=1)
        validate.integer("per_aggregation", per_aggregation, low=1)
        passes = math.ceil(self.patience_passes * nodes / per_aggregation - 1e-9)
        return max(self.patience, passes)

    def effective_window(self, nodes: int, per_aggregation: int) -> int:
        """Return the aggregations whose mean metric the plateau rule compares.

        ``ceil(window_passes * nodes / per_aggregation)`` (at least 1); 1 when
        ``window_passes`` is unset.
        """
        if self.window_passes is None:
            return 1
        validate.integer("nodes", nodes, low=1)
        validate.integer("per_aggregation", per_aggregation, low=1)
        return max(1, math.ceil(self.window_passes * nodes / per_aggregation - 1e-9))


@dataclass(frozen=True)
class AbandonConfig:
    """How the server drives the clients' abandon rule (seed 001, the client's rule).

    A client still training from an older global when a newer one arrives abandons its
    stale work iff ``alpha * R + (1 - alpha) * V >= theta``. The server sends each node its
    ``R`` on the linear scale, ``sqrt(m / max m)``, and ``theta`` with every train message
    (:mod:`flower_edge.decision` explains the choices).

    Parameters
    ----------
    alpha : float (default: 0.5)
        Weight of ``R`` against ``V``, in ``[0, 1]``; set the clients' ``alpha`` run-config
        key to the same value (``flwr run`` shares one run config, so it is by default).
    theta : float, optional
        A fixed threshold, ``>= 0`` (``inf``: never abandon). ``None`` (default): derived
        after every aggregation from the live scores of the nodes, their ``quantile``
        (:func:`flower_edge.decision.derive_theta`).
    quantile : float (default: 0.5)
        Which quantile of the live scores is theta, in ``[0, 1]``: about a fraction
        ``1 - quantile`` of the nodes abandon stale work.
    """

    alpha: float = 0.5
    theta: float | None = None
    quantile: float = 0.5

    def __post_init__(self) -> None:
        validate.probability("alpha", self.alpha)
        validate.probability("quantile", self.quantile)
        validate.number("theta", self.theta, low=0.0, finite=False, allow_none=True)  # inf: never
