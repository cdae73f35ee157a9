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
So does a failure of the user's task (:class:`~flower_edge.errors.TaskError`: ``load_data`` or
``model_fn`` raising or returning the wrong thing, data that do not fit the model), logged in
one line instead of a traceback (:mod:`clients.user_code`).

Clocks: by default the wall clock (a slice trains whole batches until its budget in seconds
is spent; budget 0 trains the whole job). With ``timer_fn`` (simulations) the node is on a
virtual clock: a slice processes ``timer.samples_within(send_time, budget)`` samples (whole
batches; a remainder smaller than the next batch is carried to the next slice as credit) and
reports :data:`~flower_edge.wire.VIRTUAL_SECONDS` from ``timer.slice_seconds``.

The parts: :mod:`clients.handlers` (the three handlers), :mod:`clients.jobs` (sliced jobs and
the abandon decision), :mod:`clients.node` (per-process runtime: data, model slots,
availability), :mod:`clients.slot` (loading and reading the model's arrays).
"""

from collections.abc import Callable
from logging import ERROR, WARNING

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.common.logger import log

from clients.handlers import ClientHandlers
from clients.node import host_availability
from clients.task import Task
from flower_edge import wire
from flower_edge.errors import FlowerEdgeError, TaskError
from flower_edge.profiling.report import ResourceProbe
from flower_edge.timing import DeviceTimer

__all__ = [
    "ERROR_CODE",
    "build_client_app",
    "host_availability",
]

#: code of the error replies sent for bad input (Flower's "ClientApp raised an exception")
ERROR_CODE: int = ErrorCode.CLIENT_APP_RAISED_EXCEPTION


def _error_reply(msg: Message, exc: Exception) -> Message:
    reason = f"{type(exc).__name__}: {exc}"
    log(  # one line: the user's task at fault is an ERROR, bad server input a WARNING
        ERROR if isinstance(exc, TaskError) else WARNING,
        "%s message %s %s: %s",
        msg.metadata.message_type,
        msg.metadata.message_id,
        "failed in the task" if isinstance(exc, TaskError) else "refused",
        reason,
    )
    return Message(Error(code=ERROR_CODE, reason=reason), reply_to=msg)


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
        Simulations: the node's virtual resource probe. ``None``: the host's profile
        (``flower_edge.profiling.HostProbe``), kept on disk and reused when the node config
        names a ``profile-cache`` folder (:func:`clients.profile_cache.node_probe`).
    availability_fn : Callable[[], float] | None (default: None)
        Current availability in [0, 1] that scales the match ratio into the resource ``R``.
        ``None``: :func:`host_availability` on the wall clock, 1.0 on a virtual clock.

    Returns
    -------
    ClientApp
        Registers ``query.profile``, ``train`` and ``evaluate``.

    Raises
    ------
    ConfigError
        ``task`` is not a :class:`~clients.Task`, or a ``*_fn`` is neither callable nor None.
    """
    builder = ClientHandlers(task, timer_fn, probe_fn, availability_fn)
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
