"""Run-config keys read by the client, validated into one frozen record.

The keys live in ``[tool.flwr.app.config]`` (``flwr run``) or ``--run-config``; a key that is
absent takes the :class:`~clients.task.Task` default (training) or the default below (decision).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from clients.task import MAX_LOCAL_EPOCHS, Task
from flower_edge import validate

__all__ = [
    "ALPHA",
    "DEFAULT_ALPHA",
    "DEFAULT_SEED",
    "DEFAULT_THETA",
    "LEARNING_RATE",
    "BATCH_SIZE",
    "LOCAL_EPOCHS",
    "RUN_CONFIG_KEYS",
    "SEED",
    "THETA",
    "ClientSettings",
]

LEARNING_RATE: Final = "learning-rate"
BATCH_SIZE: Final = "batch-size"
LOCAL_EPOCHS: Final = "local-epochs"
ALPHA: Final = "alpha"
THETA: Final = "theta"
SEED: Final = "seed"
#: every run-config key the client reads
RUN_CONFIG_KEYS: Final = (LEARNING_RATE, BATCH_SIZE, LOCAL_EPOCHS, ALPHA, THETA, SEED)

DEFAULT_ALPHA: Final = 0.5
DEFAULT_THETA: Final = 0.6
DEFAULT_SEED: Final = 0


@dataclass(frozen=True)
class ClientSettings:
    """Validated client settings of one run.

    Attributes
    ----------
    learning_rate : float
        ``learning-rate`` (> 0).
    batch_size : int
        ``batch-size`` (int >= 1).
    local_epochs : int
        ``local-epochs`` (int in ``[1, MAX_LOCAL_EPOCHS]``, 10,000): epochs per round when
        the server sends no sample share.
    alpha : float
        ``alpha`` in [0, 1]: weight of resources against value in the abandon score.
    theta : float
        ``theta`` >= 0: abandon the stale job iff the score is >= theta. Used only when the
        server sends no threshold (:data:`~flower_edge.wire.THETA`): the edge strategy
        sends the user's theta, or one derived from the live scores. A negative run-config
        value means "the server's" and reads as the default here.
    seed : int
        ``seed`` (int >= 0): seeds the sample order of every job.
    """

    learning_rate: float
    batch_size: int
    local_epochs: int
    alpha: float
    theta: float
    seed: int

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, object], task: Task) -> ClientSettings:
        """Read and validate the run config; absent keys take the task's defaults.

        Raises
        ------
        ConfigError
            If a key has the wrong type or is out of range (the message names it).
        """

        def integer(key: str, default: int, low: int, high: int | None = None) -> int:
            value = run_config.get(key, default)  # a TOML float such as 32.0 is taken as 32
            name = f"run config {key!r}"
            return validate.integer(name, value, low=low, high=high, integral_float=True)

        learning_rate = validate.number(
            f"run config {LEARNING_RATE!r}",
            run_config.get(LEARNING_RATE, task.learning_rate),
            low=0.0,
            low_inclusive=False,
        )
        alpha = validate.probability(f"run config {ALPHA!r}", run_config.get(ALPHA, DEFAULT_ALPHA))
        theta = validate.number(
            f"run config {THETA!r}", run_config.get(THETA, DEFAULT_THETA), finite=False
        )
        if theta < 0:  # "the server derives it" (simulation app): the fallback when none comes
            theta = DEFAULT_THETA
        return cls(
            learning_rate=learning_rate,
            batch_size=integer(BATCH_SIZE, task.batch_size, 1),
            local_epochs=integer(LOCAL_EPOCHS, task.local_epochs, 1, MAX_LOCAL_EPOCHS),
            alpha=alpha,
            theta=theta,
            seed=integer(SEED, DEFAULT_SEED, 0),
        )
