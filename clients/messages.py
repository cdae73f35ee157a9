"""Incoming messages parsed once into typed records; replies built from typed results.

Every key comes from :mod:`flower_edge.wire`. Parsing validates types and ranges and raises
:class:`~flower_edge.errors.InputError` naming the key; the ClientApp turns that into an error
reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict

from clients.arrays import first_non_finite
from flower_edge import validate, wire
from flower_edge.errors import InputError

__all__ = [
    "ProfileMode",
    "ProfileRequest",
    "TrainRequest",
    "config_of",
    "parse_arrays",
    "parse_profile",
    "parse_train",
]

ProfileMode = Literal["quick", "full"]


@dataclass(frozen=True)
class TrainRequest:
    """A ``train`` message.

    Attributes
    ----------
    arrays : ArrayRecord | None
        The global model, when the message carries one.
    server_round : int | None
        :data:`~flower_edge.wire.SERVER_ROUND`.
    global_version : int | None
        :data:`~flower_edge.wire.GLOBAL_VERSION` (>= 0).
    job_id : int | None
        :data:`~flower_edge.wire.JOB_ID`; ``None`` for a plain Flower server.
    sample_share : int | None
        :data:`~flower_edge.wire.SAMPLE_SHARE` (>= 0); ``None``: ``local-epochs`` epochs.
    slice_budget : float
        :data:`~flower_edge.wire.SLICE_BUDGET` (>= 0; 0 = the whole job in one message).
    match_ratio : float | None
        :data:`~flower_edge.wire.MATCH_RATIO`, clipped to [0, 1].
    resource : float | None
        :data:`~flower_edge.wire.RESOURCE`, clipped to [0, 1].
    theta : float | None
        :data:`~flower_edge.wire.THETA` (>= 0, ``inf`` allowed): the server's threshold.
    value_node_ids, values : tuple
        :data:`~flower_edge.wire.VALUE_NODE_IDS` / :data:`~flower_edge.wire.VALUES`.
    values_round : int | None
        :data:`~flower_edge.wire.VALUES_ROUND`.
    send_time : float | None
        :data:`~flower_edge.wire.SEND_TIME` (server or virtual clock).
    download_bytes : int
        Bytes of the arrays carried (0 without arrays).
    """

    arrays: ArrayRecord | None
    server_round: int | None
    global_version: int | None
    job_id: int | None
    sample_share: int | None
    slice_budget: float
    match_ratio: float | None
    resource: float | None
    theta: float | None
    value_node_ids: tuple[int, ...]
    values: tuple[float, ...]
    values_round: int | None
    send_time: float | None
    download_bytes: int


@dataclass(frozen=True)
class ProfileRequest:
    """A ``query.profile`` message: the profile mode."""

    mode: ProfileMode


def _content(msg: Message) -> RecordDict:
    if not msg.has_content():
        raise InputError("message has no content")
    return msg.content


def config_of(content: RecordDict) -> ConfigRecord:
    """Return the message's ConfigRecord: under :data:`~flower_edge.wire.CONFIG`, or alone.

    A strategy built with FedAvg's ``configrecord_key`` sends it under another key; the only
    ConfigRecord of the message is read then, as :func:`parse_arrays` reads the ArrayRecord.
    Records are looked up by type: with ``arrayrecord_key="config"`` the ArrayRecord holds the
    name ``config``, and the ConfigRecord is the one under ``configrecord_key``.
    """
    records = dict(content.config_records)
    rec = records.get(wire.CONFIG)
    if rec is None:
        found = list(records.values())
        return found[0] if len(found) == 1 else ConfigRecord()
    return rec


def parse_arrays(content: RecordDict) -> ArrayRecord | None:
    """Return the message's ArrayRecord (under :data:`~flower_edge.wire.ARRAYS` or alone).

    Raises
    ------
    InputError
        If there are several ArrayRecords and none under ``arrays``, or an array holds NaN or
        Inf (a diverged global model: training from it gives NaN).
    """
    records = dict(content.array_records)  # by type, as config_of: the key may name another
    rec = records.get(wire.ARRAYS)
    if rec is None:
        found = list(records.values())
        if len(found) > 1:
            raise InputError(f"message carries {len(found)} ArrayRecords, expected at most one")
        rec = found[0] if found else None
    bad = None if rec is None else first_non_finite(rec)
    if bad is not None:
        raise InputError(f"the received global model is not finite: array {bad!r} holds NaN or Inf")
    return rec


def _int(cfg: ConfigRecord, key: str, low: int | None = 0) -> int | None:
    return validate.integer(
        f"config {key!r}",
        cfg.get(key),
        low=low,
        allow_none=True,
        integral_float=True,
        error=InputError,
    )


def _real(
    cfg: ConfigRecord, key: str, *, low: float | None = None, finite: bool = True
) -> float | None:
    return validate.number(
        f"config {key!r}", cfg.get(key), low=low, finite=finite, allow_none=True, error=InputError
    )


def _list(cfg: ConfigRecord, key: str, kind: type) -> tuple[object, ...]:
    value = cfg.get(key, [])
    if not isinstance(value, list):
        raise InputError(f"config {key!r} must be a list, got {value!r}")
    for v in value:
        ok = isinstance(v, kind) or (kind is float and isinstance(v, int))
        if isinstance(v, bool) or not ok:
            raise InputError(f"config {key!r} must hold {kind.__name__} values, got {v!r}")
    return tuple(value)


def parse_train(msg: Message) -> TrainRequest:
    """Parse and validate a ``train`` message.

    Raises
    ------
    InputError
        If a key has the wrong type or is out of range (the message names it).
    """
    content = _content(msg)
    cfg = config_of(content)
    arrays = parse_arrays(content)
    budget = _real(cfg, wire.SLICE_BUDGET, low=0.0, finite=False)
    ratio = _real(cfg, wire.MATCH_RATIO)
    resource = _real(cfg, wire.RESOURCE)
    theta = _real(cfg, wire.THETA, low=0.0, finite=False)  # inf: never abandon
    node_ids = tuple(int(v) for v in _list(cfg, wire.VALUE_NODE_IDS, int))  # type: ignore[call-overload]
    values = tuple(float(v) for v in _list(cfg, wire.VALUES, float))  # type: ignore[arg-type]
    if len(node_ids) != len(values):
        raise InputError(
            f"config {wire.VALUE_NODE_IDS!r} and {wire.VALUES!r} must have the same length, "
            f"got {len(node_ids)} and {len(values)}"
        )
    validate.numbers(f"config {wire.VALUES!r}", values, low=0.0, high=1.0, error=InputError)
    send_time = _real(cfg, wire.SEND_TIME)
    return TrainRequest(
        arrays=arrays,
        server_round=_int(cfg, wire.SERVER_ROUND),
        global_version=_int(cfg, wire.GLOBAL_VERSION),
        job_id=_int(cfg, wire.JOB_ID, low=None),
        sample_share=_int(cfg, wire.SAMPLE_SHARE),
        slice_budget=budget or 0.0,
        match_ratio=None if ratio is None else min(1.0, max(0.0, ratio)),
        resource=None if resource is None else min(1.0, max(0.0, resource)),
        theta=theta,
        value_node_ids=node_ids,
        values=values,
        values_round=_int(cfg, wire.VALUES_ROUND, low=None),
        send_time=send_time,
        download_bytes=0 if arrays is None else arrays.count_bytes(),
    )


def parse_profile(msg: Message) -> ProfileRequest:
    """Parse a ``query.profile`` message (mode defaults to ``"quick"``).

    Raises
    ------
    InputError
        If :data:`~flower_edge.wire.PROFILE_MODE` is not ``"quick"`` or ``"full"``.
    """
    cfg = config_of(_content(msg)) if msg.has_content() else ConfigRecord()
    mode = cfg.get(wire.PROFILE_MODE, "quick")
    validate.choice(f"config {wire.PROFILE_MODE!r}", mode, get_args(ProfileMode), error=InputError)
    return ProfileRequest(mode=mode)  # type: ignore[arg-type]
