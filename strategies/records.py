"""Typed records: each reply is parsed once, at the edge, into a frozen record.

Parsing raises :class:`~flower_edge.errors.InputError` with the reason; the loop turns that
into a logged rejection naming the node, never a crash. Also here: the records of the run's
history that simulations and reports read (:class:`AggregationRecord`, :class:`JobEvent`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy.typing as npt
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common.constant import ErrorCode

from flower_edge import wire
from flower_edge.aggregation import WeightedSum
from flower_edge.errors import InputError

__all__ = [
    "BAD_PROFILE_REPLY",
    "UNASKED_PROFILE",
    "AggregationRecord",
    "AppMetric",
    "Combined",
    "EventKind",
    "JobEvent",
    "ProfileRecord",
    "TrainReply",
    "Update",
    "arrays_from_record",
    "is_node_unavailable",
    "is_profile_reply",
    "parse_profile_reply",
    "parse_reply_for",
    "parse_train_reply",
]

#: the start of the reason of a profile-only reply that could not be read
BAD_PROFILE_REPLY: Final = "bad profile reply"
#: the reason of a profile-only reply to a train message that did not ask for the profile
#: (it used to end the job silently, and the node got a new job, with the model, at once)
UNASKED_PROFILE: Final = (
    "a profile-only reply (no update) to a train message that did not ask for it"
)
#: the range of an integer protocol metric: Flower's wire carries integers as sint64, so a
#: count beyond it can only be a float such as 1e308, whose sums overflowed to an
#: OverflowError out of the loop (two such ``num-examples`` in one aggregation)
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

NDArray = npt.NDArray[Any]
#: an app metric of a train reply: a number, or a list of numbers (averaged element-wise)
AppMetric = float | tuple[float, ...]
EventKind = Literal[
    "sent",
    "progress",
    "abandoned",
    "finished",
    "late",
    "rejected",
    "forgotten",
    "refused",
    "profiled",
]


@dataclass(frozen=True)
class ProfileRecord:
    """A node's answer to the profile query.

    Attributes
    ----------
    node_id : int
        The node.
    evaluations : tuple[float, float, float, float]
        ``N`` for cpu, gpu, memory, disk (seed formula 4), each finite and >= 0.
    local_samples : int
        Size of the node's local training data (0 if not reported).
    """

    node_id: int
    evaluations: tuple[float, float, float, float]
    local_samples: int


@dataclass(frozen=True)
class TrainReply:
    """A parsed reply to a train message.

    Attributes
    ----------
    node_id : int
        Sender.
    reply_to : str
        Id of the message it answers.
    done : bool
        Finished update (with arrays) or progress report.
    arrays : tuple of numpy arrays, optional
        The local model (finished updates only), in the global model's key order.
    num_examples : int
        Examples the update was trained on (>= 0).
    job_id, base_version : int, optional
        Absent for an unmodified Flower ClientApp ("drop-in").
    samples_processed : int, optional
        Samples of the job processed so far.
    train_seconds : float, optional
        Client-measured training seconds of this slice.
    virtual_seconds : float, optional
        Virtual duration of this slice, transfers included (virtual clock only).
    abandoned : bool
        This slice abandoned a stale job and restarted from a newer global.
    abandoned_jobs : int, optional
        The client's total of abandoned jobs.
    train_loss : float, optional
        Mean training loss reported.
    drop_in : bool
        The reply carries none of the edge protocol's keys (unmodified Flower ClientApp).
    profile : ProfileRecord, optional
        The node's profile, sent beside the update when the message asked for it with
        :data:`wire.PROFILE_WITH_JOB`.
    profile_problem : str, optional
        Why a profile sent beside the update was rejected (the update itself stands).
    availability : float, optional
        The node's availability in ``[0, 1]`` as it replied (``None``: not sent or invalid).
    app_metrics : tuple of (str, AppMetric)
        The app's own metrics: every finite number (or non-empty list of finite numbers) of
        the reply's MetricRecord that is not a protocol key
        (:data:`flower_edge.wire.TRAIN_REPLY_KEYS`), e.g. the quickstart's ``train_loss``,
        sorted by name.
    """

    node_id: int
    reply_to: str
    done: bool
    arrays: tuple[NDArray, ...] | None
    num_examples: int
    job_id: int | None
    base_version: int | None
    samples_processed: int | None
    train_seconds: float | None
    virtual_seconds: float | None
    abandoned: bool
    abandoned_jobs: int | None
    train_loss: float | None
    drop_in: bool
    profile: ProfileRecord | None = None
    profile_problem: str | None = None
    app_metrics: tuple[tuple[str, AppMetric], ...] = ()
    availability: float | None = None


def _number(metrics: MetricRecord, key: str, *, integer: bool, required: bool = False) -> Any:
    if key not in metrics:
        if required:
            raise InputError(f"reply metric {key!r} is missing")
        return None
    value = metrics[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"reply metric {key!r} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise InputError(f"reply metric {key!r} must be finite, got {value!r}")
    if integer:
        if float(value) != int(value):
            raise InputError(f"reply metric {key!r} must be an integer, got {value!r}")
        if not INT64_MIN <= int(value) <= INT64_MAX:  # an integer-valued float, e.g. 1e308
            raise InputError(
                f"reply metric {key!r} must be an integer within int64 (what Flower's wire "
                f"carries), got {value!r}"
            )
        return int(value)
    return float(value)


def _not_negative(metrics: MetricRecord, key: str, *, integer: bool) -> Any:
    """Return a count or a duration of the protocol (``None`` if absent); raise if < 0.

    The slice budget takes differences of a job's ``train-seconds``: a negative one followed
    by a huge one made an infinite slice time, which stopped the run with an InputError.
    """
    value = _number(metrics, key, integer=integer)
    if value is not None and value < 0:
        raise InputError(f"{key} must be >= 0, got {value}")
    return value


def _report(metrics: MetricRecord, key: str) -> float | None:
    """Return an informational protocol metric (the training loss), ``None`` if not finite.

    A diverged loss is no reason to reject an update whose arrays are sound (they are checked
    on their own); a plain ClientApp may also use the name for a value of its own.
    """
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _only_record(records: dict[str, Any], key: str, kind: str) -> Any:
    if key in records:
        return records[key]
    if len(records) == 1:  # an app that names its record differently
        return next(iter(records.values()))
    if not records:
        return None
    raise InputError(f"reply has {len(records)} {kind}s and none named {key!r}")


def arrays_from_record(record: ArrayRecord, keys: Sequence[str]) -> tuple[NDArray, ...]:
    """Return the arrays of ``record`` in ``keys`` order; raise InputError if the names differ."""
    if set(record.keys()) != set(keys) or len(record) != len(keys):
        missing = [repr(k) for k in keys if k not in record]
        unexpected = [repr(k) for k in record if k not in set(keys)]
        parts = [f"missing {', '.join(missing[:5])}"] if missing else []  # 5 names are enough
        parts += [f"unexpected {', '.join(unexpected[:5])}"] if unexpected else []
        raise InputError(
            f"array names differ from the global model's ({len(record)} arrays, expected "
            f"{len(keys)}: {'; '.join(parts) or 'a name repeated'})"
        )
    try:
        return tuple(record[k].numpy() for k in keys)
    except Exception as exc:  # noqa: BLE001  (undecodable bytes from a client)
        raise InputError(f"arrays cannot be decoded: {type(exc).__name__}: {exc}") from None


def _check_message(msg: Message) -> None:
    if msg.has_error():
        raise InputError(f"client error (code {msg.error.code}): {msg.error.reason}")
    if not msg.has_content():
        raise InputError("reply has no content")


def parse_train_reply(
    msg: Message,
    keys: Sequence[str],
    weight_key: str = wire.NUM_EXAMPLES,
    arrays_key: str = wire.ARRAYS,
) -> TrainReply:
    """Parse a reply to a train message into a :class:`TrainReply`.

    Parameters
    ----------
    msg : Message
        The reply.
    keys : Sequence[str]
        Array names of the global model, in order.
    weight_key : str (default: "num-examples")
        The strategy's ``weighted_by_key``: a plain ClientApp's reply (no protocol keys) gives
        its example count in this metric, as FedAvg reads it (``num-examples`` when it lacks
        it); a flower-edge client's reply always in ``num-examples``.
    arrays_key : str (default: "arrays")
        The strategy's ``arrayrecord_key``: the ArrayRecord read among several (else
        ``arrays``, a flower-edge client's, or the only one).

    Raises
    ------
    InputError
        Error reply, missing content, missing or negative ``num-examples``, malformed
        protocol metrics, a finished update without arrays or with other array names.
    """
    _check_message(msg)
    content = msg.content
    metrics = _only_record(dict(content.metric_records), wire.METRICS, "MetricRecord")
    if metrics is None:
        raise InputError(f"reply has no MetricRecord (needs {weight_key!r})")
    drop_in = wire.DONE not in metrics and wire.JOB_ID not in metrics
    count_key, num_examples = _count(metrics, weight_key if drop_in else wire.NUM_EXAMPLES, drop_in)
    done_flag = _number(metrics, wire.DONE, integer=True)
    done = True if done_flag is None else bool(done_flag)
    if done_flag is not None and done_flag not in (0, 1):
        raise InputError(f"{wire.DONE} must be 0 or 1, got {done_flag}")
    arrays: tuple[NDArray, ...] | None = None
    if done:
        records = dict(content.array_records)
        key = wire.ARRAYS if arrays_key not in records and wire.ARRAYS in records else arrays_key
        record = _only_record(records, key, "ArrayRecord")
        if record is None:
            raise InputError("finished update carries no arrays")
        arrays = arrays_from_record(record, keys)
        if num_examples == 0:
            raise InputError(f"finished update with {count_key} = 0")
    job_id = _number(metrics, wire.JOB_ID, integer=True)
    base_version = _number(metrics, wire.BASE_VERSION, integer=True)
    if base_version is not None and base_version < 0:
        raise InputError(f"{wire.BASE_VERSION} must be >= 0, got {base_version}")
    if not done and (job_id is None or base_version is None):
        raise InputError(f"progress report without {wire.JOB_ID} or {wire.BASE_VERSION}")
    virtual_seconds = _not_negative(metrics, wire.VIRTUAL_SECONDS, integer=False)
    abandoned = _number(metrics, wire.ABANDONED, integer=True)
    if abandoned not in (None, 0, 1):  # 7 or -1 counted an abandon in the reported tally
        raise InputError(f"{wire.ABANDONED} must be 0 or 1, got {abandoned}")
    profile: ProfileRecord | None = None
    profile_problem: str | None = None
    if wire.PROFILE in content.config_records:  # sent with the job (wire.PROFILE_WITH_JOB)
        try:
            profile = parse_profile_reply(msg)
        except InputError as exc:  # the update stands; only the profile is rejected
            profile_problem = f"bad profile beside the update: {exc}"
    return TrainReply(
        node_id=int(msg.metadata.src_node_id),
        reply_to=msg.metadata.reply_to_message_id,
        done=done,
        arrays=arrays,
        num_examples=num_examples,
        job_id=job_id,
        base_version=base_version,
        samples_processed=_not_negative(metrics, wire.SAMPLES_PROCESSED, integer=True),
        train_seconds=_not_negative(metrics, wire.TRAIN_SECONDS, integer=False),
        virtual_seconds=virtual_seconds,
        abandoned=bool(abandoned),
        abandoned_jobs=_not_negative(metrics, wire.ABANDONED_JOBS, integer=True),
        train_loss=_report(metrics, wire.TRAIN_LOSS),
        drop_in=drop_in,
        profile=profile,
        profile_problem=profile_problem,
        app_metrics=app_metrics(metrics, count_key),
        availability=_fraction(_report(metrics, wire.AVAILABILITY)),
    )


def _count(metrics: MetricRecord, weight_key: str, drop_in: bool) -> tuple[str, int]:
    """Return the example count's key and value: ``weight_key``, else ``num-examples``.

    Raises InputError naming the key (and the metrics the reply has, when it is missing; a
    plain ClientApp's reply, ``drop_in``, is pointed to ``weighted_by_key``, which a
    flower-edge client's reply does not follow).
    """
    key = weight_key if weight_key in metrics else wire.NUM_EXAMPLES
    if key not in metrics:
        has = ", ".join(repr(k) for k in sorted(metrics)[:8]) or "none"
        if not drop_in:
            raise InputError(f"reply metric {key!r} is missing (its metrics: {has})")
        if not metrics:  # a reply that counts nothing (one that did not train, say)
            why = "(its MetricRecord is empty): an update without an example count is left out"
            raise InputError(f"reply metric {key!r} is missing {why} of the aggregation")
        if weight_key == wire.NUM_EXAMPLES:
            hint = "; name your ClientApp's key of the example count with weighted_by_key=..."
            raise InputError(f"reply metric {key!r} is missing (its metrics: {has}){hint}")
        raise InputError(
            f"reply metric {weight_key!r} (weighted_by_key) or {key!r} is missing "
            f"(its metrics: {has})"
        )
    num_examples: int = _number(metrics, key, integer=True, required=True)
    if num_examples < 0:
        raise InputError(f"{key} must be >= 0, got {num_examples}")
    return key, num_examples


def _fraction(value: float | None) -> float | None:
    """Return ``value`` if it lies in ``[0, 1]``, else ``None`` (informational: ignored)."""
    return value if value is not None and 0.0 <= value <= 1.0 else None


def _finite(value: object) -> bool:
    """Return whether ``value`` is a finite number (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def app_metrics(
    metrics: MetricRecord, count_key: str = wire.NUM_EXAMPLES
) -> tuple[tuple[str, AppMetric], ...]:
    """Return the app's own numeric metrics of a train reply, sorted by name.

    Protocol keys and the example count ``count_key`` are left out (FedAvg leaves its
    weighting key out too). Numbers are kept, and lists of numbers (averaged element by
    element, as FedAvg does); values that are not finite (NaN, a list holding one) are left
    out: they are the app's business and never a reason to reject its update.
    """
    out: list[tuple[str, AppMetric]] = []
    for key, value in metrics.items():
        if key in wire.TRAIN_REPLY_KEYS or key == count_key:
            continue
        if _finite(value):
            out.append((str(key), float(value)))  # type: ignore[arg-type]  # a number
        elif isinstance(value, list) and value and all(_finite(v) for v in value):
            out.append((str(key), tuple(float(v) for v in value)))
    return tuple(sorted(out))


def parse_profile_reply(msg: Message) -> ProfileRecord:
    """Parse a reply to the profile query; raise InputError naming the bad field."""
    _check_message(msg)
    records = dict(msg.content.config_records)
    if wire.PROFILE not in records:
        raise InputError(f"profile reply has no ConfigRecord {wire.PROFILE!r}")
    profile: ConfigRecord = records[wire.PROFILE]
    evaluations: list[float] = []
    for key in (wire.EVAL_CPU, wire.EVAL_GPU, wire.EVAL_MEMORY, wire.EVAL_DISK):
        value = profile.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"profile {key!r} must be a number >= 0, got {value!r}")
        if not math.isfinite(float(value)) or value < 0:
            raise InputError(f"profile {key!r} must be finite and >= 0, got {value!r}")
        evaluations.append(float(value))
    samples = profile.get(wire.LOCAL_SAMPLES, 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise InputError(f"profile {wire.LOCAL_SAMPLES!r} must be an integer >= 0, got {samples!r}")
    report = profile.get(wire.PROFILE_REPORT)
    if report is not None:
        from flower_edge.profiling.report import ProfileReport

        if not isinstance(report, str):
            raise InputError(f"profile {wire.PROFILE_REPORT!r} must be a JSON string")
        # from_json bounds the size, rejects NaN/Infinity and deep nesting, names the field
        parsed = ProfileReport.from_json(report)
        for resource, claimed in zip(("cpu", "gpu", "memory", "disk"), evaluations, strict=True):
            reported = parsed.evaluations[resource]
            if not math.isclose(claimed, reported, rel_tol=1e-6, abs_tol=1e-9):
                raise InputError(
                    f"profile evaluation of {resource!r} ({claimed!r}) differs from its own "
                    f"report's ({reported!r})"
                )
    cpu, gpu, memory, disk = evaluations
    return ProfileRecord(int(msg.metadata.src_node_id), (cpu, gpu, memory, disk), int(samples))


@dataclass(frozen=True)
class JobEvent:
    """One event of a node's timeline (for timelines and wasted-work accounting).

    Attributes
    ----------
    time : float
        Seconds since ``start()`` was called (virtual seconds under a virtual clock).
    node_id : int
        The node.
    job_id : int
        The job (-1 when none).
    kind : EventKind
        ``sent`` (train message), ``progress`` (slice report), ``abandoned`` (the slice
        restarted from a newer global), ``finished`` (update accepted into the buffer),
        ``late`` (soft deadline missed), ``rejected`` (reply refused; ``detail`` says why),
        ``forgotten`` (no reply within the real-time timeout), ``refused`` (the grid
        refused the message).
    version : int
        Global version the event refers to (the base version for replies).
    samples : int
        Samples processed as reported (0 when unknown).
    detail : str
        Free text (rejection reason).
    """

    time: float
    node_id: int
    job_id: int
    kind: EventKind
    version: int
    samples: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class Update:
    """A finished local update accepted into the buffer (built with keywords only).

    Attributes
    ----------
    node_id, job_id, base_version : int
        Who, which job, from which global version.
    arrays : tuple of numpy arrays
        The local model.
    num_examples : int
        Reported examples.
    share : int
        The job's sample share (0 when unknown).
    delay : float
        ``dt``: receive time minus the send time of the global it started from.
    received_at : float
        Event time of the reply.
    late : bool
        It missed its soft deadline.
    train_loss : float, optional
        Reported training loss.
    app_metrics : tuple of (str, AppMetric)
        The app's own metrics of the reply (:attr:`TrainReply.app_metrics`).
    """

    node_id: int
    job_id: int
    base_version: int
    arrays: tuple[NDArray, ...]
    num_examples: int
    share: int
    delay: float
    received_at: float
    late: bool
    train_loss: float | None
    app_metrics: tuple[tuple[str, AppMetric], ...] = ()


@dataclass(frozen=True)
class Combined:
    """The result of :meth:`~strategies.base.SemiAsyncStrategy.combine`.

    Attributes
    ----------
    arrays : list of numpy arrays
        The new global model.
    weights : tuple[float, ...]
        Weight of each update (any scale; normalised for the history).
    total : WeightedSum, optional
        The running sum the model is the mean of (enables leave-one-out values).
    """

    arrays: list[NDArray]
    weights: tuple[float, ...]
    total: WeightedSum | None = None


def is_node_unavailable(msg: Message) -> bool:
    """Return whether ``msg`` is Flower's node-unavailable error reply.

    The SuperLink answers a message with it (``ErrorCode.NODE_UNAVAILABLE``) once the
    destination SuperNode missed its heartbeats, e.g. after a SIGKILL; it also accepts new
    messages to that node and answers them the same way until the node is back.
    """
    return msg.has_error() and msg.error.code == ErrorCode.NODE_UNAVAILABLE


def is_profile_reply(msg: Message) -> bool:
    """Return whether ``msg`` is a profile-only reply (a ConfigRecord :data:`wire.PROFILE`).

    A train reply that carries the profile beside its update (:data:`wire.PROFILE_WITH_JOB`)
    has arrays or metrics and is not profile-only.
    """
    return (
        msg.has_content()
        and wire.PROFILE in msg.content.config_records
        and not msg.content.array_records
        and not msg.content.metric_records
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def short_error(reason: str, limit: int = 300) -> str:
    """Return a one-line form of a client error's reason, for a log line.

    Flower puts the ClientApp's whole traceback (with the terminal's colour codes) into the
    reason: keep its last non-empty line (the exception), without colour codes, at most
    ``limit`` characters.
    """
    lines = [line.strip() for line in _ANSI.sub("", reason).splitlines() if line.strip()]
    if not lines:
        return "(no reason given)"
    exception = lines[-1].removesuffix("'>")  # Flower's reason may end in its repr's "'>"
    last = exception if len(lines) == 1 else f"{exception} (the node logs the traceback)"
    return last if len(last) <= limit else last[: limit - 3] + "..."


def parse_reply_for(
    msg: Message,
    node_id: int,
    keys: Sequence[str],
    *,
    virtual: bool,
    weight_key: str = wire.NUM_EXAMPLES,
    arrays_key: str = wire.ARRAYS,
) -> tuple[TrainReply | ProfileRecord | None, str | None]:
    """Parse a reply to a train message sent to ``node_id``: ``(reply, None)`` or ``(None, why)``.

    The reply is a :class:`TrainReply`, or a :class:`ProfileRecord` when the message asked for
    the node's profile (:data:`wire.PROFILE_MODE` in its config) and the client answered with
    its profile only. Flower's own errors (node unavailable, message expired) come from the
    SuperLink (node 1), not from the node the message was for: their reason is reported as
    Flower gave it. Under a virtual clock a progress report must take virtual time (or the
    clock never moves on).
    """
    if msg.has_error():
        error = msg.error
        why = short_error(str(error.reason))
        return None, f"client error for node {node_id} (code {error.code}): {why}"
    src = int(msg.metadata.src_node_id)
    if src != node_id:
        return None, f"reply from node {src} to a message for node {node_id}"
    try:
        if is_profile_reply(msg):
            try:
                return parse_profile_reply(msg), None
            except InputError as exc:
                return None, f"{BAD_PROFILE_REPLY}: {exc}"
        reply = parse_train_reply(msg, keys, weight_key, arrays_key)
    except InputError as exc:
        return None, str(exc)
    if virtual and not reply.done and not (reply.virtual_seconds or 0.0) > 0.0:
        return None, f"progress report without {wire.VIRTUAL_SECONDS} > 0 under a virtual clock"
    return reply, None


from strategies.history import AggregationRecord  # noqa: E402  (moved; re-exported)
