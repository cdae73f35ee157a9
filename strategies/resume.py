"""Saving an event loop's state after each aggregation, and resuming a run from it.

:func:`save_checkpoint` writes the audit lines of an aggregation, then a typed
:class:`~strategies.checkpoint.RunState` with the global model, then the (now empty) buffer;
:func:`resume_from_checkpoint` puts all of it back into a fresh
:class:`~strategies.loop.EventLoop`, with the updates accepted but not yet aggregated.
"""

from __future__ import annotations

from collections.abc import Sequence
from logging import INFO, WARNING
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from flwr.app import MetricRecord
from flwr.common.logger import log

from flower_edge.aggregation import check_update
from flower_edge.errors import ConfigError, InputError
from strategies.checkpoint import (
    FINISHED_FILE,
    CheckpointStore,
    NodeState,
    RunState,
    buffer_entry,
    buffered_updates,
)
from strategies.checkpoint_files import atomic_write, read_npz
from strategies.evaluation import to_record
from strategies.records import AggregationRecord, Update

if TYPE_CHECKING:
    from strategies.loop import EventLoop

#: a server optimizer's moments after aggregation ``round`` (``EdgeStrategy(server_opt=...)``)
OPTIMIZER_FILE = "server-opt-{:06d}.npz"

__all__ = [
    "checkpoint_name",
    "conform_arrays",
    "resume_from_checkpoint",
    "save_buffered_update",
    "save_checkpoint",
    "save_client_evaluations",
]


def save_buffered_update(loop: EventLoop, update: Update) -> None:
    """Persist a newly buffered update (with the buffer list) before it can trigger anything.

    A kill during the aggregation it triggers, or that aggregation's checkpoint, then loses
    nothing accepted: resume re-aggregates it. For a strategy that aggregates deltas, an
    update based on an older global version is stored with that base model after its own
    arrays (the checkpoint holds only the latest global model), so resume can form its delta.
    """
    if loop.store is None:
        return
    arrays: Sequence[npt.NDArray[Any]] = update.arrays
    base = update.base_version
    if loop.strategy.needs_bases and base != loop.version and base in loop.versions:
        arrays = [*update.arrays, *loop.versions[base]]
    loop.store.save_buffered(
        [buffer_entry(u, loop.start_time) for u in loop.buffer],
        buffer_entry(update, loop.start_time),
        arrays,
    )


def _saved_bases(loop: EventLoop, store: CheckpointStore) -> dict[int, list[npt.NDArray[Any]]]:
    """Return the base models stored with buffered updates (see :func:`save_buffered_update`)."""
    count = len(loop.global_arrays)
    out: dict[int, list[npt.NDArray[Any]]] = {}
    # only files that hold a base model; the others (and damaged ones) are left out quietly:
    # buffered_updates reads the same files again and names each one it leaves out
    for entry, arrays in store.buffered(2 * count, quiet=True):
        base = [np.asarray(a) for a in arrays[count:]]
        version = entry.get("base_version") if isinstance(entry, dict) else None
        if isinstance(version, int) and check_update(base, loop.global_arrays) is None:
            out[version] = base
    return out


def checkpoint_name(loop: EventLoop) -> str:
    """Return the strategy's name in its checkpoints: its class's, not the preset's.

    ``EdgeStrategy.preset("edge-seed")`` logs as ``edge-seed`` but is the EdgeStrategy that
    wrote ``edge`` into the checkpoints of earlier versions; an ``EdgeStrategy(...)`` built with
    the preset's options is the same strategy too, so both resume an ``edge`` checkpoint.
    """
    return str(type(loop.strategy).name)


def save_checkpoint(loop: EventLoop, record: AggregationRecord) -> None:
    """Write the audit lines of ``record``, then the run state and the (empty) buffer."""
    if loop.store is None:
        return
    now = loop.clock.now()
    rnd, ids, vals = loop.evaluation.last_values
    state = RunState(
        strategy=checkpoint_name(loop),
        version=loop.version,
        clock=now,
        elapsed=now - loop.start_time,
        jobs=loop.dispatcher.last_job_id(),
        best=loop.stopper.best,
        since_best=loop.stopper.since_best,
        recent=tuple(loop.stopper.recent),
        abandoned_total=loop.abandoned_total,
        values=dict(loop.evaluation.values),
        last_values=(rnd, tuple(ids), tuple(vals)),
        nodes={n.node_id: NodeState.of(n) for n in loop.nodes.values()},
        history=tuple(loop.strategy.history),
        train_metrics={r: dict(m) for r, m in loop.result.train_metrics_clientapp.items()},
        evaluate_metrics={r: dict(m) for r, m in loop.result.evaluate_metrics_serverapp.items()},
        client_evaluate_metrics={
            r: dict(m) for r, m in loop.result.evaluate_metrics_clientapp.items()
        },
        averaged=0 if loop.average is None else loop.average.count,
    )
    entries = [buffer_entry(u, loop.start_time) for u in loop.buffer]
    average = None if loop.average is None else loop.average.arrays
    optimizer = getattr(loop.strategy, "server_optimizer", None)
    if optimizer is not None:  # before the state that names its round (see _restore_optimizer)
        moments = {
            f"{k}{i}": a for k, arrays in optimizer.state().items() for i, a in enumerate(arrays)
        }
        path = loop.store.directory / OPTIMIZER_FILE.format(loop.version)
        atomic_write(path, lambda h: np.savez(h, **moments))  # type: ignore[arg-type]
    loop.store.save_run(record, loop.keys, loop.global_arrays, state, entries, average)
    for old in loop.store.directory.glob("server-opt-*.npz"):
        if old.name != OPTIMIZER_FILE.format(loop.version):
            old.unlink(missing_ok=True)


def _restore_optimizer(loop: EventLoop, store: CheckpointStore) -> None:
    """Restore a server optimizer's moments saved with the checkpoint's round.

    The moments are written before the state that names their round, and older ones are
    removed after it: a kill in between leaves the previous round's moments beside the
    previous state. A checkpoint without them (written by a run without the optimizer)
    restarts the moments at zero, with a WARNING.
    """
    optimizer = getattr(loop.strategy, "server_optimizer", None)
    if optimizer is None:
        return
    path = store.directory / OPTIMIZER_FILE.format(loop.version)
    if not path.is_file():
        log(
            WARNING,
            "%s: no server optimizer moments in %s: they restart at zero",
            loop.name,
            store.directory,
        )
        optimizer.load({})
        return
    data = read_npz(path)
    state = {
        k: [data[f"{k}{i}"] for i in range(len(data)) if f"{k}{i}" in data] for k in ("m", "v", "t")
    }
    optimizer.load({k: v for k, v in state.items() if v})


def save_client_evaluations(loop: EventLoop) -> None:
    """Add the client-side evaluations that came in after the last checkpoint to it."""
    if loop.store is None:
        return
    metrics = {str(r): dict(m) for r, m in loop.result.evaluate_metrics_clientapp.items()}
    loop.store.update_state({"client_evaluate_metrics": metrics})


def _restore_buffer(loop: EventLoop, store: CheckpointStore) -> None:
    """Put the updates accepted but not aggregated before the kill back into the buffer."""
    saved = _saved_bases(loop, store) if loop.strategy.needs_bases else {}
    known = {loop.version, *saved} if loop.strategy.needs_bases else None
    restored = buffered_updates(store, loop.global_arrays, loop.start_time, known, loop.name)
    for update in restored:
        if update.base_version in saved:
            loop.versions[update.base_version] = saved[update.base_version]
        loop.buffer.append(update)
        loop.reported[update.node_id] = update.num_examples
        if update.node_id in loop.nodes:
            node = loop.nodes[update.node_id]
            node.last_base = max(node.last_base, update.base_version)


def conform_arrays(
    arrays: Sequence[npt.NDArray[Any]],
    model: Sequence[npt.NDArray[Any]],
    keys: Sequence[str],
    where: str,
    *,
    same_dtypes: bool = True,
) -> list[npt.NDArray[Any]]:
    """Return checkpointed ``arrays`` in the shapes of the served ``model``, or raise.

    A 1-element array of a 0-d model array is reshaped (checkpoints written before
    2026-12-03 stored 0-d arrays as 1-d). ``same_dtypes=False`` checks shapes only (the
    moving average is kept in float64).

    Parameters
    ----------
    arrays : Sequence[NDArray]
        The checkpoint's arrays, in the order of ``keys``.
    model : Sequence[NDArray]
        The served model's arrays (the reference shapes and dtypes).
    keys : Sequence[str]
        The arrays' names, for the message.
    where : str
        The checkpoint folder, for the message.
    same_dtypes : bool (default: True)
        Whether the dtypes must match too.

    Returns
    -------
    list of NDArray
        ``arrays``, 0-d where the model's are.

    Raises
    ------
    ConfigError
        An array whose shape or dtype differs from the model's (the message names it).
    InputError
        A float array that holds NaN or Inf (the message names it).
    """
    out = []
    for key, array, ref in zip(keys, arrays, model, strict=True):
        if array.shape != ref.shape and ref.ndim == 0 and array.size == 1:
            array = array.reshape(())
        if array.shape != ref.shape or (same_dtypes and array.dtype != ref.dtype):
            raise ConfigError(
                f"checkpoint in {where} holds a different model: array {key!r} is "
                f"{array.dtype}{list(array.shape)}, the model's is {ref.dtype}{list(ref.shape)}"
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            # every update of such a model is rejected as NaN: the run could only stall
            raise InputError(f"checkpoint in {where} is damaged: array {key!r} holds NaN or Inf")
        out.append(array)
    return out


def resume_from_checkpoint(loop: EventLoop, ids: list[int]) -> bool:
    """Continue from the checkpoint if asked to and there is one; return whether it did."""
    store = loop.store
    if store is None or not store.exists():
        return False
    if not loop.strategy.resume:
        kept = store.archive()
        log(INFO, "%s: a new run (resume is off): the old checkpoint moved to %s", loop.name, kept)
        return False
    state, ckpt = store.load_run(loop.keys)
    if state.strategy != checkpoint_name(loop):  # another strategy's run: not this one's
        kept = store.archive()
        log(
            WARNING,
            "%s: the checkpoint in %s was written by strategy %r, not %r: nothing to resume, "
            "this is a new run; the old checkpoint moved to %s (use a folder per experiment)",
            loop.name,
            store.directory,
            state.strategy,
            checkpoint_name(loop),
            kept,
        )
        return False
    arrays = conform_arrays(ckpt.arrays, loop.global_arrays, loop.keys, str(store.directory))
    budget = loop.stopper.num_rounds
    finished = store.finished()
    stopped_early = finished is not None and finished.get("num_rounds", 0) >= budget
    if state.version >= budget or stopped_early:
        kept = store.archive()
        log(
            WARNING,
            "%s: the checkpoint in %s holds a finished run (%d aggregations, %s): nothing to "
            "resume, this is a new run; the old checkpoint moved to %s (raise num_rounds to "
            "continue a finished run)",
            loop.name,
            store.directory,
            state.version,
            "round budget" if finished is None else finished.get("reason", "stopped"),
            kept,
        )
        return False
    (store.directory / FINISHED_FILE).unlink(missing_ok=True)  # it goes on: not finished
    loop.version = state.version
    loop.global_arrays = list(arrays)
    loop.global_record = to_record(loop.keys, loop.global_arrays)
    loop.versions = {loop.version: loop.global_arrays}
    if loop.average is not None and ckpt.average is not None and state.averaged > 0:
        average = conform_arrays(
            ckpt.average, arrays, loop.keys, str(store.directory), same_dtypes=False
        )
        loop.average.restore(average, state.averaged)
        loop.served = loop.average.served(loop.global_arrays)
    _restore_optimizer(loop, store)
    loop.clock.advance_to(state.clock)
    loop.start_time = loop.clock.now() - state.elapsed  # wall clocks restart
    loop.dispatcher.resume_after(state.jobs)
    loop.stopper.restore(state.best, state.since_best, state.recent)
    loop.abandoned_total = state.abandoned_total
    loop.evaluation.values = dict(state.values)
    rnd, vids, vals = state.last_values
    loop.evaluation.last_values = (rnd, list(vids), list(vals))
    loop.strategy.history[:] = list(state.history)
    loop.result.train_metrics_clientapp = {
        r: MetricRecord(dict(m)) for r, m in state.train_metrics.items()
    }
    loop.result.evaluate_metrics_serverapp = {
        r: MetricRecord(dict(m)) for r, m in state.evaluate_metrics.items()
    }
    loop.result.evaluate_metrics_clientapp = {
        r: MetricRecord(dict(m)) for r, m in state.client_evaluate_metrics.items()
    }
    if set(ids) <= set(state.nodes):
        for i in ids:
            state.nodes[i].apply_to(loop.nodes[i])
    else:
        log(INFO, "%s: the nodes changed since the checkpoint: profiling again", loop.name)
        loop.planner.begin(ids, loop.nodes)
    metrics = loop.result.train_metrics_clientapp
    loop.abandon.resume(metrics, loop.nodes.values(), loop.evaluation)
    _restore_buffer(loop, store)
    log(
        INFO,
        "%s: resumed from %s at round %d (t=%.3f s since the run's first start); job ids from %d",
        loop.name,
        store.directory,
        loop.version,
        state.elapsed,
        loop.dispatcher.last_job_id() + 1,
    )
    return True
