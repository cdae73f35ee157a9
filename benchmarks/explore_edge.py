"""Exploration of the edge preset's settings on the bundled scenarios (issue 10, session 2).

Each variant builds the simulation exactly as ``flower-edge simulate`` does (same devices,
data, ClientApp, virtual clock; the in-process engine) and then changes the built edge
strategy. A variant is ``label:JSON`` with any of these keys:

``threshold``
    K of the edge strategy (the round budget is recomputed so that the update budget stays
    the scenario's).
``server_lr``, ``staleness_lr``, ``average_passes``
    The edge strategy's server step.
``max_epochs``, ``max_share_over_mean``, ``total_fraction``, ``shares``
    Share caps in epochs of a node's own data, in multiples of the mean share, the total
    samples per round as a fraction of the scenario's, and any other ``ShareConfig`` field.
``slice_budget``, ``theta``
    Slice length (virtual seconds; 0 = whole jobs) and a fixed abandon threshold.
``decay_a``, ``abandon_quantile``
    The exponent ``a`` of the preset's polynomial decay ``(1 + dt)^-a`` (0.5), and the
    quantile of the live scores that the derived abandon threshold takes (0.5; higher: fewer
    nodes abandon) (issue 10, nineteenth session).
``step_search``
    The library's server line search, ``ValuationConfig(step_search=[...])`` (issue 10,
    twenty-fourth session): the step scaled by the factor that scores best on the server's
    validation set, after ``drop_worst``'s choice (``line_search`` is the older wrapper).
    Since the twenty-fifth session the preset searches ``(1, 1.5, 2, 3)`` itself; ``[]`` turns
    it off.
``plain_search``
    ``[eta, ...]`` (issue 10, twenty-fifth session): after the library's step the server also
    scores the plain step ``x + eta * m`` (``m`` the weighted mean delta of the updates the
    step kept, before the sign and the server lr: FedBuff's kind of step) and keeps the model
    with the best validation metric. Rows get ``step_scales``: how many aggregations took each
    factor (1000 + eta: the plain step).
``nostop``
    No plateau stop (the round budget only). A run without the stop has the same history
    as with it up to the aggregation where the stop would have ended it, so a stop rule can
    be replayed on its curve.
``anneal``
    ``[start, floor]``: cosine decay of the server lr from ``start`` (fraction of the
    round budget) down to ``floor`` times the server lr.
``tau_decay``
    Decay the weights by staleness in versions instead of delay in seconds.
``nova``, ``wdata``
    Weights ``n_i g(dt_i)`` (``n_i`` the node's own data size from its profile), with
    (``nova``: FedNova's normalisation of each delta by its work) or without it.
``fedbuff_combine``
    The edge strategy combines its buffer with FedBuff's rule (``strategies.baselines.FedBuff``:
    ``x + server_lr * sum_i s(tau_i) delta_i / n``, ``server_lr`` from ``server_lr``, 1.0 by
    default) instead of its own; its dispatch, shares, slices and abandon rule stay (issue 10,
    session 6: which part of the method makes the difference from FedBuff).
``ca2fl``
    ``"all"`` or ``"seen"`` (issue 10, session 15): CA2FL's cached calibration (Wang et al.,
    ICLR 2024) as the edge strategy's combine. The server keeps each node's latest delta
    ``h_i``; the step is ``h + sum_i w_i (delta_i - h_i) / sum_i w_i`` with the preset's
    weights ``w_i`` (shares times decay), ``h`` the mean of the cached deltas before this
    buffer (``"all"``: over the scenario's ``N`` nodes, a node never heard from counting
    as 0, as in the paper; ``"seen"``: over the nodes cached so far) and ``h_i = 0`` for a
    node not cached yet; the server lr (with its staleness scaling), shares, slices,
    abandon rule, values, stop and served model stay the preset's.
``server_opt``
    ``{"kind": "momentum" | "adam" | "sgd", "beta1", "beta2", "tau", "lr", "lr_scale",
    "bias_correction"}``
    (issue 10, session 17): a server optimizer on the aggregated pseudo-gradient (Reddi et
    al., ICLR 2021), through the library's ``EdgeStrategy(server_opt=ServerOptConfig(...))``:
    the step ``s`` is the preset's weighted mean delta and the new global is ``x + lr * u``,
    ``u`` the optimizer's direction for ``s`` (``"momentum"``: FedAvgM, ``m <- beta1 m + s``,
    ``u = m``; ``"adam"``: FedAdam, ``u = m / (sqrt(v) + tau)``, with ``bias_correction``
    Adam's), ``lr`` the server lr (``lr`` if given, else the preset's) times ``lr_scale``
    (default 1) times the preset's staleness scaling. Every candidate (the mean and each
    leave-one-out mean) is the same rule, and the optimizer steps once per aggregation with
    the model served (``strategies.edge``). Not with ``screen`` or ``line_search`` (they serve
    a model the combine did not make).
``prox``
    ``mu`` (issue 10, session 15): FedProx's proximal term ``mu / 2 ||w - w_0||^2`` added to
    the local loss of every job of this variant, ``w_0`` the global model the job started
    from (kept across the job's slices). Only the runs of the variant train with it (the
    training function is restored for the next variant).
``ema``
    A list of decays ``beta`` (issue 10, session 5): besides the global model, the run
    evaluates after every aggregation the server-side exponential moving average
    ``e_t = beta e_{t-1} + (1 - beta) x_t`` of the global models (Polyak averaging of the
    iterates; the clients still train from ``x_t``). Each row gets ``ema``: one curve per
    decay, on the aggregation times of ``curve``. Works for every strategy.
``line_search``
    ``{"etas": [...], "val": n}`` (issue 10, session 7): after the strategy's own combine,
    the server tries the steps ``g + c (x_new - g)`` for every ``c`` in ``etas`` and keeps
    the one with the lowest loss on a validation set of ``n`` samples drawn (per seed) from
    the training pool, never from the test set. Works for edge and FedBuff.
``valuation_set``
    ``n`` (issue 10, session 7): the leave-one-out values are computed on ``n`` samples
    drawn (per seed) from the training pool instead of the test set, which then serves
    only the reported accuracy (and the stop). Whether values read off the test set give
    the edge strategy an edge it would not have with a validation set of its own.
``screen``
    ``{"val": n, "mode": "worst" | "harmful"}`` (issue 10, session 8): the seed's
    leave-one-out idea used before the step instead of after it. After the strategy's own
    combine, the server also combines the buffer without each update in turn and scores
    every candidate by its loss on ``n`` training-pool samples (never the test set).
    ``worst`` keeps the best of the full step and the leave-one-out steps; ``harmful``
    drops every update whose removal lowers the loss (at most all but one); ``"metric":
    "accuracy"`` scores by accuracy instead (a tie keeps the full step). Works for edge and
    FedBuff.
``serve_better``
    ``EdgeStrategy(serve_better=...)`` (issue 10, session 10: first explored here, now on in
    the preset; ``false`` turns it off).
``scenario``
    Scenario fields for this variant (e.g. ``{"learning_rate": 0.05}``): a setting of the
    federation, the same whatever the strategy (issue 10, session 10).
``strategy``, ``fedbuff_lr``
    Run another strategy of the scenario (e.g. ``"fedbuff"``) with these settings;
    ``threshold`` and ``k_schedule`` apply to FedBuff too (its rule: a buffer of K).
``fedbuff_sign``
    ``lr`` (issue 10, session 18): FedBuff given the edge preset's server sign step, to
    tell what the step adds from what the rest of the method adds. FedBuff's own step
    ``s = (1/K) sum_i s(tau_i) delta_i`` is kept and the new global is
    ``x + lr * mean_i s(tau_i) * sign(s)`` on float tensors (the preset's staleness scaling;
    integer tensors take ``s`` itself, as under the library's server optimizers).
``k_schedule``
    An adaptive K (issue 10, session 3): ``{"k0": 2, "step": 10}`` gives
    ``K_t = min(K, k0 + floor(t / step))`` at global version ``t`` (by version);
    ``{"k0": 2, "until": 0.75}`` gives ``K_t = k0`` until an evaluated accuracy first
    exceeds ``until`` times the scenario's target, then ``K`` (by progress). ``K`` is the
    scenario's (or ``threshold``), the strategy's own rule stays (edge: more than ``K_t``,
    FedBuff: ``K_t``), ``K_t >= 1``. The plateau stop and ``min_nodes`` stay sized for
    ``K``. The run ends after the aggregation that uses up the scenario's update budget
    (``Scenario.update_budget`` client updates), the round budget being set above it.

One JSON line per run (as ``benchmarks/time_to_accuracy.py`` writes them) to ``--jsonl``.

Example::

    python benchmarks/explore_edge.py --scenario digits-20 --seeds 0 1 2 3 4 \\
        --jsonl out.jsonl 'cap2:{"max_epochs": 2.0, "server_lr": 1.0}' 'ref:{}'
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

import clients.jobs as jobs_module
import strategies.edge as edge_module
import strategies.evaluation as evaluation_module
import strategies.loop as loop_module
from flower_edge.aggregation import WeightedSum
from flower_edge.arrays import cast_like
from flower_edge.server_opt import ServerOptConfig, staleness_scale
from flower_edge.staleness import make_decay
from simulations.app import SimSettings
from simulations.runner import run_experiment
from strategies.baselines import FedBuff, fedbuff_weighted_sum
from strategies.config import StopConfig
from strategies.records import Combined, Update

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_to_accuracy as tta  # noqa: E402

_ORIGINAL_INIT = loop_module.EventLoop.__init__
BUILT: list[Any] = []  # the strategies built, last one last (for ``ema``)


def _remember_loop(self: Any, strategy: Any, *args: Any, **kwargs: Any) -> None:
    """EventLoop.__init__ that lets the strategy reach its loop (profiles, for ``wdata``)."""
    _ORIGINAL_INIT(self, strategy, *args, **kwargs)
    strategy.explore_loop = self
    valuation = getattr(strategy, "explore_valuation", None)
    if valuation is not None:
        _valuate_on(self.evaluation, valuation)
    betas = getattr(strategy, "explore_ema", None)
    if betas:
        _track_ema(self.evaluation, strategy, [float(b) for b in betas])


def _pool_scorer(settings: SimSettings, n: int, offset: int) -> tuple[Any, list[str]]:
    """Return ``(score, keys)``: ``score(state_dict)`` evaluates the scenario's model on ``n``
    samples drawn (with seed ``offset + seed``) from the training pool, never the test set."""
    import torch
    from torch.utils.data import TensorDataset

    from clients.data import _pool_and_test
    from clients.task import evaluate_model
    from simulations.nodes import build_task

    (x, y), _ = _pool_and_test(settings.scenario.dataset)
    rng = np.random.default_rng(offset + settings.seed)
    idx = rng.choice(len(y), size=min(len(y), n), replace=False)
    val = TensorDataset(torch.from_numpy(x[idx]), torch.from_numpy(y[idx]))
    model = build_task(settings).model_fn()
    loss_fn = torch.nn.CrossEntropyLoss()

    def score(state: Any) -> Any:
        model.load_state_dict(state, strict=True)
        with torch.no_grad():
            return evaluate_model(model, loss_fn, val)

    return score, list(model.state_dict().keys())


def _validation_fn(settings: SimSettings, n: int) -> Callable[[int, Any], Any]:
    """Return an ``evaluate_fn`` on ``n`` training-pool samples (never the test set)."""
    from flwr.app import MetricRecord

    score, _ = _pool_scorer(settings, n, 20_000)

    def evaluate(rnd: int, arrays: Any) -> Any:
        res = score(arrays.to_torch_state_dict())
        return MetricRecord({"accuracy": res.accuracy, "loss": res.loss})

    return evaluate


def _valuate_on(evaluation: Any, fn: Callable[[int, Any], Any]) -> None:
    """Make ``evaluation.valuate`` compute every metric it uses with ``fn``."""
    from strategies.evaluation import to_record

    original = evaluation.valuate

    def valuate(rnd: int, total: Any, count: int, metrics: Any) -> Any:
        if total is None or metrics is None:
            return original(rnd, total, count, metrics)
        test_fn = evaluation.evaluate_fn
        evaluation.evaluate_fn = fn
        try:
            full = fn(rnd, to_record(evaluation.keys, total.mean()))
            return original(rnd, total, count, full)
        finally:
            evaluation.evaluate_fn = test_fn

    evaluation.valuate = valuate


def _track_ema(evaluation: Any, strategy: Any, betas: list[float]) -> None:
    """Make ``evaluation.evaluate`` also evaluate the moving averages of the global models.

    Only the first evaluation of a version counts (leave-one-out evaluates more models under
    the same version); the averages are scored with the same ``evaluate_fn`` under version -1.
    """
    raw = evaluation.evaluate
    averages: dict[float, list[Any] | None] = dict.fromkeys(betas)
    strategy.ema_curves = {b: [] for b in betas}
    last: dict[str, int | None] = {"version": None}

    def evaluate(rnd: int, arrays: Sequence[Any]) -> Any:
        out = raw(rnd, arrays)
        if rnd == last["version"]:
            return out
        last["version"] = rnd
        for b in betas:
            prev = averages[b]
            now = [np.asarray(a, dtype=np.float64) for a in arrays]
            if prev is not None:
                now = [b * e + (1 - b) * x for e, x in zip(prev, now, strict=True)]
            averages[b] = now
            typed = [e.astype(np.asarray(a).dtype) for e, a in zip(now, arrays, strict=True)]
            metrics = raw(-1, typed)
            acc = None if metrics is None else float(metrics.get("accuracy", math.nan))
            strategy.ema_curves[b].append(acc)
        return out

    evaluation.evaluate = evaluate


loop_module.EventLoop.__init__ = _remember_loop  # type: ignore[method-assign]


def _data_weighted(strategy: Any, normalise: bool) -> Any:
    """A combine with weights ``n_i g(dt_i)``, optionally FedNova-normalised deltas."""

    def combine(
        global_arrays: list[Any], updates: Sequence[Update], version: int, bases: dict[int, Any]
    ) -> Combined:
        profiles = strategy.explore_loop.planner.profiles
        lr = strategy.server_lr
        if strategy.staleness_lr:
            lr *= staleness_scale([max(0, version - u.base_version) for u in updates])
        weights, work = [], []
        for u in updates:
            p = profiles.get(u.node_id)
            n = p.local_samples if p is not None and p.local_samples > 0 else u.num_examples
            weights.append(float(n) * strategy.decay(u.delay))
            work.append(float(max(1, u.share or u.num_examples)))
        tau = sum(w * t for w, t in zip(weights, work, strict=True)) / sum(weights)
        total = edge_module._StepSum(global_arrays, lr, deltas=True)
        for u, w, t in zip(updates, weights, work, strict=True):
            base = bases.get(u.base_version, global_arrays)
            delta = [edge_module._delta(a, b) for a, b in zip(u.arrays, base, strict=True)]
            if normalise:
                delta = [d * (tau / t) for d in delta]
            total.add((u.node_id, u.job_id), delta, w, checked=True)
        return Combined(total.mean(), tuple(weights), total)

    return combine


class _CalibratedSum(edge_module._StepSum):
    """A ``_StepSum`` of calibrated deltas ``delta_i - h_i``; its step adds the cache mean ``h``."""

    def __init__(self, global_arrays: Sequence[Any], lr: float, cache_mean: list[Any] | None):
        super().__init__(global_arrays, lr, deltas=True)
        self._cache_mean = cache_mean

    def _finish(self, arrays: Sequence[Any]) -> list[Any]:
        if self._cache_mean is not None:
            arrays = [
                np.asarray(a, dtype=np.float64) + h if h is not None else a
                for a, h in zip(arrays, self._cache_mean, strict=True)
            ]
        return super()._finish(arrays)  # type: ignore[no-any-return]


def _ca2fl(strategy: Any, num_nodes: int, mode: str) -> Any:
    """CA2FL's combine (see ``ca2fl``): buffered deltas calibrated by each node's cached delta."""
    if mode not in ("all", "seen"):
        raise ValueError(f"ca2fl must be 'all' or 'seen', got {mode!r}")
    cache: dict[int, list[Any]] = {}  # node id -> its latest delta (float64; None for ints)

    def cache_mean() -> list[Any] | None:
        if not cache:
            return None
        rows = list(cache.values())
        n = num_nodes if mode == "all" else len(rows)
        return [None if col[0] is None else sum(col) / n for col in zip(*rows, strict=True)]

    def combine(
        global_arrays: list[Any], updates: Sequence[Update], version: int, bases: dict[int, Any]
    ) -> Combined:
        lr = strategy.server_lr
        if strategy.staleness_lr:
            lr *= staleness_scale([max(0, version - u.base_version) for u in updates])
        total = _CalibratedSum(global_arrays, lr, cache_mean())
        weights, fresh = [], {}
        for u in updates:
            w = strategy.coefficient(u) * strategy.decay(u.delay)
            base = bases.get(u.base_version, global_arrays)
            delta = [edge_module._delta(a, b) for a, b in zip(u.arrays, base, strict=True)]
            floats = [d if d.dtype.kind == "f" else None for d in delta]
            old = cache.get(u.node_id)
            calibrated = (
                delta
                if old is None
                else [d if h is None else d - h for d, h in zip(delta, old, strict=True)]
            )
            total.add((u.node_id, u.job_id), calibrated, w, checked=True)
            fresh[u.node_id] = floats
            weights.append(w)
        cache.update(fresh)  # h_i <- delta_i after the step (the buffer's own old h_i used)
        return Combined(total.mean(), tuple(weights), total)

    return combine


def _server_opt(strategy: Any, spec: dict[str, Any]) -> None:
    """Give the edge strategy a server optimizer (``server_opt``), the library's own option.

    ``EdgeStrategy(server_opt=ServerOptConfig(...))`` with ``server_lr`` = ``lr`` (default:
    the preset's) times ``lr_scale``. Until the seventeenth session's library option this
    variant swapped the combine for a copy of the rule; that copy gave the same rows (digits-20
    seeds 0 and 1, FedAdam ``beta1 = 0``, bit for bit), and ran the optimizer twice once the
    library's own sum took an optimizer, so the copy is gone.
    """
    rprop = ("grow", "shrink", "max_rate", "min_rate")
    known = {"kind", "beta1", "beta2", "tau", "lr", "lr_scale", "bias_correction", *rprop}
    unknown = set(spec) - known
    if unknown:
        raise ValueError(f"server_opt: unknown keys {sorted(unknown)}")
    if strategy.aggregate != "deltas":
        raise ValueError("server_opt needs the preset's aggregate='deltas'")
    strategy.server_opt = ServerOptConfig(
        spec.get("kind", "momentum"),
        beta1=float(spec.get("beta1", 0.9)),
        beta2=float(spec.get("beta2", 0.99)),
        tau=float(spec.get("tau", 1e-3)),
        bias_correction=bool(spec.get("bias_correction", False)),
        **{key: float(spec[key]) for key in rprop if key in spec},
    )
    strategy.server_optimizer = strategy.server_opt.build()
    strategy.server_lr = float(spec.get("lr", strategy.server_lr)) * float(
        spec.get("lr_scale", 1.0)
    )


_ORIGINAL_START_JOB = jobs_module.start_job
_ORIGINAL_RUN_SLICE = jobs_module.run_slice
_ORIGINAL_TRAIN_SLICE = getattr(jobs_module, "train_slice")  # noqa: B009 (not exported)
PROX_MISSES: list[int] = []  # slices of a job whose start was not seen (trained without prox)


def _install_prox(mu: float | None) -> None:
    """Train every job with FedProx's term ``mu`` (``None``: restore plain training)."""
    import torch

    if mu is None:
        jobs_module.start_job = _ORIGINAL_START_JOB
        jobs_module.run_slice = _ORIGINAL_RUN_SLICE
        setattr(jobs_module, "train_slice", _ORIGINAL_TRAIN_SLICE)  # noqa: B010
        return
    weight = float(mu)
    anchors: dict[int, tuple[int, list[Any]]] = {}  # node -> (job id, w_0 of that job)
    current: dict[str, Any] = {"anchor": None}

    def start_job(
        rt: Any, job_id: int, base_version: int, share: int, arrays: Any, s: Any, node_id: int
    ) -> Any:
        job = _ORIGINAL_START_JOB(rt, job_id, base_version, share, arrays, s, node_id)
        params = [p for p in job.slot.model.parameters() if p.requires_grad]
        anchors[node_id] = (job_id, [p.detach().clone() for p in params])
        return job

    def run_slice(rt: Any, job: Any, train: Any, s: Any, node_id: int, **kw: Any) -> Any:
        job_id, anchor = anchors.get(node_id, (None, None))
        current["anchor"] = anchor if job_id == job.record.job_id else None
        if current["anchor"] is None:
            PROX_MISSES.append(1)
        try:
            return _ORIGINAL_RUN_SLICE(rt, job, train, s, node_id, **kw)
        finally:
            current["anchor"] = None

    class ProxLoss(torch.nn.Module):
        def __init__(self, base: Any, model: Any, anchor: list[Any]) -> None:
            super().__init__()
            self.base, self.anchor = base, anchor
            self.params = [p for p in model.parameters() if p.requires_grad]

        def forward(self, out: Any, y: Any) -> Any:
            prox = sum(((p - a) ** 2).sum() for p, a in zip(self.params, self.anchor, strict=True))
            return self.base(out, y) + 0.5 * weight * prox

    def train_slice(model: Any, optimizer: Any, loss_fn: Any, *args: Any, **kw: Any) -> Any:
        anchor = current["anchor"]
        if anchor is not None:
            loss_fn = ProxLoss(loss_fn, model, anchor)
        return _ORIGINAL_TRAIN_SLICE(model, optimizer, loss_fn, *args, **kw)

    jobs_module.start_job = start_job
    jobs_module.run_slice = run_slice
    setattr(jobs_module, "train_slice", train_slice)  # noqa: B010


def _annealed(strategy: Any, rounds: int, start: float, floor: float) -> Any:
    """A combine whose server lr decays (cosine) from ``start`` of the budget to ``floor``."""
    base_lr = strategy.server_lr
    original = strategy.combine

    def combine(g: Any, updates: Any, version: int, bases: Any) -> Combined:
        frac = version / max(1, rounds)
        x = min(1.0, max(0.0, (frac - start) / max(1e-9, 1.0 - start)))
        strategy.server_lr = base_lr * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * x)))
        return original(g, updates, version, bases)  # type: ignore[no-any-return]

    return combine


def _by_versions(strategy: Any, scale: float) -> Any:
    """A combine that decays by staleness in versions instead of delay in seconds."""
    original = strategy.combine

    def combine(g: Any, updates: Sequence[Update], version: int, bases: Any) -> Combined:
        stale = [
            dataclasses.replace(u, delay=float(max(0, version - u.base_version)) * scale)
            for u in updates
        ]
        return original(g, stale, version, bases)  # type: ignore[no-any-return]

    return combine


def _line_search(s: Any, settings: SimSettings, spec: dict[str, Any]) -> None:
    """Wrap ``s.combine``: keep the step size with the lowest validation loss (``line_search``)."""
    import torch

    evaluate, keys = _pool_scorer(settings, int(spec.get("val", 300)), 10_000)
    etas = [float(e) for e in spec.get("etas", [0.5, 1.0, 1.5, 2.0, 3.0])]
    original = s.combine
    s.explore_etas = []

    def score(arrays: Sequence[Any]) -> float:
        state = {k: torch.from_numpy(np.array(a)) for k, a in zip(keys, arrays, strict=True)}
        return float(evaluate(state).loss)

    def combine(g: Any, updates: Any, version: int, bases: Any) -> Combined:
        c: Combined = original(g, updates, version, bases)
        best, best_eta, best_arrays = math.inf, 1.0, c.arrays
        for eta in etas:
            cand = [
                (ga + eta * (np.asarray(na) - ga)).astype(np.asarray(na).dtype)
                if np.issubdtype(np.asarray(na).dtype, np.floating)
                else na
                for ga, na in zip(g, c.arrays, strict=True)
            ]
            value = score(cand)
            if value < best:
                best, best_eta, best_arrays = value, eta, cand
        s.explore_etas.append(best_eta)
        return Combined(best_arrays, c.weights, c.total)

    s.combine = combine


def _screen(s: Any, settings: SimSettings, spec: dict[str, Any]) -> None:
    """Wrap ``s.combine``: leave out the updates whose removal lowers the validation loss."""
    import torch

    evaluate, keys = _pool_scorer(settings, int(spec.get("val", 300)), 20_000)
    mode = str(spec.get("mode", "worst"))
    by_accuracy = spec.get("metric", "loss") == "accuracy"
    original = s.combine
    s.explore_dropped = []

    def score(arrays: Sequence[Any]) -> float:
        state = {k: torch.from_numpy(np.array(a)) for k, a in zip(keys, arrays, strict=True)}
        result = evaluate(state)
        return -float(result.accuracy) if by_accuracy else float(result.loss)

    def combine(g: Any, updates: Any, version: int, bases: Any) -> Combined:
        c: Combined = original(g, updates, version, bases)
        if len(updates) < 2:
            s.explore_dropped.append(0)
            return c
        full = score(c.arrays)
        loo = []
        for i in range(len(updates)):
            rest = [u for j, u in enumerate(updates) if j != i]
            cand = original(g, rest, version, bases)
            loo.append((score(cand.arrays), i, cand))
        if mode == "worst":
            best = min(loo, key=lambda t: t[0])
            if best[0] >= full:
                s.explore_dropped.append(0)
                return c
            keep_arrays, dropped = best[2].arrays, {best[1]}
        else:
            dropped = {i for value, i, _ in loo if value < full}
            if len(dropped) >= len(updates):
                dropped = {min(loo, key=lambda t: t[0])[1]}
            if not dropped:
                s.explore_dropped.append(0)
                return c
            rest = [u for j, u in enumerate(updates) if j not in dropped]
            keep_arrays = original(g, rest, version, bases).arrays
        s.explore_dropped.append(len(dropped))
        weights = tuple(0.0 if i in dropped else w for i, w in enumerate(c.weights))
        return Combined(keep_arrays, weights, c.total)

    s.combine = combine


def k_at(version: int, k: int, schedule: dict[str, Any], reached: bool = False) -> int:
    """Return ``K_t`` of ``schedule`` at global ``version`` (never below 1 nor above ``k``).

    Parameters
    ----------
    version : int
        The current global version ``t`` (aggregations so far).
    k : int
        The final K (the scenario's).
    schedule : dict
        ``{"k0", "step"}`` (by version) or ``{"k0", "until"}`` (by progress).
    reached : bool
        By progress: whether an evaluated accuracy has exceeded the switch point.

    Returns
    -------
    int
        ``min(k, k0 + version // step)``, or ``k0`` before the switch and ``k`` after it.
    """
    k0 = int(schedule["k0"])
    if "step" in schedule:
        return max(1, min(k, k0 + version // int(schedule["step"])))
    return max(1, min(k, k if reached else k0))


def _adaptive_k(s: Any, settings: SimSettings, schedule: dict[str, Any]) -> None:
    """Make the built strategy's trigger read ``K_t`` of ``schedule`` (see ``k_schedule``)."""
    k = int(s.threshold)
    per_aggregation = int(s.updates_per_aggregation())  # sized for K: stop window, min_nodes
    rule: Callable[[Any, int], bool] = type(s).aggregation_due
    switch = float(schedule.get("until", 0.0)) * settings.scenario.target_accuracy
    budget = settings.scenario.update_budget
    state = {"reached": False, "used": 0}

    def due(buffered: int) -> bool:
        loop = getattr(s, "explore_loop", None)
        version = 0 if loop is None else int(loop.version)
        if not state["reached"] and "until" in schedule:
            accs = [float(r.metrics.get("accuracy", -1.0)) for r in s.history]
            state["reached"] = any(a > switch for a in accs)
        kt = k_at(version, k, schedule, bool(state["reached"]))
        if not rule(SimpleNamespace(threshold=kt), buffered):
            return False
        if loop is not None and buffered == len(loop.buffer):  # the loop's own trigger
            state["used"] += buffered
            if state["used"] >= budget:  # this aggregation uses up the update budget
                loop.stopper.num_rounds = min(loop.stopper.num_rounds, version + 1)
        return True

    s.aggregation_due = due
    s.updates_per_aggregation = lambda: per_aggregation


def _shares(s: Any, settings: SimSettings, variant: dict[str, Any]) -> Any:
    """The built strategy's ShareConfig with the variant's share settings."""
    shares = s.shares
    if "max_epochs" in variant:
        shares = dataclasses.replace(shares, max_epochs=variant["max_epochs"])
    if "max_share_over_mean" in variant:
        fraction = min(1.0, variant["max_share_over_mean"] / settings.scenario.num_clients)
        shares = dataclasses.replace(shares, max_share_fraction=fraction)
    if "total_fraction" in variant and shares.total_samples:
        total = max(1, round(shares.total_samples * variant["total_fraction"]))
        shares = dataclasses.replace(shares, total_samples=total)
    if "shares" in variant:
        shares = dataclasses.replace(shares, **variant["shares"])
    return shares


def _rules(s: Any, variant: dict[str, Any]) -> None:
    """Apply the variant's slice length, decay exponent and abandon quantile."""
    if "slice_budget" in variant:
        s.loop = dataclasses.replace(s.loop, slice_budget=variant["slice_budget"])
    if "decay_a" in variant:
        s.decay = make_decay("polynomial", a=float(variant["decay_a"]))
    if "abandon_quantile" in variant:
        s.abandon = dataclasses.replace(s.abandon, quantile=float(variant["abandon_quantile"]))


def _change(s: Any, settings: SimSettings, variant: dict[str, Any]) -> None:
    """Apply the variant's loop, stop and aggregation settings to the built edge strategy."""
    if variant.get("nostop"):
        s.stop = StopConfig()
    for key in ("server_lr", "threshold", "staleness_lr", "average_passes", "serve_better"):
        if key in variant:
            setattr(s, key, variant[key])
    _rules(s, variant)
    if "step_search" in variant:  # the library's ValuationConfig(step_search=...)
        factors = tuple(float(c) for c in variant["step_search"])
        s.valuation = dataclasses.replace(s.valuation, step_search=factors)
    if variant.get("nova") or variant.get("wdata"):
        s.combine = _data_weighted(s, normalise=bool(variant.get("nova")))
    if variant.get("tau_decay"):
        s.combine = _by_versions(s, float(variant.get("tau_scale", 1.0)))
    if variant.get("fedbuff_combine"):
        # FedBuff's own combine (its threshold plays no part in it)
        s.combine = FedBuff(s.threshold, server_lr=float(variant.get("server_lr", 1.0))).combine
    if "ca2fl" in variant:
        s.combine = _ca2fl(s, settings.scenario.num_clients, str(variant["ca2fl"]))
    if "server_opt" in variant:
        _server_opt(s, dict(variant["server_opt"]))
    if "anneal" in variant:
        start, floor = variant["anneal"]
        s.combine = _annealed(s, settings.rounds, float(start), float(floor))


#: the library's ``Step.of`` (a classmethod), kept on the library module so that loading this
#: script twice (the tests do) never takes a patched one for the original
_ORIGINAL_STEP_OF: Any = evaluation_module.__dict__.setdefault(
    "_library_step_of", evaluation_module.Step.__dict__["of"]
)
#: the factor of each aggregation's step under ``plain_search`` (1000 + eta: the plain step)
STEP_SCALES: list[float] = []


def _plain_search(etas: Sequence[float]) -> None:
    """Variant ``plain_search``: the step search also tries the plain mean-delta step.

    After the library's step (the sign step, ``drop_worst``'s choice, ``step_search``) the
    server also scores ``x + eta * m`` for each ``eta``, ``m`` the weighted mean delta (before
    the sign and the server lr) of the updates the step kept, and keeps
    whichever model has the best validation metric (issue 10, twenty-fifth session: a
    direction search between the sign step and FedBuff's plain step). ``[]`` restores the
    library's rule.
    """
    if not etas:
        evaluation_module.Step.of = _ORIGINAL_STEP_OF  # type: ignore[method-assign]
        return

    def of(cls: Any, evaluation: Any, combined: Any, rnd: int, base: Any = None) -> Any:
        step = _ORIGINAL_STEP_OF.__func__(cls, evaluation, combined, rnd, base)
        total = combined.total
        if base is None or not hasattr(total, "_steps"):  # edge's sum of deltas
            return step
        if step.scale != 1.0:
            current = evaluation.metric(step.searched)
        else:
            current = step.chosen_metric(evaluation)
        if current is None:
            return step
        if step.dropped is None:
            mean = WeightedSum.mean(total)
        else:
            mean = WeightedSum.mean_without(total, total.keys[step.dropped])
        move = total._steps(mean)  # the weighted mean delta itself
        sign = 1.0 if evaluation.config.higher_is_better else -1.0
        best = sign * current
        for eta in etas:
            moved = [
                cast_like(np.asarray(b, np.float64) + eta * d, np.asarray(a))
                if np.asarray(a).dtype.kind == "f"
                else np.asarray(a)
                for a, b, d in zip(step.arrays, base, move, strict=True)
            ]
            metrics = evaluation.evaluate(rnd, moved)
            value = evaluation.metric(metrics)
            if value is not None and not math.isnan(value) and sign * value > best:
                best = sign * value
                step = step._replace(
                    arrays=moved,
                    scale=1000.0 + eta,
                    searched=metrics,
                    searched_at=evaluation.calls,
                )
        STEP_SCALES.append(step.scale)
        return step

    evaluation_module.Step.of = classmethod(of)


def install(variant: dict[str, Any]) -> None:
    """Make ``build_strategy`` apply ``variant`` to the strategies it builds."""
    _plain_search([float(e) for e in variant.get("plain_search", [])])
    module: Any = sys.modules[tta.run_server_module()]
    original = getattr(module, "_original_build_strategy", module.build_strategy)
    module._original_build_strategy = original

    strategy = variant.get("strategy", "edge")
    prox = variant.get("prox")
    if prox is not None and strategy not in ("edge", "edge-seed"):
        raise ValueError(f"prox trains the edge runs only, not strategy {strategy!r}")
    _install_prox(None if prox is None else float(prox))

    def build(settings: SimSettings, clock: Any) -> Any:
        s = original(settings, clock)
        BUILT.append(s)
        if "ema" in variant:
            s.explore_ema = list(variant["ema"])
        if "valuation_set" in variant:
            s.explore_valuation = _validation_fn(settings, int(variant["valuation_set"]))
        if settings.strategy in ("edge", "edge-seed"):
            s.shares = _shares(s, settings, variant)
            _change(s, settings, variant)
        elif settings.strategy == "fedbuff":
            _change_fedbuff(s, variant)
        if "k_schedule" in variant:
            _adaptive_k(s, settings, variant["k_schedule"])
        if "line_search" in variant:
            _line_search(s, settings, variant["line_search"])
        if "screen" in variant:
            _screen(s, settings, variant["screen"])
        return s

    module.build_strategy = build


def _change_fedbuff(strategy: Any, variant: dict[str, Any]) -> None:
    """Apply the variant's FedBuff settings (``fedbuff_lr``, ``threshold``, ``fedbuff_sign``)."""
    if "fedbuff_lr" in variant:
        strategy.server_lr = float(variant["fedbuff_lr"])
    if "threshold" in variant:
        strategy.threshold = int(variant["threshold"])
    if "fedbuff_sign" in variant:
        _fedbuff_sign(strategy, float(variant["fedbuff_sign"]))


def _fedbuff_sign(strategy: Any, lr: float) -> None:
    """Give a FedBuff strategy the edge preset's sign step (variant ``fedbuff_sign``)."""

    def combine(
        global_arrays: list[Any], updates: Sequence[Update], version: int, bases: dict[int, Any]
    ) -> Combined:
        sums, weights = fedbuff_weighted_sum(global_arrays, updates, version, bases)
        steps = [total / len(updates) for total in sums]
        scaled = lr * staleness_scale([max(0, version - u.base_version) for u in updates])
        out = [
            cast_like(
                ref.astype(np.float64)
                + (scaled * np.sign(step) if np.issubdtype(ref.dtype, np.floating) else step),
                ref,
            )
            for ref, step in zip(global_arrays, steps, strict=True)
        ]
        return Combined(out, weights)

    strategy.combine = combine


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scenario", default="mnist1d-100")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--jsonl", type=Path, required=True)
    p.add_argument("variants", nargs="+", help="label:JSON (see above)")
    args = p.parse_args(argv)
    for spec in args.variants:
        label, _, text = spec.partition(":")
        variant: dict[str, Any] = json.loads(text) if text else {}
        install(variant)
        strategy = variant.get("strategy", "edge")
        for seed in args.seeds:
            theta = {"theta": float(variant["theta"])} if "theta" in variant else {}
            s = SimSettings.create(args.scenario, strategy, seed=seed, **theta)  # type: ignore[arg-type]
            if "scenario" in variant:  # the same for every strategy: a scenario setting
                sc = dataclasses.replace(s.scenario, **variant["scenario"])
                s = dataclasses.replace(s, scenario=sc, rounds=sc.rounds_for(strategy))
            if "threshold" in variant:
                k = dataclasses.replace(
                    s.scenario, threshold=int(variant["threshold"]), edge_threshold=None
                )
                s = dataclasses.replace(s, rounds=k.rounds_for(strategy))
            if "k_schedule" in variant:  # ends on the update budget (see k_schedule)
                s = dataclasses.replace(s, rounds=s.scenario.update_budget)
            r = run_experiment(s, engine="inprocess")
            updates = sum(h.participants for h in r.history)
            extra: dict[str, Any] = {"variant": variant, "updates_aggregated": updates}
            etas = getattr(BUILT[-1], "explore_etas", None)
            if etas:
                extra["etas"] = etas
            if "prox" in variant:
                extra["prox_misses"] = len(PROX_MISSES)
                PROX_MISSES.clear()
            optimizer = getattr(BUILT[-1], "server_optimizer", None)
            if optimizer is not None:  # optimizer steps taken, one per aggregation
                extra["server_opt_steps"] = optimizer.steps
            if STEP_SCALES:
                extra["step_scales"] = {f"{c:g}": STEP_SCALES.count(c) for c in set(STEP_SCALES)}
                STEP_SCALES.clear()
            dropped = getattr(BUILT[-1], "explore_dropped", None)
            if dropped:
                extra["dropped"] = sum(dropped)
            curves = getattr(BUILT[-1], "ema_curves", {})
            if curves:  # one accuracy per evaluated version: the initial model, then each round
                times = [h.virtual_time for h in r.history]
                extra["ema"] = {
                    str(b): [[t, a] for t, a in zip(times, c, strict=False)]
                    for b, c in curves.items()
                }
            tta._emit(args.jsonl, tta._row(label, r, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
