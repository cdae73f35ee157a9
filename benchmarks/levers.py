"""Exploration of the levers that close the edge strategy's speed gap on non-IID data.

Each run builds the simulation exactly as ``flower-edge simulate`` does (same devices, data,
ClientApp, virtual clock, in-process engine by default) but swaps the edge strategy's
``combine`` rule for one of :mod:`flower_edge.server_opt`'s (FedNova normalisation, CA2FL
cache, server momentum / Adam, staleness-adaptive server lr), or gives a baseline another
setting (FedBuff's server lr, FedAsync's alpha). Every seed mechanism stays in the edge runs:
match-ratio shares and rebalancing, threshold K, weights ``c_i g(dt_i)``, leave-one-out
values (through :class:`flower_edge.server_opt.StepSum`), the abandon rule.

``epoch_cap`` caps each node's share at that many epochs of its own data
(``ShareConfig.max_epochs``, the excess to the nodes below their caps). The rows of
``docs/benchmarks/simulations-raw/issue10-levers.jsonl`` were measured before the loop split
with a patch of the old loop that could also drop the excess (``redistribute`` false);
that variant lost and is gone.

One JSON line per run (``--jsonl``), as ``benchmarks/time_to_accuracy.py`` writes them.

Example::

    python benchmarks/levers.py --scenario mnist1d-100 --seeds 0 1 \\
        --variant 'nova:{"normalise": true, "server_lr": 0.5}' --jsonl out.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import simulations.app as sim_app
from flower_edge.arrays import NDArray
from flower_edge.server_opt import (
    ServerOptimizer,
    StepSum,
    UpdateCache,
    staleness_scale,
    work_normalised_step,
)
from simulations.app import SimSettings
from simulations.runner import run_experiment
from strategies.edge import EdgeStrategy
from strategies.records import Combined, Update

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from time_to_accuracy import _emit, _row  # noqa: E402


class LeverEdge(EdgeStrategy):
    """EdgeStrategy with the levers of :mod:`flower_edge.server_opt` on its delta rule."""

    def __init__(
        self,
        threshold: int,
        *,
        num_nodes: int,
        batch_size: int,
        normalise: bool = False,
        cache: str | None = None,
        optimizer: str = "sgd",
        beta1: float = 0.9,
        staleness_lr: bool = False,
        **options: Any,
    ) -> None:
        options.setdefault("aggregate", "deltas")
        super().__init__(threshold, **options)
        self.batch_size = batch_size
        self.normalise = normalise
        self.cache = None if cache is None else UpdateCache(num_nodes, divisor=cache)  # type: ignore[arg-type]
        self.optimizer = ServerOptimizer(optimizer, beta1=beta1)  # type: ignore[arg-type]
        self.staleness_lr = staleness_lr

    def combine(
        self,
        global_arrays: list[NDArray],
        updates: Sequence[Update],
        version: int,
        bases: dict[int, list[NDArray]],
    ) -> Combined:
        weights = [self.coefficient(u) * self.decay(u.delay) for u in updates]
        deltas = []
        for u in updates:
            base = bases.get(u.base_version, global_arrays)
            deltas.append(
                [
                    np.asarray(a, np.float64) - np.asarray(b, np.float64)
                    for a, b in zip(u.arrays, base, strict=True)
                ]
            )
        work = [max(1.0, (u.share or u.num_examples) / self.batch_size) for u in updates]
        scale = 1.0
        terms = deltas
        if self.normalise:
            _, scale = work_normalised_step(deltas, weights, work)
            terms = [[d / t for d in ds] for ds, t in zip(deltas, work, strict=True)]
        offset = None
        if self.cache is not None:
            offset = self.cache.mean(global_arrays)
            news = []
            for u, term, t in zip(updates, terms, work, strict=True):
                cached = self.cache.get(u.node_id)
                if cached is None:
                    news.append(term)
                else:
                    c = [h / t for h in cached] if self.normalise else cached
                    news.append([a - h for a, h in zip(term, c, strict=True)])
            terms = news
            if self.normalise:  # the cache holds normalised deltas: offset in their units
                offset = [scale * o for o in offset]
        lr = self.server_lr
        if self.staleness_lr:
            lr *= staleness_scale([version - u.base_version for u in updates])
        total = StepSum(
            global_arrays,
            lr,
            offset=offset,
            scale=scale,
            direction_fn=self.optimizer.peek,
        )
        for u, term, w in zip(updates, terms, weights, strict=True):
            total.add((u.node_id, u.job_id), term, w, checked=True)
        new = total.mean()  # the optimizer's peek: the same direction as apply's
        self.optimizer.apply(total.step_of(total.raw_mean()))
        if self.cache is not None:
            for u, d, t in zip(updates, deltas, work, strict=True):
                self.cache.store(u.node_id, [a / t for a in d] if self.normalise else d)
        return Combined(new, tuple(weights), total)


def _build_module() -> Any:
    """Return the module whose ``run_server`` looks ``build_strategy`` up."""
    return sys.modules[sim_app.run_server.__module__]


_ORIGINAL_BUILD = _build_module().build_strategy


def _install(build: Any) -> None:
    _build_module().build_strategy = build


_LEVER_KEYS = {"normalise", "cache", "optimizer", "beta1", "staleness_lr"}


def _patched_build(variant: dict[str, Any]) -> Any:
    original = _ORIGINAL_BUILD

    def build(settings: SimSettings, clock: Any) -> Any:
        strategy = original(settings, clock)
        sc = settings.scenario
        if settings.strategy == "fedbuff" and "fedbuff_lr" in variant:
            strategy.server_lr = float(variant["fedbuff_lr"])
        if settings.strategy == "fedasync" and "fedasync_alpha" in variant:
            strategy.alpha = float(variant["fedasync_alpha"])
        if settings.strategy != "edge":
            return strategy
        shares = strategy.shares
        if "weight_by" in variant:
            shares = replace(shares, weight_by=variant["weight_by"])
        if "max_share_over_mean" in variant:
            frac = min(1.0, float(variant["max_share_over_mean"]) / sc.num_clients)
            shares = replace(shares, max_share_fraction=frac)
        if variant.get("values_off"):  # exploration only: saves K + 1 evaluations per round
            from strategies.config import ValuationConfig

            options_valuation = ValuationConfig(mode="off")
        else:
            options_valuation = strategy.valuation
        if "epoch_cap" in variant:  # the rest goes to the nodes below their caps
            shares = replace(shares, max_epochs=float(variant["epoch_cap"]))
        if "total_fraction" in variant and shares.total_samples:
            total = max(1, round(shares.total_samples * float(variant["total_fraction"])))
            shares = replace(shares, total_samples=total)
        levers = {k: v for k, v in variant.items() if k in _LEVER_KEYS}
        return LeverEdge(
            threshold=sc.edge_k,
            num_nodes=sc.num_clients,
            batch_size=sc.batch_size,
            decay=settings.decay,
            decay_a=settings.decay_a,
            server_lr=float(variant.get("server_lr", strategy.server_lr)),
            loop=strategy.loop,
            shares=shares,
            valuation=options_valuation,
            clock=clock,
            **levers,
        )

    return build


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--scenario", default="mnist1d-100")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--strategy", default="edge")
    p.add_argument(
        "--variant",
        action="append",
        required=True,
        help="label:JSON of lever options (repeatable)",
    )
    p.add_argument("--shares", default="match")
    p.add_argument("--engine", default="inprocess")
    p.add_argument("--jsonl", default=None)
    p.add_argument("--budget-fraction", type=float, default=1.0, help="of the update budget")
    args = p.parse_args(argv)
    from pathlib import Path

    out = None if args.jsonl is None else Path(args.jsonl)
    for spec in args.variant:
        label, _, text = spec.partition(":")
        variant = json.loads(text) if text else {}
        _install(_patched_build(variant))
        for seed in args.seeds:
            s = SimSettings.create(args.scenario, args.strategy, seed=seed, shares=args.shares)
            if args.budget_fraction != 1.0:
                s = replace(s, rounds=max(1, round(s.rounds * args.budget_fraction)))
            r = run_experiment(s, engine=args.engine)
            _emit(out, _row(label, r, {"variant": variant, "shares": args.shares}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
