"""Where a strategy keeps its checkpoints: the run config or the ServerApp's environment.

:func:`checkpoint_options` turns the run-config keys (when the app's schema has them) or the
environment variables into the strategy's ``checkpoint_dir`` and ``resume`` keywords, so that
checkpointing is the two-line change: no new ``pyproject.toml`` keys needed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final, TypedDict

from flower_edge.errors import ConfigError

__all__ = [
    "CHECKPOINT_DIR_ENV",
    "CHECKPOINT_DIR_KEY",
    "RESUME_ENV",
    "RESUME_KEY",
    "CheckpointOptions",
    "checkpoint_options",
]

#: run-config key (when the app's schema has it) and environment variable of the folder
CHECKPOINT_DIR_KEY: Final = "flower-edge-checkpoint-dir"
CHECKPOINT_DIR_ENV: Final = "FLOWER_EDGE_CHECKPOINT_DIR"
#: run-config key and environment variable of the resume switch (default: on with a folder)
RESUME_KEY: Final = "flower-edge-resume"
RESUME_ENV: Final = "FLOWER_EDGE_RESUME"


class CheckpointOptions(TypedDict, total=False):
    """The checkpoint keywords of a strategy, as :func:`checkpoint_options` returns them."""

    checkpoint_dir: str
    resume: bool


def checkpoint_options(
    run_config: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> CheckpointOptions:
    """Return the checkpoint keywords for a strategy from the run config or the environment.

    The folder comes from the run-config key :data:`CHECKPOINT_DIR_KEY` when the app's
    ``[tool.flwr.app.config]`` defines it, else from the environment variable
    :data:`CHECKPOINT_DIR_ENV` of the ServerApp's process (no schema change needed: ``flwr
    run`` rejects run-config keys the schema lacks). Without either, ``{}``: no checkpoints.
    An empty value counts as unset, so an app can declare the key with ``""`` (TOML has no
    null) and turn checkpoints on per run with ``--run-config``.
    With a folder, ``resume`` defaults to on (a restarted ServerApp continues from the last
    checkpoint there, if any); :data:`RESUME_KEY` or :data:`RESUME_ENV` (``0``/``1``,
    ``false``/``true``) turns it off. Use::

        strategy = EdgeStrategy(threshold=2, **checkpoint_options(context.run_config))

    Raises
    ------
    ConfigError
        A folder that is not a string or a resume switch that is not a boolean.
    """
    env = os.environ if environ is None else environ
    folder = run_config.get(CHECKPOINT_DIR_KEY)
    if folder is not None and not isinstance(folder, str):
        raise ConfigError(f"{CHECKPOINT_DIR_KEY} must be a folder name, got {folder!r}")
    if folder is None or not folder.strip():  # "" in the schema: the environment decides
        folder = env.get(CHECKPOINT_DIR_ENV)
    if folder is None or not folder.strip():
        return {}
    resume: object = run_config.get(RESUME_KEY, env.get(RESUME_ENV, True))
    source = RESUME_KEY if RESUME_KEY in run_config else f"{RESUME_KEY} ({RESUME_ENV})"
    if isinstance(resume, str):
        words = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
        if resume.strip().lower() not in words:
            raise ConfigError(f"{source} must be true or false, got {resume!r}")
        resume = words[resume.strip().lower()]
    if not isinstance(resume, bool):
        raise ConfigError(f"{RESUME_KEY} must be true or false, got {resume!r}")
    return {"checkpoint_dir": folder, "resume": resume}
