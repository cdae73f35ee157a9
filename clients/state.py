"""The node's persistent state in ``context.state``: parsed once into typed records.

Records written by the client (all keys prefixed ``flower-edge.``, other keys are left alone):

========================  ===========  =======================================================
key                       record       content
========================  ===========  =======================================================
``flower-edge.node``      ConfigRecord latest global version held, last known value and its
                                       round, abandoned jobs so far, and the running job's
                                       progress (job id, base version, share, position, ...)
``flower-edge.global``    ArrayRecord  the latest global model received
``flower-edge.job``       ArrayRecord  the running job's model
``flower-edge.optim``     ArrayRecord  the running job's optimizer tensors and torch RNG state
``flower-edge.optim-s``   ConfigRecord the running job's optimizer scalars
``flower-edge.profile.*`` ConfigRecord the cached profile reply, per profile mode
========================  ===========  =======================================================

A state that cannot be parsed (missing or mistyped fields, foreign record types under these
keys) is *corrupted*: :func:`load_state` logs a warning, removes the client's records and
starts fresh, so the node keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from logging import WARNING
from typing import Any, Final

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from flwr.common.logger import log

from clients.arrays import decode_array, encode_array
from clients.optim import LocalOptimizer

__all__ = [
    "GLOBAL_KEY",
    "CorruptedStateError",
    "JOB_KEY",
    "NODE_KEY",
    "OPTIM_KEY",
    "OPTIM_SCALARS_KEY",
    "PROFILE_KEY_PREFIX",
    "JobRecord",
    "JobState",
    "NodeRecord",
    "NodeState",
    "clear_state",
    "load_state",
    "optimizer_from_records",
    "optimizer_to_records",
    "save_state",
]

_PREFIX: Final = "flower-edge."
NODE_KEY: Final = _PREFIX + "node"
GLOBAL_KEY: Final = _PREFIX + "global"
JOB_KEY: Final = _PREFIX + "job"
OPTIM_KEY: Final = _PREFIX + "optim"
OPTIM_SCALARS_KEY: Final = _PREFIX + "optim-s"
PROFILE_KEY_PREFIX: Final = _PREFIX + "profile."
_RNG: Final = "torch-rng"
_NONE: Final = -1  # stands for "absent" in integer fields


class CorruptedStateError(ValueError):
    """The client's records in ``context.state`` cannot be parsed."""


@dataclass(frozen=True)
class NodeRecord:
    """Long-lived facts of the node.

    Attributes
    ----------
    global_version : int | None
        Version of the latest global model held (``None``: none yet).
    last_value : float | None
        The node's latest known value (``None``: never valued).
    values_round : int | None
        Round of the results ``last_value`` came from.
    abandoned_jobs : int
        Jobs abandoned so far by the abandon rule.
    """

    global_version: int | None = None
    last_value: float | None = None
    values_round: int | None = None
    abandoned_jobs: int = 0


@dataclass(frozen=True)
class JobRecord:
    """Progress of the running job.

    Attributes
    ----------
    job_id : int
        The server's job id.
    base_version : int
        Global version the job started from.
    share : int
        Samples the job processes in all.
    position : int
        Samples processed so far.
    credit : int
        Samples granted by the virtual clock but not yet processed (less than a batch).
    loss_sum : float
        Sum of per-sample training losses so far.
    seconds : float
        Host seconds spent training the job so far.
    """

    job_id: int
    base_version: int
    share: int
    position: int = 0
    credit: int = 0
    loss_sum: float = 0.0
    seconds: float = 0.0


@dataclass(frozen=True)
class JobState:
    """The running job: its progress and its model and optimizer records."""

    record: JobRecord
    model: ArrayRecord
    optim: ArrayRecord
    optim_scalars: ConfigRecord


@dataclass(frozen=True)
class NodeState:
    """Everything the client keeps between messages."""

    node: NodeRecord
    global_arrays: ArrayRecord | None
    job: JobState | None


def _opt_int(value: int | None) -> int:
    return _NONE if value is None else value


def _get(cfg: ConfigRecord, key: str, kind: type) -> Any:
    if key not in cfg:
        raise CorruptedStateError(f"missing field {key!r}")
    value = cfg[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CorruptedStateError(f"field {key!r} is {value!r}, expected {kind.__name__}")
    return value


def _record(state: RecordDict, key: str, kind: type) -> Any:
    if key not in state:
        return None
    rec = state[key]
    if not isinstance(rec, kind):
        raise CorruptedStateError(f"record {key!r} is a {type(rec).__name__}")
    return rec


def _parse(state: RecordDict) -> NodeState:
    cfg = _record(state, NODE_KEY, ConfigRecord)
    if cfg is None:
        return NodeState(NodeRecord(), None, None)
    version = _get(cfg, "global-version", int)
    has_value = _get(cfg, "has-value", int)
    values_round = _get(cfg, "values-round", int)
    node = NodeRecord(
        global_version=None if version == _NONE else version,
        last_value=_get(cfg, "last-value", float) if has_value else None,
        values_round=None if values_round == _NONE else values_round,
        abandoned_jobs=_get(cfg, "abandoned-jobs", int),
    )
    if node.last_value is not None and not 0.0 <= node.last_value <= 1.0:
        raise CorruptedStateError(f"last value {node.last_value} outside [0, 1]")
    global_arrays = _record(state, GLOBAL_KEY, ArrayRecord)
    if (global_arrays is None) != (node.global_version is None):
        raise CorruptedStateError("global model and global version disagree")
    job: JobState | None = None
    if _get(cfg, "has-job", int):
        record = JobRecord(
            job_id=_get(cfg, "job-id", int),
            base_version=_get(cfg, "base-version", int),
            share=_get(cfg, "share", int),
            position=_get(cfg, "position", int),
            credit=_get(cfg, "credit", int),
            loss_sum=_get(cfg, "loss-sum", float),
            seconds=_get(cfg, "seconds", float),
        )
        if not 0 <= record.position <= record.share or record.credit < 0:
            raise CorruptedStateError(f"job progress out of range: {record}")
        model = _record(state, JOB_KEY, ArrayRecord)
        optim = _record(state, OPTIM_KEY, ArrayRecord)
        scalars = _record(state, OPTIM_SCALARS_KEY, ConfigRecord)
        if model is None or optim is None or scalars is None:
            raise CorruptedStateError("job without its model or optimizer records")
        job = JobState(record, model, optim, scalars)
    return NodeState(node, global_arrays, job)


def clear_state(state: RecordDict) -> None:
    """Remove every record the client wrote (profile cache included)."""
    for key in [k for k in state if k.startswith(_PREFIX)]:
        del state[key]


def load_state(state: RecordDict) -> NodeState:
    """Parse the client's records; a corrupted state is logged, cleared and started fresh."""
    try:
        return _parse(state)
    except CorruptedStateError as exc:
        log(WARNING, "corrupted client state (%s): starting fresh", exc)
        clear_state(state)
        return NodeState(NodeRecord(), None, None)


def save_state(state: RecordDict, node_state: NodeState) -> None:
    """Write the client's records (the inverse of :func:`load_state`)."""
    node, job = node_state.node, node_state.job
    cfg = ConfigRecord(
        {
            "global-version": _opt_int(node.global_version),
            "has-value": int(node.last_value is not None),
            "last-value": float(node.last_value or 0.0),
            "values-round": _opt_int(node.values_round),
            "abandoned-jobs": node.abandoned_jobs,
            "has-job": int(job is not None),
        }
    )
    if node_state.global_arrays is not None:
        state[GLOBAL_KEY] = node_state.global_arrays
    elif GLOBAL_KEY in state:
        del state[GLOBAL_KEY]
    if job is None:
        for key in (JOB_KEY, OPTIM_KEY, OPTIM_SCALARS_KEY):
            if key in state:
                del state[key]
    else:
        r = job.record
        cfg["job-id"] = r.job_id
        cfg["base-version"] = r.base_version
        cfg["share"] = r.share
        cfg["position"] = r.position
        cfg["credit"] = r.credit
        cfg["loss-sum"] = float(r.loss_sum)
        cfg["seconds"] = float(r.seconds)
        state[JOB_KEY] = job.model
        state[OPTIM_KEY] = job.optim
        state[OPTIM_SCALARS_KEY] = job.optim_scalars
    state[NODE_KEY] = cfg


# ---------------------------------------------------------------- optimizer and RNG


def optimizer_to_records(
    optimizer: LocalOptimizer, rng_state: torch.Tensor | None = None
) -> tuple[ArrayRecord, ConfigRecord]:
    """Flatten an optimizer's per-parameter state (and a torch RNG state) into records.

    Tensors go to the ArrayRecord as ``"<param index>/<name>"``, numbers to the ConfigRecord;
    the parameter groups (learning rate, ...) are rebuilt from the settings, not stored.
    """
    arrays = ArrayRecord()
    scalars = ConfigRecord()
    for pid, entries in optimizer.state_dict()["state"].items():
        for name, value in entries.items():
            key = f"{pid}/{name}"
            if isinstance(value, torch.Tensor):
                arrays[key] = encode_array(value.detach().cpu().numpy())
            elif isinstance(value, int | float) and not isinstance(value, bool):
                scalars[key] = value
            else:
                raise TypeError(f"optimizer state {key!r} of type {type(value).__name__}")
    if rng_state is not None:
        arrays[_RNG] = encode_array(rng_state.numpy())
    return arrays, scalars


def optimizer_from_records(
    optimizer: LocalOptimizer, arrays: ArrayRecord, scalars: ConfigRecord
) -> torch.Tensor | None:
    """Restore what :func:`optimizer_to_records` wrote; return the stored RNG state, if any.

    Raises
    ------
    CorruptedStateError
        If a key does not name a parameter of this optimizer.
    """
    per_param: dict[int, dict[str, Any]] = {}
    rng: torch.Tensor | None = None
    n_params = sum(len(g["params"]) for g in optimizer.param_groups)
    items: list[tuple[str, Any]] = [
        (k, torch.from_numpy(decode_array(a))) for k, a in arrays.items()
    ]
    items += list(scalars.items())
    for key, value in items:
        if key == _RNG:
            rng = value.to(torch.uint8)
            continue
        pid_text, _, name = key.partition("/")
        if not pid_text.isdigit() or int(pid_text) >= n_params or not name:
            raise CorruptedStateError(f"optimizer record key {key!r}")
        per_param.setdefault(int(pid_text), {})[name] = value
    state_dict = optimizer.state_dict()
    state_dict["state"] = per_param
    optimizer.load_state_dict(state_dict)
    return rng
