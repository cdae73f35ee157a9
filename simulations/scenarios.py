"""Named simulation scenarios: data, model, partition, device population and run budget.

==============  =========================================================================
name            what
==============  =========================================================================
``digits-20``   scikit-learn's 8x8 digits, MLP, 20 clients, IID, 30x compute spread,
                20 % of the devices flaky. The default and the README's main job (a few
                minutes on 2 cores).
``mnist1d-100`` MNIST-1D (generated offline), 1-D CNN, 100 clients, non-IID Dirichlet
                0.5, 100x compute spread, 30 % of the devices flaky.
``mnist1d-200-  MNIST-1D, 1-D CNN, 200 clients of 20 samples, each with its own label mix
skew``          drawn from Dirichlet 0.1 (``client-dirichlet``: Flower's per-class split
                cannot give 200 partitions a few samples each at alpha 0.1), 100x compute
                spread, 40 % of the devices flaky.
==============  =========================================================================

Every scenario can be resized (``clients``) and made more or less heterogeneous
(``heterogeneity``: the fastest over the slowest device's compute speed) with
:func:`resolve_scenario`, which validates everything *before* any engine starts.

Round budgets: strategies aggregate different numbers of updates per round (FedAvg one per
client, FedBuff ``K``, the edge strategy ``K + 1``, FedAsync one), so a scenario fixes a budget of
client *updates* and :meth:`Scenario.rounds_for` turns it into rounds per strategy: the
strategies are compared at roughly equal client work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final, Literal, get_args

from flower_edge import validate
from flower_edge.errors import InputError
from flower_edge.server_opt import PRESET_STEP_SEARCH, ServerOptConfig
from simulations.devices import PopulationConfig

__all__ = [
    "DATASET_SIZES",
    "ENGINES",
    "Engine",
    "MAX_HETEROGENEITY",
    "MAX_ROUNDS",
    "MAX_SEED",
    "SCENARIOS",
    "SMALL_BUFFER_STEP_SEARCH",
    "STRATEGIES",
    "Partition",
    "Scenario",
    "StrategyName",
    "resolve_scenario",
    "resolve_strategies",
    "scaled_threshold",
]

#: the step search of a scenario whose ``edge`` preset aggregates two updates at a time
#: (``edge_threshold = 1``): :data:`~flower_edge.server_opt.PRESET_STEP_SEARCH` and a half step,
#: since the direction of two updates is noisier than that of a full buffer (digits-20: over
#: 90 seeds 0.68 s to 0.90 and final 0.961, against 0.72 s and 0.958 without the half step)
SMALL_BUFFER_STEP_SEARCH: Final = (0.5, *PRESET_STEP_SEARCH)

#: largest fastest-over-slowest compute spread of a simulated federation: beyond a
#: million-fold spread the slowest device's benchmarks and jobs leave the virtual clock's range
MAX_HETEROGENEITY: Final = 1e6
#: largest seed (torch and numpy take 64-bit seeds)
MAX_SEED: Final = 2**64 - 1
#: most aggregations of a run: the scenarios' budgets are in the hundreds; beyond a million
#: a run (a few seconds a round at least) would not end in a year
MAX_ROUNDS: Final = 1_000_000

StrategyName = Literal["edge", "edge-seed", "fedavg", "fedbuff", "fedasync"]
"""``edge``: the project's best configuration of the edge method; ``edge-seed``: the seeds
exactly (``simulations.presets`` names every departure); then Flower's FedAvg and the FedBuff
and FedAsync baselines."""
STRATEGIES: tuple[str, ...] = get_args(StrategyName)

#: how a scenario runs: Flower's simulation engine (Ray) or one process without Ray
Engine = Literal["ray", "inprocess"]
ENGINES: tuple[str, ...] = get_args(Engine)
Partition = Literal["iid", "dirichlet", "client-dirichlet"]
PARTITIONS: tuple[str, ...] = get_args(Partition)

#: training samples of each bundled data set (the partitioners split these)
DATASET_SIZES: dict[str, int] = {"digits": 1438, "mnist1d": 4000}


@dataclass(frozen=True)
class Scenario:
    """A reproducible experiment setting.

    Parameters
    ----------
    name : str
        Registry name.
    description : str
        One line for listings.
    dataset : str
        Bundled data set (``clients.data``): ``"digits"`` or ``"mnist1d"``.
    model : str
        Bundled model name (``flower_edge.models``).
    num_clients : int
        Number of virtual clients (SuperNodes), one device each.
    partition : {"iid", "dirichlet", "client-dirichlet"}
        How the training data is split over the clients.
    dirichlet_alpha : float
        Concentration of the Dirichlet label partition (``"dirichlet"``, ``"client-dirichlet"``).
    heterogeneity : float
        Fastest over slowest device compute speed (>= 1).
    gpu_fraction : float
        Fraction of devices with a GPU.
    flaky_fraction : float
        Fraction of devices that go offline for stretches.
    mean_online, mean_offline : float
        Mean online / offline stretch of a flaky device, virtual seconds.
    threshold : int
        K of the semi-asynchronous strategies: FedBuff aggregates a buffer of K updates, the
        edge presets aggregate when more than K updates are in (``edge``: unless
        ``edge_threshold``).
    edge_threshold : int, optional
        K of the ``edge`` preset when it differs from the scenario's; ``None``: ``threshold``.
        digits-20 (IID) sets 1: with the validation set choosing which updates and how long
        a step to take, ``edge`` is fastest there on the smallest buffer, while FedBuff's and
        ``edge-seed``'s best buffer stays 4: without that choice, the seed's average of two
        stale models reaches 0.90 on 2 of 5 seeds (docs/benchmarks/simulations.md, issue 10,
        twenty-sixth session).
    target_accuracy : float
        Accuracy whose first crossing gives ``time_to_target``.
    update_budget : int
        Client updates a run may aggregate in all (see :meth:`rounds_for`).
    batch_size : int
        Local mini-batch size.
    learning_rate : float
        Local SGD learning rate.
    local_epochs : int
        Local passes over a node's data per job (its sample share scales this).
    slice_budget : float
        Virtual seconds of training per train message (0 = one message per job).
    edge_aggregate, edge_server_lr, edge_staleness_lr : str, float, bool
        The ``edge`` preset's aggregation rule (``EdgeStrategy`` options): deltas, server
        learning rate 0.03 (the sign step per coordinate) scaled by the buffer's staleness
        (docs/benchmarks/simulations.md, issue 10). With ``aggregate="models"`` (a run's
        override) the server lr is 1.0 unless the run sets one, and there is no server
        optimizer.
    edge_server_opt : ServerOptConfig, optional
        The ``edge`` preset's server optimizer (``EdgeStrategy(server_opt=...)``): the sign
        of the mean delta, a server signSGD step of ``edge_server_lr`` per coordinate
        (docs/benchmarks/simulations.md, issue 10, seventeenth session).
    edge_max_epochs : float, optional
        The ``edge`` preset's per-node share cap in epochs of the node's own data
        (``ShareConfig.max_epochs``; 2.5).
    edge_average_passes : float, optional
        The ``edge`` preset's served model: the moving average of the global models over
        this many passes of the federation (``EdgeStrategy(average_passes=...)``; 1.0).
    edge_validation : int, optional
        The ``edge`` preset's server-held validation set: this many training-pool samples
        (:func:`clients.data.load_server_validation`) on which it values participants, drops
        updates and stops (``val-loss``); the test set only scores the run. ``None``: the
        test set's accuracy, as the seed values (300).
    edge_drop_worst : bool
        The ``edge`` preset leaves out an aggregation's worst update when the validation
        loss says it hurts (``ValuationConfig(drop_worst=True)``; needs ``edge_validation``).
    edge_serve_better : bool
        The ``edge`` preset serves the global model instead of its moving average when the
        validation loss says it is better (``EdgeStrategy(serve_better=True)``; needs
        ``edge_validation``: the test set never chooses).
    edge_step_search : tuple of float
        The ``edge`` preset's server step search (``ValuationConfig(step_search=...)``): after
        each aggregation the step is scaled by the factor that scores best on the validation
        loss (:data:`flower_edge.server_opt.PRESET_STEP_SEARCH`; digits-20, whose ``edge``
        aggregates two updates at a time, :data:`SMALL_BUFFER_STEP_SEARCH`; needs
        ``edge_validation``; empty: off).
    min_client_samples : int
        Fewest training samples a client may hold; more clients than the data allows is
        an input error.
    """

    name: str
    description: str
    dataset: str
    model: str
    num_clients: int
    partition: Partition
    dirichlet_alpha: float
    heterogeneity: float
    gpu_fraction: float
    flaky_fraction: float
    mean_online: float
    mean_offline: float
    threshold: int
    target_accuracy: float
    update_budget: int
    batch_size: int
    learning_rate: float
    local_epochs: int
    slice_budget: float
    min_client_samples: int = 8
    edge_aggregate: Literal["models", "deltas"] = "deltas"
    edge_server_lr: float = 0.03
    edge_server_opt: ServerOptConfig | None = ServerOptConfig("sign")
    edge_staleness_lr: bool = True
    edge_max_epochs: float | None = 2.5
    edge_average_passes: float | None = 1.0
    edge_validation: int | None = 300
    edge_drop_worst: bool = True
    edge_serve_better: bool = True
    edge_step_search: tuple[float, ...] = PRESET_STEP_SEARCH
    edge_threshold: int | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field; raise :class:`ConfigError` naming the first bad one."""
        validate.choice("dataset", self.dataset, sorted(DATASET_SIZES))
        validate.choice("partition", self.partition, PARTITIONS)
        validate.integer("clients", self.num_clients, low=2, error=InputError)
        most = self.max_clients
        if self.num_clients > most:
            raise InputError(
                f"clients must be <= {most} for scenario {self.name!r}: its "
                f"{DATASET_SIZES[self.dataset]} {self.dataset} training samples cannot give "
                f"{self.num_clients} clients {self.min_client_samples} samples each"
            )
        if not 1 <= self.threshold < self.num_clients:
            raise InputError(
                f"threshold K must be >= 1 and < clients ({self.num_clients}), got {self.threshold}"
            )
        if self.edge_threshold is not None and not (
            isinstance(self.edge_threshold, int)
            and not isinstance(self.edge_threshold, bool)
            and 1 <= self.edge_threshold < self.num_clients
        ):
            raise InputError(
                f"edge_threshold K must be an integer >= 1 and < clients ({self.num_clients}), "
                f"got {self.edge_threshold!r}"
            )
        checks: list[tuple[str, float, float, float | None]] = [
            ("heterogeneity", self.heterogeneity, 1.0, MAX_HETEROGENEITY),
            ("gpu_fraction", self.gpu_fraction, 0.0, 1.0),
            ("flaky_fraction", self.flaky_fraction, 0.0, 1.0),
            ("target_accuracy", self.target_accuracy, 0.0, 1.0),
            ("slice_budget", self.slice_budget, 0.0, None),
        ]
        for name, value, low, high in checks:
            validate.number(name, value, low=low, high=high, error=InputError)
        positive: list[tuple[str, float]] = [
            ("dirichlet_alpha", self.dirichlet_alpha),
            ("mean_online", self.mean_online),
            ("mean_offline", self.mean_offline),
            ("learning_rate", self.learning_rate),
            ("edge_server_lr", self.edge_server_lr),
            ("local_epochs", self.local_epochs),
            ("update_budget", self.update_budget),
            ("batch_size", self.batch_size),
        ]
        for name, value in positive:
            validate.number(name, value, low=0.0, low_inclusive=False, error=InputError)
        validate.choice("edge_aggregate", self.edge_aggregate, ("models", "deltas"))
        validate.boolean("edge_staleness_lr", self.edge_staleness_lr, error=InputError)
        if self.edge_server_opt is not None and not isinstance(
            self.edge_server_opt, ServerOptConfig
        ):
            raise InputError("edge_server_opt must be a ServerOptConfig or None")
        validate.number(
            "edge_average_passes",
            self.edge_average_passes,
            low=0.0,
            low_inclusive=False,
            allow_none=True,
            error=InputError,
        )
        validate.integer(
            "edge_validation", self.edge_validation, low=1, allow_none=True, error=InputError
        )
        validate.boolean("edge_drop_worst", self.edge_drop_worst, error=InputError)
        if self.edge_drop_worst and self.edge_validation is None:
            raise InputError("edge_drop_worst needs edge_validation (never drop on the test set)")
        validate.boolean("edge_serve_better", self.edge_serve_better, error=InputError)
        if self.edge_serve_better and self.edge_validation is None:
            raise InputError(
                "edge_serve_better needs edge_validation (never choose on the test set)"
            )
        if not isinstance(self.edge_step_search, tuple):
            got = type(self.edge_step_search).__name__
            raise InputError(f"edge_step_search must be a tuple of step factors, got {got}")
        validate.numbers(
            "edge_step_search",
            self.edge_step_search,
            low=0.0,
            low_inclusive=False,
            high=100.0,
            error=InputError,
        )
        if self.edge_step_search and self.edge_validation is None:
            raise InputError(
                "edge_step_search needs edge_validation (never choose a step on the test set)"
            )
        validate.number(
            "edge_max_epochs",
            self.edge_max_epochs,
            low=0.0,
            low_inclusive=False,
            allow_none=True,
            error=InputError,
        )

    @property
    def max_clients(self) -> int:
        """The most clients the data set can hold, ``min_client_samples`` samples each."""
        return DATASET_SIZES[self.dataset] // self.min_client_samples

    def population(self, seed: int) -> PopulationConfig:
        """Return the device population of this scenario under ``seed``."""
        return PopulationConfig(
            num_devices=self.num_clients,
            seed=seed,
            compute_spread=self.heterogeneity,
            gpu_fraction=self.gpu_fraction,
            flaky_fraction=self.flaky_fraction,
            mean_online=self.mean_online,
            mean_offline=self.mean_offline,
        )

    @property
    def edge_k(self) -> int:
        """K of the ``edge`` preset: ``edge_threshold``, or ``threshold`` when it is unset."""
        return self.threshold if self.edge_threshold is None else self.edge_threshold

    def k_for(self, strategy: StrategyName) -> int | None:
        """Return the K that ``strategy`` runs with (``None``: FedAvg and FedAsync have none).

        >>> SCENARIOS["digits-20"].k_for("fedbuff"), SCENARIOS["digits-20"].k_for("edge")
        (4, 1)
        """
        if strategy in ("fedavg", "fedasync"):
            return None
        return self.edge_k if strategy == "edge" else self.threshold

    def updates_per_round(self, strategy: StrategyName) -> int:
        """Return the client updates that one aggregation of ``strategy`` takes."""
        k = self.k_for(strategy)
        if k is None:
            return self.num_clients if strategy == "fedavg" else 1
        if strategy == "fedbuff":  # FedBuff aggregates a full buffer of K
            return k
        return k + 1  # edge and edge-seed, the seed: more than K

    def rounds_for(self, strategy: StrategyName) -> int:
        """Return the aggregations that fit the scenario's update budget for ``strategy``."""
        return max(1, math.ceil(self.update_budget / self.updates_per_round(strategy)))


SCENARIOS: dict[str, Scenario] = {
    "digits-20": Scenario(
        name="digits-20",
        description="8x8 digits, MLP, 20 clients, IID, 30x compute spread, 20% flaky",
        dataset="digits",
        model="mlp",
        num_clients=20,
        partition="iid",
        dirichlet_alpha=1.0,
        heterogeneity=30.0,
        gpu_fraction=0.1,
        flaky_fraction=0.2,
        mean_online=60.0,
        mean_offline=15.0,
        threshold=4,
        target_accuracy=0.9,
        update_budget=200,
        batch_size=8,
        learning_rate=0.1,
        local_epochs=2,
        slice_budget=0.25,
        # IID: edge's smallest buffer (FedBuff's and edge-seed's best stays 4), whose step of
        # two updates the search may also halve (issue 10, twenty-sixth session: 90 seeds)
        edge_threshold=1,
        edge_step_search=SMALL_BUFFER_STEP_SEARCH,
        # the preset as everywhere (docs/benchmarks/simulations.md, issue 10, seventeenth
        # session): the sign step costs a little here (15 seeds: 1.05 s to 0.90, against
        # 0.99 s with the plain step) and pays on the label-skewed scenarios
    ),
    "mnist1d-100": Scenario(
        name="mnist1d-100",
        description="MNIST-1D, 1-D CNN, 100 clients, Dirichlet 0.5, 100x compute spread, 30% flaky",
        dataset="mnist1d",
        model="cnn1d",
        num_clients=100,
        partition="dirichlet",
        dirichlet_alpha=0.5,
        heterogeneity=100.0,
        gpu_fraction=0.1,
        flaky_fraction=0.3,
        mean_online=120.0,
        mean_offline=30.0,
        threshold=10,
        target_accuracy=0.4,
        update_budget=2000,
        batch_size=8,
        learning_rate=0.1,
        local_epochs=2,
        slice_budget=2.0,
    ),
    "mnist1d-200-skew": Scenario(
        name="mnist1d-200-skew",
        description=(
            "MNIST-1D, 1-D CNN, 200 clients, Dirichlet 0.1 label mix per client, "
            "100x compute spread, 40% flaky"
        ),
        dataset="mnist1d",
        model="cnn1d",
        num_clients=200,
        partition="client-dirichlet",
        dirichlet_alpha=0.1,
        heterogeneity=100.0,
        gpu_fraction=0.1,
        flaky_fraction=0.4,
        mean_online=120.0,
        mean_offline=30.0,
        threshold=10,
        target_accuracy=0.35,
        update_budget=2000,
        batch_size=8,
        learning_rate=0.1,
        local_epochs=2,
        slice_budget=2.0,
    ),
}


def scaled_threshold(threshold: int, designed: int, clients: int) -> int:
    """Return K for ``clients`` clients of a scenario designed for ``designed`` with K.

    ``round(threshold * clients / designed)``, at least 1 and below ``clients``: K keeps its
    share of the federation.

    >>> scaled_threshold(4, 20, 5), scaled_threshold(4, 20, 10), scaled_threshold(4, 20, 2)
    (1, 2, 1)
    """
    return max(1, min(clients - 1, round(threshold * clients / designed)))


def resolve_scenario(
    name: str,
    *,
    clients: int | None = None,
    heterogeneity: float | None = None,
    threshold: int | None = None,
) -> Scenario:
    """Look up a scenario by name and apply overrides, validating everything.

    Parameters
    ----------
    name : str
        A key of :data:`SCENARIOS`.
    clients : int, optional
        Number of clients instead of the scenario's. Fewer clients hold larger partitions,
        so a job of ``local_epochs`` takes ``num_clients / clients`` times the SGD steps:
        the local learning rate is scaled by ``clients / num_clients`` (a job's steps times
        its learning rate stay the designed size's; without it momentum SGD at the designed
        rate drifts away on a partition ten times larger, e.g. digits on 2 clients) and the
        slice budget by ``num_clients / clients`` (as many slices per job).
    heterogeneity : float, optional
        Fastest over slowest device compute speed instead of the scenario's (>= 1).
    threshold : int, optional
        K instead of the scenario's (1 <= K < clients), for every strategy that takes one
        (``edge``'s ``edge_threshold`` included). When only ``clients`` is fewer than
        the scenario's, K keeps its share of the federation (:func:`scaled_threshold`), so
        that the run stays semi-asynchronous: at the scenario's K an aggregation of 5 of 5
        clients would wait for every one of them, offline ones included.

    Raises
    ------
    InputError
        Unknown name (the message lists the valid ones) or an override out of range.
    """
    try:
        base = SCENARIOS[name]
    except KeyError:
        raise InputError(
            f"unknown scenario {name!r}; valid scenarios: {', '.join(SCENARIOS)}"
        ) from None
    changes: dict[str, float | int | None] = {}
    if clients is not None:
        changes["num_clients"] = clients
        if isinstance(clients, int) and 0 < clients < base.num_clients:
            ratio = clients / base.num_clients
            changes["learning_rate"] = base.learning_rate * ratio
            changes["slice_budget"] = base.slice_budget / ratio
            if threshold is None and clients > 1:  # 1 client: the range error names K
                changes["threshold"] = scaled_threshold(base.threshold, base.num_clients, clients)
                if base.edge_threshold is not None:
                    changes["edge_threshold"] = scaled_threshold(
                        base.edge_threshold, base.num_clients, clients
                    )
    if heterogeneity is not None:
        changes["heterogeneity"] = heterogeneity
    if threshold is not None:  # every strategy's K, edge's included
        changes["threshold"] = threshold
        changes["edge_threshold"] = None
    return replace(base, **changes) if changes else base  # type: ignore[arg-type]


def resolve_strategies(name: str) -> tuple[StrategyName, ...]:
    """Return the strategies that ``name`` stands for (``"all"`` for every one).

    Raises
    ------
    InputError
        If ``name`` is neither a strategy nor ``"all"``; the message lists the valid names.
    """
    if name == "all":
        return STRATEGIES  # type: ignore[return-value]
    if name not in STRATEGIES:
        raise InputError(
            f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}, all"
        )
    return (name,)  # type: ignore[return-value]
