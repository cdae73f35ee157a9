"""Settings of one simulation run, validated: :class:`SimSettings` and the run-config keys.

The Flower App (:mod:`simulations.app`) reads its settings from the run config
(``[tool.flwr.app.config]``, or ``flwr run . --run-config "key=value ..."``), validated by
:meth:`SimSettings.from_run_config` before any message is sent:


=======================  =====================================================================
key                      meaning (default)
=======================  =====================================================================
``scenario``             scenario name (``digits-20``); see ``simulations.scenarios``
``strategy``             ``edge`` | ``edge-seed`` | ``fedavg`` | ``fedbuff`` | ``fedasync`` (edge);
                         one strategy: ``all`` is only for ``flower-edge simulate``
``num-server-rounds``    aggregations; 0 = the scenario's update budget (0)
``threshold``            K; 0 = the scenario's (0)
``decay``                staleness decay of the edge strategy (``polynomial``)
``decay-a``              its parameter (0.5)
``alpha``, ``theta``     abandon rule: ``score = alpha R + (1 - alpha) V >= theta`` (0.5, -1);
                         theta < 0: the server derives it from the live scores (the median)
``seed``                 seed of devices, data partition, model and sampling (0)
``clients``              number of clients; 0 = the scenario's (0)
``heterogeneity``        fastest / slowest compute; 0 = the scenario's (0)
``shares``               ``match`` (radar match ratio + rebalancing) | ``uniform`` (``match``)
``slice-budget``         virtual seconds per train message; 0 = no slices; < 0 = the
                         scenario's (-1)
=======================  =====================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final, Literal, TypedDict, Unpack, cast, get_args

from flower_edge import validate
from flower_edge.errors import ConfigError, InputError
from simulations.scenarios import (
    MAX_ROUNDS,
    MAX_SEED,
    STRATEGIES,
    Scenario,
    StrategyName,
    resolve_scenario,
    resolve_strategies,
)

if TYPE_CHECKING:
    from strategies.edge import Aggregate

__all__ = [
    "MAX_SHARE_OVER_MEAN",
    "MESSAGE_TIMEOUT",
    "RUN_CONFIG_DEFAULTS",
    "SHARE_MODES",
    "ShareMode",
    "SimSettings",
]

ShareMode = Literal["match", "uniform"]
SHARE_MODES: tuple[str, ...] = get_args(ShareMode)

# ---------------------------------------------------------------- run-config keys
SCENARIO: Final = "scenario"
STRATEGY: Final = "strategy"
NUM_SERVER_ROUNDS: Final = "num-server-rounds"
THRESHOLD: Final = "threshold"
DECAY: Final = "decay"
DECAY_A: Final = "decay-a"
ALPHA: Final = "alpha"
THETA: Final = "theta"
SEED: Final = "seed"
CLIENTS: Final = "clients"
HETEROGENEITY: Final = "heterogeneity"
SHARES: Final = "shares"
SLICE_BUDGET: Final = "slice-budget"

#: every key and its default (0 / -1 = the scenario's value)
RUN_CONFIG_DEFAULTS: Final[dict[str, str | int | float]] = {
    SCENARIO: "digits-20",
    STRATEGY: "edge",
    NUM_SERVER_ROUNDS: 0,
    THRESHOLD: 0,
    DECAY: "polynomial",
    DECAY_A: 0.5,
    ALPHA: 0.5,
    THETA: -1.0,
    SEED: 0,
    CLIENTS: 0,
    HETEROGENEITY: 0.0,
    SHARES: "match",
    SLICE_BUDGET: -1.0,
}
#: real seconds after which an unanswered message is forgotten
MESSAGE_TIMEOUT: Final = 600.0
#: cap on a node's sample share, as a multiple of the mean share. Data stays on the devices:
#: a share beyond the local data means more local epochs, and a fast node given many times
#: its data both overfits its own labels (non-IID) and dominates the share-weighted average.
MAX_SHARE_OVER_MEAN: Final = 3.0


class SimOptions(TypedDict, total=False):
    """The optional fields of :class:`SimSettings` that :meth:`SimSettings.create` passes on."""

    decay: str
    decay_a: float
    alpha: float
    theta: float | None
    shares: ShareMode
    aggregate: Aggregate | None
    server_lr: float | None


def _one_strategy(field: str, value: str, selects: str) -> str:
    """Return the message for a strategy name that selects several strategies (``"all"``)."""
    return (
        f"{field} must name one strategy ({', '.join(STRATEGIES)}), got {value!r}: {selects} "
        "one strategy; 'all' is only for `flower-edge simulate --strategy all`"
    )


@dataclass(frozen=True)
class SimSettings:
    """Everything one simulation run needs, validated.

    Parameters
    ----------
    scenario : Scenario
        The resolved scenario (client count, heterogeneity and K applied).
    strategy : {"edge", "edge-seed", "fedavg", "fedbuff", "fedasync"}
        Strategy to run (``simulations.presets`` describes the two edge presets).
    seed : int
        Seed of devices, partition, initial model and local sampling (>= 0).
    rounds : int
        Aggregations (>= 1).
    decay : str (default: "polynomial")
        Staleness decay of the edge strategy.
    decay_a : float (default: 0.5)
        Parameter of the decay (> 0).
    alpha : float (default: 0.5)
        Weight of resources in the abandon score, in [0, 1].
    theta : float, optional
        Abandon threshold (>= 0; ``math.inf`` never abandons); ``None`` (default): the
        server derives it from the live scores (:func:`flower_edge.decision.derive_theta`).
    shares : {"match", "uniform"} (default: "match")
        Sample shares from the radar match ratio (with rebalancing) or equal shares.
    aggregate : {"models", "deltas"}, optional
        What the edge strategy averages (default: the scenario's ``edge_aggregate``).
    server_lr : float, optional
        The edge strategy's server learning rate (default: the scenario's ``edge_server_lr``).
    """

    scenario: Scenario
    strategy: StrategyName
    seed: int
    rounds: int
    decay: str = "polynomial"
    decay_a: float = 0.5
    alpha: float = 0.5
    theta: float | None = None
    shares: ShareMode = "match"
    aggregate: Aggregate | None = None
    server_lr: float | None = None

    def __post_init__(self) -> None:
        resolve_strategies(self.strategy)
        validate.choice("strategy", self.strategy, STRATEGIES, error=InputError)
        validate.integer("seed", self.seed, low=0, high=MAX_SEED, error=InputError)
        validate.integer("rounds", self.rounds, low=1, high=MAX_ROUNDS, error=InputError)
        validate.probability("alpha", self.alpha, error=InputError)
        validate.number(
            "theta", self.theta, low=0.0, finite=False, allow_none=True, error=InputError
        )  # inf: never abandon
        validate.choice("shares", self.shares, SHARE_MODES, error=InputError)
        self._check_strategy_options()

    def _check_strategy_options(self) -> None:
        """Check the edge strategy's options with the validators of the decay and the strategy.

        SimSettings does not repeat their ranges: :func:`flower_edge.staleness.make_decay`
        checks the decay and its parameter, :meth:`strategies.EdgeStrategy.validate_options`
        the aggregation options as the edge preset would pass them.
        """
        from flower_edge.staleness import make_decay
        from simulations.presets import edge_server_lr
        from strategies.edge import EdgeStrategy

        make_decay(self.decay, a=self.decay_a)
        sc = self.scenario
        EdgeStrategy.validate_options(
            sc.edge_aggregate if self.aggregate is None else self.aggregate,
            edge_server_lr(self),
        )

    @classmethod
    def create(
        cls,
        scenario: str = "digits-20",
        strategy: str = "edge",
        *,
        seed: int = 0,
        rounds: int | None = None,
        clients: int | None = None,
        heterogeneity: float | None = None,
        threshold: int | None = None,
        slice_budget: float | None = None,
        **options: Unpack[SimOptions],
    ) -> SimSettings:
        """Resolve a scenario by name with overrides and build validated settings.

        ``rounds=None`` takes the scenario's update budget for the strategy.

        Raises
        ------
        InputError
            A bad scenario, strategy (``"all"`` included: settings are one run of one
            strategy) or override; the message names the field.
        """
        names = resolve_strategies(strategy)
        if len(names) != 1:
            raise ConfigError(_one_strategy("strategy", strategy, "settings describe a run of"))
        (name,) = names
        sc = resolve_scenario(
            scenario, clients=clients, heterogeneity=heterogeneity, threshold=threshold
        )
        if slice_budget is not None:
            budget = validate.number("slice-budget", slice_budget, low=0.0, error=InputError)
            sc = replace(sc, slice_budget=budget)
        n = sc.rounds_for(name) if rounds is None else rounds
        return cls(scenario=sc, strategy=name, seed=seed, rounds=n, **options)

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, object]) -> SimSettings:
        """Read and validate a Flower run config (see the module docstring).

        Raises
        ------
        ConfigError
            A key of the wrong type or out of range; the message names the key.
        """
        cfg = {**RUN_CONFIG_DEFAULTS, **dict(run_config)}

        def text(key: str) -> str:
            return validate.text(f"run config {key!r}", cfg[key], allow_empty=True)

        def integer(key: str, high: int | None = None) -> int:
            value = cfg[key]  # a TOML float such as 3.0 is taken as 3
            name = f"run config {key!r}"
            return validate.integer(name, value, low=0, high=high, integral_float=True)

        def real(key: str, low: float | None = None) -> float:
            return validate.number(f"run config {key!r}", cfg[key], low=low, finite=False)

        rounds, threshold, clients = (
            integer(NUM_SERVER_ROUNDS, MAX_ROUNDS),  # under its key, not the field 'rounds'
            integer(THRESHOLD),
            integer(CLIENTS),
        )
        # 0 = the scenario's; a negative ratio is a mistake, not "the scenario's" (found by a
        # new-user probe: heterogeneity = -5.0 ran the scenario's 30x without a word)
        hetero, budget = real(HETEROGENEITY, low=0.0), real(SLICE_BUDGET)
        strategy = text(STRATEGY)
        if strategy == "all" or strategy not in STRATEGIES:
            raise ConfigError(
                _one_strategy(f"run config {STRATEGY!r}", strategy, "a run config selects")
            )
        try:
            return cls.create(
                text(SCENARIO),
                strategy,
                seed=integer(SEED),
                rounds=rounds or None,
                clients=clients or None,
                heterogeneity=hetero if hetero > 0 else None,
                threshold=threshold or None,
                slice_budget=budget if budget >= 0 else None,
                decay=text(DECAY),
                decay_a=real(DECAY_A),
                alpha=real(ALPHA),
                theta=real(THETA) if real(THETA) >= 0 else None,
                shares=cast(ShareMode, text(SHARES)),  # checked in __post_init__
            )
        except InputError as exc:  # every message says that it is the run config's
            if str(exc).startswith("run config"):
                raise
            raise ConfigError(f"run config: {exc}") from None

    def client_run_config(self) -> dict[str, int | float | str]:
        """Return the run config a client of this run reads (``clients.settings`` keys)."""
        from clients import settings as cs

        sc = self.scenario
        out: dict[str, int | float | str] = {
            cs.LEARNING_RATE: sc.learning_rate,
            cs.BATCH_SIZE: sc.batch_size,
            cs.LOCAL_EPOCHS: sc.local_epochs,
            cs.ALPHA: self.alpha,
            cs.SEED: self.seed,
        }
        if self.theta is not None:  # else the server sends its derived theta
            out[cs.THETA] = self.theta
        return out
