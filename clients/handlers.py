"""The ClientApp's three handlers: ``query.profile``, ``train`` and ``evaluate``.

:class:`ClientHandlers` parses each message once (:mod:`clients.messages`), runs it on the
node's runtime (:class:`~clients.node.NodeRuntime`) and builds the reply; the edge strategy's
sliced jobs are in :mod:`clients.jobs`.
"""

from __future__ import annotations

from logging import WARNING
from typing import Any

from flwr.app import (
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    MetricRecordValues,
    RecordDict,
)
from flwr.common.logger import log
from torch.utils.data import Dataset

from clients.jobs import check_share, run_slice, start_job, train_job
from clients.messages import TrainRequest, config_of, parse_arrays, parse_profile, parse_train
from clients.node import NodeRuntime, stream_node
from clients.settings import ClientSettings
from clients.state import PROFILE_KEY_PREFIX, load_state, save_state
from clients.task import evaluate_model, sized
from flower_edge import validate, wire
from flower_edge.errors import InputError, ProfilingError
from flower_edge.timing import DeviceTimer

__all__ = ["ClientHandlers", "is_profile_record"]


class ClientHandlers(NodeRuntime):
    """The handlers of one built ClientApp, over the node's runtime."""

    def profile(self, msg: Message, ctx: Context) -> Message:
        """Reply with the node's resource evaluations, cached in state per profiling mode."""
        return Message(RecordDict({wire.PROFILE: self.profile_record(msg, ctx)}), reply_to=msg)

    def profile_record(self, msg: Message, ctx: Context) -> ConfigRecord:
        """Return the node's profile in the mode ``msg`` asks for (cached in ``ctx.state``)."""
        req = parse_profile(msg)
        key = PROFILE_KEY_PREFIX + req.mode
        cached = ctx.state.get(key)
        if isinstance(cached, ConfigRecord) and is_profile_record(cached):
            return ConfigRecord(dict(cached))
        if cached is not None:
            log(WARNING, "corrupted cached profile under %s: profiling again", key)
        train, _ = self.data(ctx)
        report = self.probe_fn(ctx).profile(req.mode)
        evaluations = dict(report.evaluations)
        record: dict[str, Any] = {}
        for resource, wire_key in wire.EVAL_KEYS.items():
            record[wire_key] = validate.number(
                f"evaluation of {resource}",
                evaluations.get(resource, 0.0),
                low=0.0,
                error=ProfilingError,
            )
        record[wire.LOCAL_SAMPLES] = sized(train)
        record[wire.PROFILE_REPORT] = str(report.to_json())
        ctx.state[key] = ConfigRecord(dict(record))
        return ConfigRecord(record)

    def evaluate(self, msg: Message, ctx: Context) -> Message:
        """Evaluate the received (or stored) global model on the node's local test data."""
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
            self.loss(),
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
        """Run one slice of a job (edge strategy) or one whole plain job (no job id).

        A train message whose config carries :data:`~flower_edge.wire.PROFILE_MODE` (the
        server's first message to the node) is answered with the node's profile only, as
        :meth:`profile` answers ``query.profile``; the server then sends the node its job.
        With :data:`~flower_edge.wire.PROFILE_WITH_JOB` true as well, the node trains the
        job and sends its profile beside the reply.
        """
        profile: ConfigRecord | None = None
        cfg = config_of(msg.content) if msg.has_content() else ConfigRecord()
        if wire.PROFILE_MODE in cfg:
            with_job = cfg.get(wire.PROFILE_WITH_JOB, False)
            validate.boolean(f"config {wire.PROFILE_WITH_JOB!r}", with_job, error=InputError)
            if not with_job:
                return self.profile(msg, ctx)
            profile = self.profile_beside_job(msg, ctx)
        reply = self.train_job_reply(msg, ctx)
        if profile is not None and not reply.has_error():
            reply.content.config_records[wire.PROFILE] = profile
        return reply

    def profile_beside_job(self, msg: Message, ctx: Context) -> ConfigRecord | None:
        """Return the profile to send beside the job's reply, or ``None`` when it failed.

        The server's request (``profile-mode``) and the node's data are checked first: their
        errors get an error reply. Any failure of the profiling itself (the probe raising
        whatever it raises, a bad ``profile-cache`` in the node config) is logged with its
        type and the job runs without the profile.
        """
        parse_profile(msg)
        self.data(ctx)
        try:
            return self.profile_record(msg, ctx)
        except Exception as exc:  # the job still runs
            log(
                WARNING,
                "profiling failed (%s: %s): training without sending a profile",
                type(exc).__name__,
                exc,
            )
            return None

    def train_job_reply(self, msg: Message, ctx: Context) -> Message:
        """Run one slice of a job, or one whole plain job, and return its reply."""
        s = ClientSettings.from_run_config(ctx.run_config, self.task)
        req = parse_train(msg)
        timer = self.timer_fn(ctx) if self.timer_fn is not None else None
        train, _ = self.data(ctx)
        if req.sample_share is not None:
            check_share(req.sample_share, sized(train))
        if req.job_id is None:
            return self.train_plain(msg, req, s, train, stream_node(ctx), timer)
        if req.global_version is None:
            raise InputError(f"config {wire.GLOBAL_VERSION!r} is required with {wire.JOB_ID!r}")
        if timer is not None and req.send_time is None:
            raise InputError(f"config {wire.SEND_TIME!r} is required under a virtual clock")
        state = load_state(ctx.state)
        node_state, content = train_job(
            self, req, s, train, (ctx.node_id, stream_node(ctx)), state, timer
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
        job = start_job(self, plain_job, req.global_version or 0, share, req.arrays, s, node_id)
        job, _ = run_slice(self, job, train, s, node_id, grant=None, deadline=None)
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


def is_profile_record(rec: ConfigRecord) -> bool:
    """Whether ``rec`` is a complete cached profile reply."""
    keys = [*wire.EVAL_KEYS.values(), wire.LOCAL_SAMPLES, wire.PROFILE_REPORT]
    return all(k in rec for k in keys) and isinstance(rec[wire.PROFILE_REPORT], str)
