"""The two presets of the edge method, ``edge`` and ``edge-seed``, and their honest labels.

``edge-seed``
    The seeds exactly: model averaging ``sum_i w_i x_i / sum_i w_i``
    (:data:`SEED_OPTIONS` switches every departure of :class:`~strategies.EdgeStrategy`
    off), uncapped shares ``f_d = F m_d / sum m`` (``max_share_fraction = 1``), the four
    radar axes, leave-one-out values as the seed defines them. Where the seeds leave a value
    "preset" (R's scale, alpha, theta, the decay g), both presets use the same choice.
``edge``
    The project's best configuration: :class:`~strategies.EdgeStrategy`'s defaults with the
    scenario's edge settings on top, and shares capped at
    :data:`~simulations.settings.MAX_SHARE_OVER_MEAN` times the mean. Every seed mechanism
    stays in (match-ratio shares and rebalancing, threshold K, decayed weights, values sent
    back, the abandon rule, the convergence stop); :func:`departures` names each way it
    differs from the seed, and the description of its row says so.

Adding an option to ``EdgeStrategy`` that changes the method means adding its seed value to
:data:`SEED_OPTIONS` (a test fails otherwise), so that ``edge-seed`` stays the seed and the
departure shows up in ``edge``'s description.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from simulations.settings import SimSettings

__all__ = [
    "EDGE_PRESETS",
    "VALIDATION_METRIC",
    "NOT_METHOD_OPTIONS",
    "SEED_OPTIONS",
    "departures",
    "describe",
    "edge_options",
    "edge_server_lr",
]

#: the strategy names that run :class:`~strategies.EdgeStrategy`
EDGE_PRESETS: Final = ("edge", "edge-seed")

#: the metric of the ``edge`` preset's server-held validation set that it values, drops
#: updates and stops on (the test set's ``accuracy`` only scores the run)
VALIDATION_METRIC: Final = "val-loss"

#: the value of every method option of ``EdgeStrategy`` under which it is the seed's rule
SEED_OPTIONS: Final[dict[str, Any]] = {
    "aggregate": "models",
    "server_lr": 1.0,
    "staleness_lr": False,
    "average_passes": None,
    "serve_better": False,
    "server_opt": None,
}

#: ``EdgeStrategy`` keywords that do not change the method (settings of the run)
NOT_METHOD_OPTIONS: Final = frozenset(
    {
        "threshold",
        "decay",
        "decay_a",
        "decay_b",
        "loop",
        "shares",
        "valuation",
        "stop",
        "abandon",
        "clock",
        "checkpoint_dir",
        "resume",
        "model",
        "options",
    }
)

#: what the seed prescribes, for the descriptions
SEED_TEXT: Final = (
    "the seeds exactly: model averaging sum w_i x_i / sum w_i, uncapped shares "
    "F m_d / sum m (none for a match ratio of 0), four radar axes, leave-one-out values"
)
#: the choices the seeds leave open ("preset"), the same in both presets
PRESET_TEXT: Final = (
    "R = sqrt(m / max m) x availability, unvalued V = mean value, theta = median live score, "
    "negative leave-one-out contributions count as 0 before the ratio (the seed's "
    "contribution over total contribution presumes none is negative), the delay from the "
    "send time of the global model the update started from"
)


def strategy_defaults() -> dict[str, Any]:
    """Return ``EdgeStrategy``'s keyword defaults (its method options and the rest)."""
    from strategies.edge import EdgeStrategy

    params = inspect.signature(EdgeStrategy.__init__).parameters.values()
    return {
        p.name: p.default
        for p in params
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty
    }


def edge_options(settings: SimSettings) -> dict[str, Any]:
    """Return the method options to pass to ``EdgeStrategy`` for ``settings``' preset.

    ``edge-seed``: :data:`SEED_OPTIONS`. ``edge``: the scenario's edge settings and the
    run's overrides (``aggregate``, ``server_lr``); every other option keeps
    ``EdgeStrategy``'s default.
    """
    if settings.strategy == "edge-seed":
        return dict(SEED_OPTIONS)
    from strategies.config import ValuationConfig

    sc = settings.scenario
    aggregate = sc.edge_aggregate if settings.aggregate is None else settings.aggregate
    options: dict[str, Any] = {
        "aggregate": aggregate,
        "server_lr": edge_server_lr(settings),
        "staleness_lr": sc.edge_staleness_lr,
        "average_passes": sc.edge_average_passes,
        "server_opt": sc.edge_server_opt if aggregate == "deltas" else None,
    }
    if sc.edge_validation is not None:  # the server's validation set (simulations.server)
        options["valuation"] = ValuationConfig(
            metric_key=VALIDATION_METRIC,
            higher_is_better=False,
            drop_worst=sc.edge_drop_worst,
            step_search=sc.edge_step_search,
        )
        options["serve_better"] = sc.edge_serve_better and sc.edge_average_passes is not None
    return options


def edge_server_lr(settings: SimSettings) -> float:
    """Return the ``edge`` preset's server lr: the run's, else the scenario's.

    The scenario's (0.01) is the server optimizer's step; a run that overrides the
    aggregation to ``"models"`` (no server optimizer) gets the seed's 1.0 instead.
    """
    if settings.server_lr is not None:
        return settings.server_lr
    sc = settings.scenario
    aggregate = sc.edge_aggregate if settings.aggregate is None else settings.aggregate
    return sc.edge_server_lr if aggregate == "deltas" else 1.0


def _departure(name: str, value: Any, seed: Any) -> str:
    """Return how option ``name`` at ``value`` departs from the seed's ``seed``."""
    if name == "average_passes":
        return (
            f"average_passes={value:g}: the served model is the moving average of the global "
            f"models over {value:g} pass(es) of the federation (seed: the global model)"
        )
    if name == "server_opt":
        what = {
            "sign": "the global model moves by server_lr per coordinate, in the direction of "
            "the sign of the mean delta (a server signSGD step)",
            "sgd": "the plain step",
            "momentum": f"FedAvgM, momentum {value.beta1:g}",
            "adam": f"FedAdam (beta1 {value.beta1:g}, beta2 {value.beta2:g}, tau {value.tau:g}"
            + (", bias-corrected" if value.bias_correction else "")
            + ")",
            "rprop": "Rprop on the sign of the mean delta: a rate per coordinate grows "
            f"x{value.grow:g} while the sign holds, shrinks x{value.shrink:g} when it flips, "
            f"within [{value.min_rate:g}, {value.max_rate:g}] x server_lr",
        }[value.kind]
        return f"server_opt={value.kind}: {what} (seed: the plain average)"
    if name == "serve_better":
        return (
            "serve_better=True: the served model is the global model instead of the average "
            f"when it scores better on the validation set's {VALIDATION_METRIC} (seed: the "
            "global model)"
        )
    return f"{name}={value} (seed: {seed})"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(a == b)


def departures(settings: SimSettings) -> list[str]:
    """Name every way ``settings``' edge preset differs from the seed (``[]`` for edge-seed)."""
    from simulations.settings import MAX_SHARE_OVER_MEAN

    if settings.strategy == "edge-seed":
        return []
    effective = {**strategy_defaults(), **edge_options(settings)}
    out = [
        _departure(name, effective[name], seed)
        for name, seed in SEED_OPTIONS.items()
        if name in effective and not _same(effective[name], seed)
    ]
    if settings.shares == "uniform":
        out.append("equal shares, no rebalancing (seed: match-ratio shares)")
    elif MAX_SHARE_OVER_MEAN * 1.0 / settings.scenario.num_clients < 1.0:
        out.append(f"shares capped at {MAX_SHARE_OVER_MEAN:g}x the mean (seed: uncapped)")
    if settings.shares != "uniform":
        out.append("a node of match ratio 0 trains F / n samples (seed: none)")
    sc = settings.scenario
    if sc.edge_validation is not None:
        out.append(
            f"values and the stop on the server's validation set ({sc.edge_validation} "
            f"training samples, {VALIDATION_METRIC}; seed: the test set's accuracy)"
        )
        if sc.edge_drop_worst:
            out.append(
                "drop_worst: an aggregation leaves out its worst update when the validation "
                "loss says it hurts (seed: every update aggregated)"
            )
        if sc.edge_step_search:
            factors = ", ".join(f"{c:g}" for c in sc.edge_step_search)
            out.append(
                f"step_search=({factors}): the server scales each step by the factor whose "
                "model has the lowest validation loss (seed: one step)"
            )
    if settings.shares != "uniform" and settings.scenario.edge_max_epochs is not None:
        epochs = settings.scenario.edge_max_epochs
        out.append(
            f"shares capped at {epochs:g} epoch{'' if epochs == 1 else 's'} of each node's "
            "own data (seed: uncapped)"
        )
    return out


def describe(settings: SimSettings) -> str:
    """Return the one-line description of a run's strategy, departures from the seed named."""
    name = settings.strategy
    if name == "edge-seed":
        return f"edge-seed: {SEED_TEXT}; presets: {PRESET_TEXT}"
    if name == "edge":
        changes = departures(settings)
        listed = "; ".join(changes) if changes else "none"
        return f"edge: every seed mechanism on; departures from the seed: {listed}"
    return {
        "fedavg": "fedavg: Flower's FedAvg, synchronous, every client every round",
        "fedbuff": "fedbuff: FedBuff (Nguyen et al. 2022), buffer of K updates",
        "fedasync": "fedasync: FedAsync (Xie et al. 2019), one update per aggregation",
    }.get(name, name)
