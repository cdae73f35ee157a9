"""Asynchronous baselines on the same event loop: FedBuff and FedAsync.

Flower's own :class:`~flwr.serverapp.strategy.FedAvg` is the synchronous baseline. Both
baselines here send no values and, by default, do not profile nodes (equal shares) and send
whole jobs (no slices: ``loop`` defaults to :data:`BASELINE_LOOP`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Unpack

import numpy as np

from flower_edge import validate
from flower_edge.arrays import NDArray, cast_like
from flower_edge.staleness import (
    DECAY_PARAMS,
    MIXINGS,
    MixingName,
    fedasync_mixing,
    fedbuff_weight,
)
from strategies.base import SemiAsyncStrategy, StrategyOptions
from strategies.config import LoopConfig, ShareConfig, ValuationConfig
from strategies.records import Combined, Update

__all__ = ["BASELINE_LOOP", "FedAsync", "FedBuff", "fedbuff_weighted_sum"]


#: the baselines' loop when none is given: whole jobs, no slices (their clients never abandon,
#: so a slice boundary would only cost a round trip; the papers send one message per job)
BASELINE_LOOP = LoopConfig(slice_budget=0.0)


def _baseline_defaults(options: StrategyOptions) -> StrategyOptions:
    """Return ``options`` with the baselines' defaults: no profiling, values, decay, slices."""
    if options.get("loop") is None:
        options["loop"] = BASELINE_LOOP
    options.setdefault("shares", ShareConfig(profile=False, rebalance="off"))
    options.setdefault("valuation", ValuationConfig(mode="off"))
    options.setdefault("decay", "constant")
    return options


class _WithoutValues(SemiAsyncStrategy):
    """A baseline on the semi-async loop: no leave-one-out values, none sent to the clients."""

    def values_enabled(self) -> bool:
        """Return ``False``: no values."""
        return False

    def sends_values(self) -> bool:
        """Return ``False``: no values."""
        return False


class FedBuff(_WithoutValues):
    """FedBuff: buffered asynchronous aggregation (Nguyen et al., AISTATS 2022).

    Aggregates when the buffer holds K updates (``>= threshold``): ``x <- x + eta * (1/K)
    sum_i s(tau_i) (x_i - x_{base_i})`` with ``s(tau) = 1 / sqrt(1 + tau)`` and ``tau_i`` the
    versions published since update i's base.

    Parameters
    ----------
    threshold : int
        Buffer size K, ``>= 1`` and ``<=`` the number of nodes.
    server_lr : float (default: 1.0)
        ``eta``, ``> 0``.
    **options : StrategyOptions
        As :class:`~strategies.base.SemiAsyncStrategy` (defaults: no profiling, no values,
        no slices; typed: an unknown keyword raises ``TypeError``).
    """

    name = "fedbuff"
    needs_bases = True

    def __init__(
        self, threshold: int, *, server_lr: float = 1.0, **options: Unpack[StrategyOptions]
    ) -> None:
        super().__init__(threshold, **_baseline_defaults(options))
        self.server_lr = self.validate_options(server_lr)

    @staticmethod
    def validate_options(server_lr: object) -> float:
        """Check FedBuff's own option (``server_lr > 0``); raise ConfigError naming it."""
        return validate.number("server_lr", server_lr, low=0.0, low_inclusive=False)

    def aggregation_due(self, buffered: int) -> bool:
        """Return ``buffered >= K``."""
        return buffered >= self.threshold

    def trigger_text(self) -> str:
        """Describe the trigger."""
        return f">= K = {self.threshold}"

    def summary_lines(self) -> list[str]:
        """Return FedBuff's update rule and server learning rate for ``summary()``."""
        return [
            f"update: x + server_lr * (1/K) sum_i (x_i - x_base_i) / sqrt(1 + staleness_i), "
            f"server_lr {self.server_lr:g} (the decay above is not used)"
        ]

    def combine(
        self,
        global_arrays: list[NDArray],
        updates: Sequence[Update],
        version: int,
        bases: dict[int, list[NDArray]],
    ) -> Combined:
        """Apply the mean of the staleness-weighted deltas."""
        sums, weights = fedbuff_weighted_sum(global_arrays, updates, version, bases)
        out = [
            cast_like(ref.astype(np.float64) + self.server_lr * total / len(updates), ref)
            for ref, total in zip(global_arrays, sums, strict=True)
        ]
        return Combined(out, weights)


def fedbuff_weighted_sum(
    global_arrays: Sequence[NDArray],
    updates: Sequence[Update],
    version: int,
    bases: dict[int, list[NDArray]],
) -> tuple[list[NDArray], tuple[float, ...]]:
    """Return ``sum_i s(tau_i) (x_i - x_base_i)`` (float64, one array per tensor) and the ``s``.

    FedBuff's step is this sum over ``K = len(updates)``; ``tau_i = version - base_version_i``.
    """
    weights = tuple(fedbuff_weight(version - u.base_version) for u in updates)
    steps = []
    for i, ref in enumerate(global_arrays):
        step = np.zeros(ref.shape, dtype=np.float64)
        for update, weight in zip(updates, weights, strict=True):
            base = bases[update.base_version][i]
            step += weight * (update.arrays[i].astype(np.float64) - base.astype(np.float64))
        steps.append(step)
    return steps, weights


class FedAsync(_WithoutValues):
    """FedAsync: mix every update into the global as it arrives (Xie, Koyejo, Gupta, 2019).

    ``x <- (1 - alpha_t) x + alpha_t x_new`` with ``alpha_t = alpha * s(t - tau)``,
    ``s`` polynomial ``(1 + t - tau)^-a``, hinge or constant. ``threshold`` is fixed to 1
    (every update aggregates).

    Parameters
    ----------
    alpha : float (default: 0.6)
        Base mixing weight in ``(0, 1]``.
    staleness_fn : {"polynomial", "hinge", "constant"} (default: "polynomial")
        ``s``.
    a, b : float (default: 0.5, 4.0)
        Parameters of ``s``: ``a > 0`` (polynomial and hinge), ``b >= 0`` (hinge); both
        checked whatever ``staleness_fn`` is.
    **options : StrategyOptions
        As :class:`~strategies.base.SemiAsyncStrategy` (defaults: no profiling, no values,
        no slices; typed: an unknown keyword, ``threshold`` included, raises ``TypeError``).
    """

    name = "fedasync"

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        staleness_fn: MixingName = "polynomial",
        a: float = 0.5,
        b: float = 4.0,
        **options: Unpack[StrategyOptions],
    ) -> None:
        if "threshold" in options:  # K is fixed to 1: refuse it rather than drop it silently
            raise TypeError(
                "FedAsync() got an unexpected keyword argument 'threshold' "
                "(FedAsync mixes every update in at once: its K is always 1)"
            )
        super().__init__(1, **_baseline_defaults(options))
        self.staleness_fn = self.validate_options(alpha, staleness_fn, a, b)
        self.alpha = alpha
        self.a = a
        self.b = b

    @staticmethod
    def validate_options(alpha: float, staleness_fn: object, a: float, b: float) -> MixingName:
        """Check FedAsync's own options; return ``staleness_fn`` typed (ConfigError names it).

        ``alpha`` in ``(0, 1]``, ``staleness_fn`` one of :data:`MIXINGS`, ``a > 0``,
        ``b >= 0``.
        """
        kind = validate.choice("staleness_fn", staleness_fn, MIXINGS)
        fedasync_mixing(alpha, 0, kind, a, b)  # type: ignore[arg-type]  # alpha
        for param, value in (("a", a), ("b", b)):  # also the one that kind does not use
            DECAY_PARAMS[param].check(value)
        return kind  # type: ignore[return-value]  # one of MIXINGS

    def aggregation_due(self, buffered: int) -> bool:
        """Return ``True``: every update is mixed in at once."""
        return buffered >= 1

    def trigger_text(self) -> str:
        """Describe the trigger."""
        return ">= 1 (every update)"

    def summary_lines(self) -> list[str]:
        """Return FedAsync's mixing rule and its settings for ``summary()``."""
        params = {"polynomial": f", a {self.a:g}", "hinge": f", a {self.a:g}, b {self.b:g}"}
        return [
            f"update: (1 - alpha_t) x + alpha_t x_i, alpha_t = alpha * s(staleness); alpha "
            f"{self.alpha:g}, s {self.staleness_fn}{params.get(self.staleness_fn, '')} "
            "(the decay above is not used)"
        ]

    def combine(
        self,
        global_arrays: list[NDArray],
        updates: Sequence[Update],
        version: int,
        bases: dict[int, list[NDArray]],
    ) -> Combined:
        """Mix the updates in, one after the other."""
        current = [ref.astype(np.float64) for ref in global_arrays]
        weights = []
        for update in updates:
            mix = fedasync_mixing(
                self.alpha, version - update.base_version, self.staleness_fn, self.a, self.b
            )
            weights.append(mix)
            current = [
                (1.0 - mix) * c + mix * x.astype(np.float64)
                for c, x in zip(current, update.arrays, strict=True)
            ]
        out = [cast_like(c, ref) for c, ref in zip(current, global_arrays, strict=True)]
        return Combined(out, tuple(weights))
