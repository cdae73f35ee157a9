"""The ClientApp builder: profile query, abandon decision, resumable sliced training, evaluation.

:func:`build_client_app` wraps a user's :class:`~clients.task.Task` into a Flower
:class:`~flwr.clientapp.ClientApp` that speaks the protocol of :mod:`flower_edge.wire`:

``query.profile``
    Runs the node's resource probe once (cached in ``context.state`` per mode) and replies with
    the four resource evaluations, the local sample count and the JSON report.
``train``
    With a :data:`~flower_edge.wire.JOB_ID` (the edge strategy): a *job* processes exactly
    :data:`~flower_edge.wire.SAMPLE_SHARE` samples of the node's deterministic sample stream
    (epochs as needed), in slices of :data:`~flower_edge.wire.SLICE_BUDGET` seconds. Progress,
    model, optimizer state and RNG state stay in ``context.state`` between slices, so three
    slices give the same model as one. A slice message of the running job that announces a
    newer global model is a preemption point: the seed-001 rule
    (:func:`flower_edge.decision.decide`) abandons the stale job and restarts from the new
    global, or continues it.

    Without a job id (a plain Flower server such as ``FedAvg``): ``local-epochs`` epochs over
    the local data (or :data:`~flower_edge.wire.SAMPLE_SHARE` samples when given) in one
    message, nothing kept in state.
``evaluate``
    Evaluates the received global model on the node's local test data.

Bad input (missing arrays, arrays that do not fit the model, missing or out-of-range keys)
gets an error reply, ``Message(Error(code, reason), reply_to=msg)``, whose reason names the
problem; the node's state is only written after a message succeeded, so it stays usable.

Clocks: by default the wall clock (a slice trains whole batches until its budget in seconds
is spent; budget 0 trains the whole job). With ``timer_fn`` (simulations) the node is on a
virtual clock: a slice processes ``timer.samples_within(send_time, budget)`` samples (whole
batches; a remainder smaller than the next batch is carried to the next slice as credit) and
reports :data:`~flower_edge.wire.VIRTUAL_SECONDS` from ``timer.slice_seconds``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from logging import DEBUG, INFO, WARNING
from typing import Any

import torch
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Error,
    Message,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from torch import nn
from torch.utils.data import Dataset

from clients.arrays import record_to_state_dict, state_dict_to_record
from clients.messages import TrainRequest, parse_arrays, parse_profile, parse_train
from clients.settings import ClientSettings
from clients.state import (
    PROFILE_KEY_PREFIX,
    CorruptedStateError,
    JobRecord,
    JobState,
    NodeState,
    load_state,
    optimizer_from_records,
    optimizer_to_records,
    save_state,
)
from clients.task import (
    SliceResult,
    Task,
    build_optimizer,
    evaluate_model,
    sized,
    stream_key,
    train_slice,
)
from flower_edge import wire
from flower_edge.decision import Decision, decide, node_value
from flower_edge.errors import FlowerEdgeError, InputError, ProfilingError
from flower_edge.profiling.report import ResourceProbe
from flower_edge.timing import DeviceTimer

__all__ = [
    "ERROR_CODE",
    "build_client_app",
    "host_availability",
]

#: code of the error replies sent for bad input (Flower's "ClientApp raised an exception")
ERROR_CODE: int = ErrorCode.CLIENT_APP_RAISED_EXCEPTION
_DATA_CACHE_SIZE = 256


def host_availability() -> float:
    """Return the host's current availability in [0, 1]: idle CPU x available memory fraction.

    The idle CPU fraction is measured by :func:`psutil.cpu_percent` since its previous call in
    this process (the first call reads as fully idle).
    """
    import psutil

    idle = 1.0 - float(psutil.cpu_percent(interval=None)) / 100.0
    mem = psutil.virtual_memory()
    free = float(mem.available) / float(mem.total) if mem.total else 0.0
    return min(1.0, max(0.0, idle * free))


def _default_probe(_: Context) -> ResourceProbe:
    from flower_edge.profiling import HostProbe

    return HostProbe()


def _error_reply(msg: Message, exc: Exception) -> Message:
    reason = f"{type(exc).__name__}: {exc}"
    log(
        WARNING,
        "%s message %s refused: %s",
        msg.metadata.message_type,
        msg.metadata.message_id,
        reason,
    )
    return Message(Error(code=ERROR_CODE, reason=reason), reply_to=msg)


# ---------------------------------------------------------------- model arrays


def _plain_state(model: nn.Module) -> bool:
    """Whether ``model``'s state dict is exactly its tensors (no custom load or save logic)."""
    base = nn.Module._load_from_state_dict
    for m in model.modules():
        if type(m)._load_from_state_dict is not base:  # e.g. BatchNorm's versioned buffers
            return False
        if m._load_state_dict_pre_hooks or m._load_state_dict_post_hooks:
            return False
        if m._state_dict_hooks or m._state_dict_pre_hooks:
            return False
    return True


class _ModelSlot:
    """One model instance per process and thread, reused across messages.

    ``tensors`` is the model's state dict, kept when loading it is a plain copy into each
    tensor (:func:`_plain_state`): its tensors share storage with the parameters and buffers,
    so reading them gives the current weights and ``copy_`` into them loads new ones.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.tensors: dict[str, torch.Tensor] | None = (
            dict(model.state_dict()) if _plain_state(model) else None
        )
        self.optimizer: torch.optim.Optimizer | None = None

    def state(self) -> dict[str, torch.Tensor]:
        """Return the current state dict (tensors sharing the model's storage)."""
        return self.tensors if self.tensors is not None else dict(self.model.state_dict())

    def load(self, arrays: ArrayRecord, what: str) -> None:
        """Load ``arrays`` after checking names and shapes (InputError if unfit).

        Arrays named ``"0"``, ``"1"``, ... (``ArrayRecord(list_of_ndarrays)``) are matched to
        the model's ``state_dict`` by position.
        """
        expected = self.state()
        keys = list(arrays.keys())
        if keys != list(expected):
            if keys == [str(i) for i in range(len(expected))]:
                arrays = ArrayRecord({name: arrays[str(i)] for i, name in enumerate(expected)})
            elif set(keys) != set(expected):
                missing = sorted(set(expected) - set(keys))[:5]
                extra = sorted(set(keys) - set(expected))[:5]
                raise InputError(
                    f"{what} do not fit the local model: missing {missing}, unexpected {extra}"
                )
        for name, tensor in expected.items():
            shape = tuple(arrays[name].shape)
            if shape != tuple(tensor.shape):
                raise InputError(
                    f"{what} do not fit the local model: {name!r} has shape {list(shape)}, "
                    f"the model expects {list(tensor.shape)}"
                )
        values = record_to_state_dict(arrays)
        if self.tensors is None:
            self.model.load_state_dict(values, strict=True)
            return
        with torch.no_grad():
            for name, tensor in self.tensors.items():
                tensor.copy_(values[name])

    def arrays(self) -> ArrayRecord:
        """Return the current weights as an ArrayRecord."""
        return state_dict_to_record(self.state())


# ---------------------------------------------------------------- one training job


@dataclass(frozen=True)
class _JobRuntime:
    """A live job: its model and optimizer rebuilt from records, and its RNG state."""

    record: JobRecord
    slot: _ModelSlot
    optimizer: torch.optim.Optimizer
    rng: torch.Tensor


class _Builder:
    """The state and helpers behind one built ClientApp."""

    def __init__(
        self,
        task: Task,
        timer_fn: Callable[[Context], DeviceTimer] | None,
        probe_fn: Callable[[Context], ResourceProbe] | None,
        availability_fn: Callable[[], float] | None,
    ) -> None:
        self.task = task
        self.timer_fn = timer_fn
        self.probe_fn = probe_fn or _default_probe
        self.availability_fn = availability_fn
        self._data: OrderedDict[tuple[int, int], tuple[Dataset[Any], Dataset[Any]]] = OrderedDict()
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the per-process caches (Ray ships the ClientApp to its actors)."""
        state = dict(self.__dict__)
        del state["_data"], state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled builder with empty caches."""
        self.__dict__.update(state)
        self._data = OrderedDict()
        self._local = threading.local()

    # ------------------------------------------------------------ helpers

    def data(self, ctx: Context) -> tuple[Dataset[Any], Dataset[Any]]:
        """Return the node's ``(train, test)``, loading it once per node and process."""
        key = (ctx.run_id, ctx.node_id)
        if key in self._data:
            self._data.move_to_end(key)
            return self._data[key]
        loaded = self.task.load_data(ctx)
        self._data[key] = loaded
        while len(self._data) > _DATA_CACHE_SIZE:
            self._data.popitem(last=False)
        return loaded

    def slot(self) -> _ModelSlot:
        """Return this thread's model slot (weights are always overwritten before use)."""
        slot: _ModelSlot | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = _ModelSlot(self.task.model_fn().to(self.task.torch_device()))
            self._local.slot = slot
        return slot

    def new_optimizer(self, slot: _ModelSlot, s: ClientSettings) -> torch.optim.Optimizer:
        """Return a fresh-state optimizer over the slot's model (the instance is reused)."""
        t = self.task
        if slot.optimizer is None:
            slot.optimizer = build_optimizer(
                t.optimizer, slot.model.parameters(), s.learning_rate, t.momentum, t.weight_decay
            )
            return slot.optimizer
        slot.optimizer.state.clear()  # no momentum or moments carried over between jobs
        for group in slot.optimizer.param_groups:
            group["lr"] = s.learning_rate
        return slot.optimizer

    def availability(self, virtual: bool) -> float:
        if self.availability_fn is not None:
            value = self.availability_fn()
        elif virtual:
            return 1.0
        else:
            value = host_availability()
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise InputError(f"availability_fn must return a number in [0, 1], got {value!r}")
        return float(value)

    def start_job(
        self,
        job_id: int,
        base_version: int,
        share: int,
        arrays: ArrayRecord,
        s: ClientSettings,
        node_id: int,
    ) -> _JobRuntime:
        slot = self.slot()
        slot.load(arrays, "global arrays")
        gen = torch.Generator().manual_seed(stream_key(s.seed, node_id, f"rng-{job_id}"))
        rng = gen.get_state()
        return _JobRuntime(
            JobRecord(job_id=job_id, base_version=base_version, share=share),
            slot,
            self.new_optimizer(slot, s),
            rng,
        )

    def resume_job(self, job: JobState, s: ClientSettings) -> _JobRuntime:
        slot = self.slot()
        try:
            slot.load(job.model, "stored job arrays")
        except InputError as exc:
            raise CorruptedStateError(str(exc)) from exc
        optimizer = self.new_optimizer(slot, s)
        try:
            rng = optimizer_from_records(optimizer, job.optim, job.optim_scalars)
        except (RuntimeError, ValueError, KeyError) as exc:
            raise CorruptedStateError(f"stored optimizer state: {exc}") from exc
        if rng is None:
            raise CorruptedStateError("stored job without its RNG state")
        return _JobRuntime(job.record, slot, optimizer, rng)

    def run_slice(
        self,
        job: _JobRuntime,
        train: Dataset[Any],
        s: ClientSettings,
        node_id: int,
        *,
        grant: int | None,
        deadline: float | None,
    ) -> tuple[_JobRuntime, SliceResult]:
        r = job.record
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(job.rng)
            result = train_slice(
                job.slot.model,
                job.optimizer,
                self.task.loss_fn(),
                train,
                key=stream_key(s.seed, node_id, r.job_id),
                share=r.share,
                position=r.position,
                batch_size=s.batch_size,
                grant=grant,
                deadline=deadline,
                device=self.task.torch_device(),
            )
            rng = torch.get_rng_state()
        record = replace(
            r,
            position=result.position,
            credit=result.credit,
            loss_sum=r.loss_sum + result.loss_sum,
            seconds=r.seconds + result.seconds,
        )
        return _JobRuntime(record, job.slot, job.optimizer, rng), result

    # ------------------------------------------------------------ handlers

    def profile(self, msg: Message, ctx: Context) -> Message:
        req = parse_profile(msg)
        key = PROFILE_KEY_PREFIX + req.mode
        cached = ctx.state.get(key)
        if isinstance(cached, ConfigRecord) and _is_profile_record(cached):
            return Message(RecordDict({wire.PROFILE: ConfigRecord(dict(cached))}), reply_to=msg)
        if cached is not None:
            log(WARNING, "corrupted cached profile under %s: profiling again", key)
        train, _ = self.data(ctx)
        report = self.probe_fn(ctx).profile(req.mode)
        evaluations = dict(report.evaluations)
        record: dict[str, Any] = {}
        for resource, wire_key in wire.EVAL_KEYS.items():
            value = evaluations.get(resource, 0.0)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                raise ProfilingError(
                    f"evaluation of {resource} must be finite and >= 0, got {value!r}"
                )
            record[wire_key] = float(value)
        record[wire.LOCAL_SAMPLES] = sized(train)
        record[wire.PROFILE_REPORT] = str(report.to_json())
        ctx.state[key] = ConfigRecord(dict(record))
        return Message(RecordDict({wire.PROFILE: ConfigRecord(record)}), reply_to=msg)

    def evaluate(self, msg: Message, ctx: Context) -> Message:
        ClientSettings.from_run_config(ctx.run_config, self.task)
        if not msg.has_content():
            raise InputError("evaluate message has no content")
        arrays = parse_arrays(msg.content)
        if arrays is None:
            stored = load_state(ctx.state).global_arrays
            if stored is None:
                raise InputError(
                    f"evaluate message carries no {wire.ARRAYS!r} and the node holds no "
                    "global model"
                )
            arrays = stored
        slot = self.slot()
        slot.load(arrays, "evaluate arrays")
        _, test = self.data(ctx)
        result = evaluate_model(
            slot.model,
            self.task.loss_fn(),
            test,
            batch_size=self.task.eval_batch_size,
            device=self.task.torch_device(),
        )
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: result.num_examples,
                wire.EVAL_LOSS: result.loss,
                wire.EVAL_ACCURACY: result.accuracy,
            }
        )
        return Message(RecordDict({wire.METRICS: metrics}), reply_to=msg)

    def train(self, msg: Message, ctx: Context) -> Message:
        s = ClientSettings.from_run_config(ctx.run_config, self.task)
        req = parse_train(msg)
        timer = self.timer_fn(ctx) if self.timer_fn is not None else None
        train, _ = self.data(ctx)
        if req.job_id is None:
            return self.train_plain(msg, req, s, train, _stream_node(ctx), timer)
        if req.global_version is None:
            raise InputError(f"config {wire.GLOBAL_VERSION!r} is required with {wire.JOB_ID!r}")
        if timer is not None and req.send_time is None:
            raise InputError(f"config {wire.SEND_TIME!r} is required under a virtual clock")
        state = load_state(ctx.state)
        node_state, content = self.train_job(
            req, s, train, (ctx.node_id, _stream_node(ctx)), state, timer
        )
        save_state(ctx.state, node_state)
        return Message(content, reply_to=msg)

    def train_plain(
        self,
        msg: Message,
        req: TrainRequest,
        s: ClientSettings,
        train: Dataset[Any],
        node_id: int,
        timer: DeviceTimer | None,
    ) -> Message:
        """One message, one whole job, nothing kept: the reply a plain Flower server expects."""
        if req.arrays is None:
            raise InputError(f"train message carries no {wire.ARRAYS!r} (the global model)")
        n = sized(train)
        share = req.sample_share if req.sample_share is not None else s.local_epochs * n
        plain_job = -1 - (req.server_round or 0)  # negative: never a server job id
        job = self.start_job(plain_job, req.global_version or 0, share, req.arrays, s, node_id)
        job, _ = self.run_slice(job, train, s, node_id, grant=None, deadline=None)
        r = job.record
        arrays = job.slot.arrays()
        metrics: dict[str, MetricRecordValues] = {
            wire.NUM_EXAMPLES: n if req.sample_share is None else r.position,
            wire.DONE: 1,
            wire.SAMPLES_PROCESSED: r.position,
            wire.TRAIN_SECONDS: r.seconds,
            wire.TRAIN_LOSS: r.loss_sum / r.position if r.position else 0.0,
        }
        if timer is not None:
            metrics[wire.VIRTUAL_SECONDS] = float(
                timer.slice_seconds(
                    req.send_time or 0.0, r.position, req.download_bytes, arrays.count_bytes()
                )
            )
        return Message(
            RecordDict({wire.ARRAYS: arrays, wire.METRICS: MetricRecord(metrics)}), reply_to=msg
        )

    def train_job(
        self,
        req: TrainRequest,
        s: ClientSettings,
        train: Dataset[Any],
        nodes: tuple[int, int],
        state: NodeState,
        timer: DeviceTimer | None,
    ) -> tuple[NodeState, RecordDict]:
        """Advance the job of ``req`` by one slice; return the new state and the reply.

        ``nodes`` is ``(node id, stream node)``: the id the server values, and the identity
        that seeds the sample order (see :func:`_stream_node`).
        """
        node_id, stream_node = nodes
        if req.job_id is None or req.global_version is None:
            raise InputError(f"config {wire.JOB_ID!r} and {wire.GLOBAL_VERSION!r} are required")
        node = state.node
        # the latest valuation results: remember this node's value when it took part
        value, participated = node_value(
            _as_uint64(node_id),
            [_as_uint64(i) for i in req.value_node_ids],
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
        if req.arrays is not None and (
            global_version is None or req.global_version >= global_version
        ):
            global_arrays, global_version = req.arrays, req.global_version
        node = replace(node, global_version=global_version)

        job = self.current_job(req, state, s)
        abandoned = 0
        share = req.sample_share
        if job is not None and req.global_version > job.record.base_version:
            ratio = 1.0 if req.match_ratio is None else req.match_ratio
            resource = ratio * self.availability(timer is not None)
            decision = decide(s.alpha, s.theta, resource, value, participated)
            _log_decision(req, job.record, decision, s.theta)
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
            job = self.start_job(req.job_id, req.global_version, share, offered, s, stream_node)

        grant, deadline = _slice_limits(req, timer, job.record.credit)
        credit_before = job.record.credit
        job, result = self.run_slice(job, train, s, stream_node, grant=grant, deadline=deadline)
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
                timer.slice_seconds(
                    float(req.send_time or 0.0), charged, req.download_bytes, upload
                )
            )
        content[wire.METRICS] = MetricRecord(metrics)
        return NodeState(node, global_arrays, job_state), content

    def current_job(
        self, req: TrainRequest, state: NodeState, s: ClientSettings
    ) -> _JobRuntime | None:
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
            return self.resume_job(state.job, s)
        except CorruptedStateError as exc:
            log(WARNING, "corrupted job state (%s): restarting job %s", exc, req.job_id)
            return None


def _slice_limits(
    req: TrainRequest, timer: DeviceTimer | None, credit: int
) -> tuple[int | None, float | None]:
    """Return ``(grant, deadline)`` of a slice: virtual samples, or a wall-clock deadline."""
    if req.slice_budget <= 0:
        return None, None
    if timer is not None:
        granted = int(timer.samples_within(float(req.send_time or 0.0), req.slice_budget))
        return max(0, granted) + credit, None
    return None, time.perf_counter() + req.slice_budget


def _log_decision(req: TrainRequest, job: JobRecord, decision: Decision, theta: float) -> None:
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


def _stream_node(ctx: Context) -> int:
    """Return the identity that seeds a node's sample order: its partition id when set.

    Flower draws node ids at random for every run; the partition id (set by the simulation
    engine, or ``--node-config``) keeps runs reproducible. Without one, the node id.
    """
    pid = ctx.node_config.get(wire.PARTITION_ID)
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    return ctx.node_id


def _as_uint64(node_id: int) -> int:
    """Node ids are uint64; a server may send them as sint64: compare them modulo 2**64."""
    return node_id % 2**64


def _is_profile_record(rec: ConfigRecord) -> bool:
    keys = [*wire.EVAL_KEYS.values(), wire.LOCAL_SAMPLES, wire.PROFILE_REPORT]
    return all(k in rec for k in keys) and isinstance(rec[wire.PROFILE_REPORT], str)


def build_client_app(
    task: Task,
    *,
    timer_fn: Callable[[Context], DeviceTimer] | None = None,
    probe_fn: Callable[[Context], ResourceProbe] | None = None,
    availability_fn: Callable[[], float] | None = None,
) -> ClientApp:
    """Build the flower-edge ClientApp around a user's task.

    Parameters
    ----------
    task : Task
        Model factory, data loader and training defaults.
    timer_fn : Callable[[Context], DeviceTimer] | None (default: None)
        Simulations: the node's virtual device clock. ``None``: wall clock.
    probe_fn : Callable[[Context], ResourceProbe] | None (default: None)
        Simulations: the node's virtual resource probe. ``None``: the host's quick profile
        (``flower_edge.profiling.HostProbe``).
    availability_fn : Callable[[], float] | None (default: None)
        Current availability in [0, 1] that scales the match ratio into the resource ``R``.
        ``None``: :func:`host_availability` on the wall clock, 1.0 on a virtual clock.

    Returns
    -------
    ClientApp
        Registers ``query.profile``, ``train`` and ``evaluate``.
    """
    builder = _Builder(task, timer_fn, probe_fn, availability_fn)
    app = ClientApp()

    def guarded(
        handler: Callable[[Message, Context], Message],
    ) -> Callable[[Message, Context], Message]:
        def run(msg: Message, ctx: Context) -> Message:
            try:
                return handler(msg, ctx)
            except FlowerEdgeError as exc:
                return _error_reply(msg, exc)

        return run

    app.query(wire.PROFILE_ACTION)(guarded(builder.profile))
    app.train()(guarded(builder.train))
    app.evaluate()(guarded(builder.evaluate))
    return app
