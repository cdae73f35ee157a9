"""Training jobs of the edge strategy: start, resume, run one slice, decide at a preemption point.

A *job* processes exactly :data:`~flower_edge.wire.SAMPLE_SHARE` samples of the node's
deterministic sample stream in slices; between slices its model, optimizer state and RNG state
stay in ``context.state`` (:class:`~clients.state.JobState`), so three slices give the same
model as one. A slice message that announces a newer global model is a preemption point, where
the seed-001 rule (:func:`flower_edge.decision.decide`) abandons the stale job or continues it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from logging import DEBUG, INFO, WARNING
from typing import Any, Final

import torch
from flwr.app import ArrayRecord, MetricRecord, MetricRecordValues, RecordDict
from flwr.common.logger import log
from torch.utils.data import Dataset

from clients.messages import TrainRequest
from clients.node import NodeRuntime
from clients.optim import LocalOptimizer
from clients.settings import ClientSettings
from clients.slot import ModelSlot
from clients.state import (
    CorruptedStateError,
    JobRecord,
    JobState,
    NodeState,
    optimizer_from_records,
    optimizer_to_records,
)
from clients.task import MAX_LOCAL_EPOCHS, SliceResult, sized, stream_key, train_slice
from flower_edge import wire
from flower_edge.decision import Decision, decide, node_value
from flower_edge.errors import InputError, TaskError
from flower_edge.timing import DeviceTimer

__all__ = [
    "MAX_SHARE_EPOCHS",
    "JobRuntime",
    "as_uint64",
    "check_finite",
    "check_share",
    "current_job",
    "log_decision",
    "resume_job",
    "run_slice",
    "slice_limits",
    "start_job",
    "train_job",
]


#: the largest ``sample-share`` a node accepts, in epochs of its local training samples
MAX_SHARE_EPOCHS: Final = MAX_LOCAL_EPOCHS


def check_share(share: int, local_samples: int) -> None:
    """Refuse a ``sample-share`` above :data:`MAX_SHARE_EPOCHS` epochs of the local samples.

    A share is trained to the end (a slice budget of 0 trains it in one message), so an absurd
    one (``10**9`` on a few hundred samples) would train for days. A node without training
    samples trains nothing whatever its share.

    Raises
    ------
    InputError
        If ``share > MAX_SHARE_EPOCHS * local_samples`` (the message gives both numbers).
    """
    bound = MAX_SHARE_EPOCHS * local_samples
    if local_samples > 0 and share > bound:
        raise InputError(
            f"config {wire.SAMPLE_SHARE!r} must be at most {MAX_SHARE_EPOCHS} epochs of the "
            f"node's {local_samples} local training samples ({bound}), got {share}"
        )


@dataclass(frozen=True)
class JobRuntime:
    """A live job: its model and optimizer rebuilt from records, and its RNG state."""

    record: JobRecord
    slot: ModelSlot
    optimizer: LocalOptimizer
    rng: torch.Tensor


def start_job(
    rt: NodeRuntime,
    job_id: int,
    base_version: int,
    share: int,
    arrays: ArrayRecord,
    s: ClientSettings,
    node_id: int,
) -> JobRuntime:
    """Start job ``job_id`` from ``arrays`` with a fresh optimizer and the job's own RNG seed."""
    slot = rt.slot()
    slot.load(arrays, "global arrays")
    gen = torch.Generator().manual_seed(stream_key(s.seed, node_id, f"rng-{job_id}"))
    rng = gen.get_state()
    return JobRuntime(
        JobRecord(job_id=job_id, base_version=base_version, share=share),
        slot,
        rt.new_optimizer(slot, s),
        rng,
    )


def resume_job(rt: NodeRuntime, job: JobState, s: ClientSettings) -> JobRuntime:
    """Rebuild a stored job (CorruptedStateError if its records do not fit)."""
    slot = rt.slot()
    try:
        slot.load(job.model, "stored job arrays")
    except InputError as exc:
        raise CorruptedStateError(str(exc)) from exc
    optimizer = rt.new_optimizer(slot, s)
    try:
        rng = optimizer_from_records(optimizer, job.optim, job.optim_scalars)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise CorruptedStateError(f"stored optimizer state: {exc}") from exc
    if rng is None:
        raise CorruptedStateError("stored job without its RNG state")
    return JobRuntime(job.record, slot, optimizer, rng)


def run_slice(
    rt: NodeRuntime,
    job: JobRuntime,
    train: Dataset[Any],
    s: ClientSettings,
    node_id: int,
    *,
    grant: int | None,
    deadline: float | None,
) -> tuple[JobRuntime, SliceResult]:
    """Train one slice of ``job`` (up to ``grant`` samples or ``deadline``); return it advanced."""
    r = job.record
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(job.rng)
        result = train_slice(
            job.slot.model,
            job.optimizer,
            rt.loss(),
            train,
            key=stream_key(s.seed, node_id, r.job_id),
            share=r.share,
            position=r.position,
            batch_size=s.batch_size,
            grant=grant,
            deadline=deadline,
            device=rt.task.torch_device(),
        )
        rng = torch.get_rng_state()
    record = replace(
        r,
        position=result.position,
        credit=result.credit,
        loss_sum=r.loss_sum + result.loss_sum,
        seconds=r.seconds + result.seconds,
    )
    check_finite(record, job.slot)
    return JobRuntime(record, job.slot, job.optimizer, rng), result


def check_finite(record: JobRecord, slot: ModelSlot) -> None:
    """Refuse a diverged job: a non-finite training loss or weights (TaskError).

    Raises
    ------
    TaskError
        If the job's mean training loss or one of the model's arrays is NaN or Inf; nothing
        of the job is kept or sent.
    """
    hint = "check the features and the learning rate"
    loss = record.loss_sum / record.position if record.position else 0.0
    if not math.isfinite(loss):
        raise TaskError(f"training diverged: {wire.TRAIN_LOSS} is {loss}; {hint}")
    bad = slot.first_non_finite()
    if bad is not None:
        raise TaskError(f"training diverged: array {bad!r} holds NaN or Inf; {hint}")


def train_job(
    rt: NodeRuntime,
    req: TrainRequest,
    s: ClientSettings,
    train: Dataset[Any],
    nodes: tuple[int, int],
    state: NodeState,
    timer: DeviceTimer | None,
) -> tuple[NodeState, RecordDict]:
    """Advance the job of ``req`` by one slice; return the new state and the reply.

    ``nodes`` is ``(node id, stream node)``: the id the server values, and the identity
    that seeds the sample order (see :func:`~clients.node.stream_node`).
    """
    node_id, stream_node = nodes
    if req.job_id is None or req.global_version is None:
        raise InputError(f"config {wire.JOB_ID!r} and {wire.GLOBAL_VERSION!r} are required")
    node = state.node
    # the latest valuation results: remember this node's value when it took part
    value, participated = node_value(
        as_uint64(node_id),
        [as_uint64(i) for i in req.value_node_ids],
        req.values,
        node.last_value,
    )
    newer = (
        node.values_round is None
        or req.values_round is None
        or req.values_round >= node.values_round
    )
    if participated and newer:  # never overwrite a value with one from older results
        node = replace(node, last_value=value, values_round=req.values_round)
    global_arrays, global_version = state.global_arrays, node.global_version
    if req.arrays is not None and (global_version is None or req.global_version >= global_version):
        global_arrays, global_version = req.arrays, req.global_version
    node = replace(node, global_version=global_version)

    job = current_job(rt, req, state, s)
    abandoned = 0
    share = req.sample_share
    if job is not None and req.global_version > job.record.base_version:
        theta = s.theta if req.theta is None else req.theta  # the server's threshold wins
        resource = linear_resource(req) * rt.availability(timer is not None)
        decision = decide(s.alpha, theta, resource, value, participated)
        log_decision(req, job.record, decision, theta)
        if decision.abandon:
            abandoned = 1
            node = replace(node, abandoned_jobs=node.abandoned_jobs + 1)
            share = job.record.share if share is None else share
            job = None
    if job is None:
        offered = req.arrays
        if offered is None and global_version == req.global_version:
            offered = global_arrays
        if offered is None:
            raise InputError(
                f"train message for job {req.job_id} carries no {wire.ARRAYS!r} and the "
                f"node holds no global model of version {req.global_version} "
                f"(it holds {global_version})"
            )
        share = s.local_epochs * sized(train) if share is None else share
        job = start_job(rt, req.job_id, req.global_version, share, offered, s, stream_node)

    grant, deadline = slice_limits(req, timer, job.record.credit)
    credit_before = job.record.credit
    job, result = run_slice(rt, job, train, s, stream_node, grant=grant, deadline=deadline)
    r = job.record
    done = r.position >= r.share or sized(train) == 0

    metrics: dict[str, MetricRecordValues] = {
        wire.NUM_EXAMPLES: r.position,
        wire.DONE: int(done),
        wire.JOB_ID: r.job_id,
        wire.BASE_VERSION: r.base_version,
        wire.SAMPLES_PROCESSED: r.position,
        wire.TRAIN_SECONDS: r.seconds,
        wire.ABANDONED: abandoned,
        wire.ABANDONED_JOBS: node.abandoned_jobs,
        wire.TRAIN_LOSS: r.loss_sum / r.position if r.position else 0.0,
        # what scales this node's R now: the server derives theta from the same scores
        wire.AVAILABILITY: rt.availability(timer is not None),
    }
    content = RecordDict()
    job_state: JobState | None = None
    if done:
        content[wire.ARRAYS] = job.slot.arrays()
    else:
        optim, scalars = optimizer_to_records(job.optimizer, job.rng)
        job_state = JobState(r, job.slot.arrays(), optim, scalars)
    if timer is not None:
        # virtual work of this slice: the whole grant while the job goes on; when it ends,
        # only the samples it still needed beyond the credit carried in
        needed = max(0, result.samples - credit_before)
        charged = needed if grant is None or done else grant - credit_before
        upload = content[wire.ARRAYS].count_bytes() if done else 0
        metrics[wire.VIRTUAL_SECONDS] = float(
            timer.slice_seconds(float(req.send_time or 0.0), charged, req.download_bytes, upload)
        )
    content[wire.METRICS] = MetricRecord(metrics)
    return NodeState(node, global_arrays, job_state), content


def current_job(
    rt: NodeRuntime, req: TrainRequest, state: NodeState, s: ClientSettings
) -> JobRuntime | None:
    """Return the stored job when ``req`` continues it, else ``None``."""
    if state.job is None:
        return None
    if state.job.record.job_id != req.job_id:
        log(
            INFO,
            "job %s replaced by job %s before it finished",
            state.job.record.job_id,
            req.job_id,
        )
        return None
    try:
        return resume_job(rt, state.job, s)
    except CorruptedStateError as exc:
        log(WARNING, "corrupted job state (%s): restarting job %s", exc, req.job_id)
        return None


def slice_limits(
    req: TrainRequest, timer: DeviceTimer | None, credit: int
) -> tuple[int | None, float | None]:
    """Return ``(grant, deadline)`` of a slice: virtual samples, or a wall-clock deadline.

    A virtual slice grants at least one sample beyond the carried ``credit``: a device
    offline for the whole budget, or one slower than a sample per budget, would otherwise
    charge no work, report a slice of 0 virtual seconds (which the server rejects) and never
    progress. The one sample is charged (the reply comes once the device is back and has
    trained it) and carried as credit until a batch fits.
    """
    if req.slice_budget <= 0:
        return None, None
    if timer is not None:
        granted = int(timer.samples_within(float(req.send_time or 0.0), req.slice_budget))
        return max(1, granted) + credit, None
    return None, time.perf_counter() + req.slice_budget


def linear_resource(req: TrainRequest) -> float:
    """Return the node's ``R`` before availability, on the linear ``[0, 1]`` scale.

    The server's :data:`~flower_edge.wire.RESOURCE` (``sqrt(m / max m)``) when sent; else
    ``sqrt(m)`` of the match ratio alone (the same scale up to the best node's ``sqrt(max
    m)``); else 1 (a server that sends neither, e.g. a plain Flower strategy).
    """
    if req.resource is not None:
        return req.resource
    if req.match_ratio is not None:
        return math.sqrt(req.match_ratio)
    return 1.0


def log_decision(req: TrainRequest, job: JobRecord, decision: Decision, theta: float) -> None:
    """Log the abandon decision taken at a preemption point."""
    # an abandon is an event worth seeing; "continue" repeats at every slice of a stale job
    log(
        INFO if decision.abandon else DEBUG,
        "job %s: global v%s arrived while training from v%s: score %.4f "
        "(R=%.4f, V=%.4f, participated=%s) vs theta %.4f -> %s",
        req.job_id,
        req.global_version,
        job.base_version,
        decision.score,
        decision.resource,
        decision.value,
        decision.participated,
        theta,
        "abandon" if decision.abandon else "continue",
    )


def as_uint64(node_id: int) -> int:
    """Node ids are uint64; a server may send them as sint64: compare them modulo 2**64."""
    return node_id % 2**64
