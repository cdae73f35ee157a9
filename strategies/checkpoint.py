"""Checkpoints of the strategy loop: global arrays as ``.npz``, all state as JSON, no pickle.

Layout of a checkpoint folder:

``global-<round>.npz``
    The global model after aggregation ``round`` (arrays ``a0, a1, ...`` in model order;
    their names are in ``state.json``).
``state.json``
    Everything else, a :class:`RunState` (round, version, clock time, job counter, shares,
    time-model observations, values, history, Result metrics). Written last, atomically
    (temporary file, ``fsync``, ``os.replace``): a run killed mid-write leaves the previous
    checkpoint intact.
``buffer.json`` and ``update-<node>-<job>.npz``
    Updates accepted since the last aggregation (not yet aggregated), so that a run killed
    between two aggregations loses none of them. On resume, entries already in the audit are
    dropped (a run killed between the checkpoint and the buffer reset).
``audit.jsonl``
    One JSON line per aggregated update: ``round``, ``node``, ``job``, ``base_version``,
    ``weight``, ``staleness``, ``delay``. On resume, lines of rounds after the checkpoint
    (written by a run killed between the audit and the state write) are dropped, so no update
    is ever counted twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from flwr.common.logger import log

from flower_edge.aggregation import check_update
from flower_edge.errors import ConfigError, InputError
from strategies.checkpoint_files import (
    UNREADABLE,
    atomic_write,
    read_audit,
    read_buffer,
    read_json,
    read_npz,
)
from strategies.checkpoint_options import (
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_DIR_KEY,
    RESUME_ENV,
    RESUME_KEY,
    CheckpointOptions,
    checkpoint_options,
)
from strategies.membership import Node
from strategies.records import AggregationRecord, Update

__all__ = [
    "CHECKPOINT_DIR_ENV",
    "CHECKPOINT_DIR_KEY",
    "RESUME_ENV",
    "RESUME_KEY",
    "Checkpoint",
    "CheckpointOptions",
    "CheckpointStore",
    "NodeState",
    "RunState",
    "audit_entries",
    "buffer_entry",
    "buffered_updates",
    "checkpoint_options",
]

STATE_FILE = "state.json"
AUDIT_FILE = "audit.jsonl"
BUFFER_FILE = "buffer.json"
FINISHED_FILE = "finished.json"  # written when a run ends: a later start does not resume it
#: the files of one run's checkpoint (what :meth:`CheckpointStore.archive` moves aside)
RUN_FILES: Final = (
    STATE_FILE,
    AUDIT_FILE,
    BUFFER_FILE,
    FINISHED_FILE,
    "global-*.npz",
    "update-*.npz",
    "server-opt-*.npz",  # a server optimizer's moments (strategies.resume)
)


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint.

    Attributes
    ----------
    round : int
        The last aggregation it holds.
    keys : tuple[str, ...]
        Array names of the global model.
    arrays : tuple of numpy arrays
        The global model.
    state : dict
        The JSON state.
    average : tuple of numpy arrays, optional
        The served moving average of the global models, when the run keeps one.
    """

    round: int
    keys: tuple[str, ...]
    arrays: tuple[npt.NDArray[Any], ...]
    state: dict[str, Any]
    average: tuple[npt.NDArray[Any], ...] | None = None


def _c_order(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Return ``array`` C-ordered in its own shape (``np.ascontiguousarray`` made 0-d 1-d)."""
    return np.asarray(array, order="C")


class CheckpointStore:
    """Read and write the checkpoints of one run in ``directory`` (created if missing)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def exists(self) -> bool:
        """Return whether the folder holds a checkpoint."""
        return (self.directory / STATE_FILE).is_file()

    def save(
        self,
        round_: int,
        keys: Sequence[str],
        arrays: Sequence[npt.NDArray[Any]],
        state: dict[str, Any],
        average: Sequence[npt.NDArray[Any]] | None = None,
    ) -> None:
        """Write the checkpoint of aggregation ``round_`` atomically; drop older array files."""
        name = f"global-{round_:06d}.npz"
        payload = {f"a{i}": _c_order(a) for i, a in enumerate(arrays)}
        for i, a in enumerate(average or ()):
            payload[f"m{i}"] = _c_order(a)
        atomic_write(self.directory / name, lambda h: np.savez(h, **payload))  # type: ignore[arg-type]
        full = dict(state, round=round_, arrays_file=name, keys=list(keys))
        text = json.dumps(full, sort_keys=True).encode()
        atomic_write(self.directory / STATE_FILE, lambda h: h.write(text))
        for old in self.directory.glob("global-*.npz"):
            if old.name != name:
                old.unlink(missing_ok=True)

    def update_state(self, fields: Mapping[str, Any]) -> None:
        """Replace ``fields`` of the latest checkpoint's state (atomically; none: no-op)."""
        path = self.directory / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        text = json.dumps(dict(state, **fields), sort_keys=True).encode()
        atomic_write(path, lambda h: h.write(text))

    def load(self) -> Checkpoint:
        """Load the latest checkpoint; raise InputError naming the damaged file, if one is."""
        try:
            state = read_json(self.directory / STATE_FILE)
            keys = tuple(str(k) for k in state["keys"])
            data = read_npz(self.directory / str(state["arrays_file"]))
            if missing := [f"a{i}" for i in range(len(keys)) if f"a{i}" not in data][:3]:
                raise InputError(f"{state['arrays_file']} lacks the arrays {missing} of the model")
            arrays = tuple(data[f"a{i}"] for i in range(len(keys)))
            average = tuple(data[f"m{i}"] for i in range(len(keys))) if "m0" in data else None
            round_ = int(state["round"])
        except InputError as exc:
            raise InputError(f"checkpoint in {self.directory} cannot be read: {exc}") from None
        except UNREADABLE as exc:  # a state of another shape: not a dict, a key missing
            raise InputError(
                f"checkpoint in {self.directory} cannot be read: {STATE_FILE} is malformed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return Checkpoint(round_, keys, arrays, state, average)

    def save_buffered(
        self,
        entries: Sequence[dict[str, Any]],
        new: dict[str, Any] | None = None,
        arrays: Sequence[npt.NDArray[Any]] | None = None,
    ) -> None:
        """Write the arrays of the ``new`` entry (if any), then the whole buffer list.

        Each entry names its array file under ``"file"``; files no longer listed are removed.
        """
        if new is not None and arrays is not None:
            payload = {f"a{i}": _c_order(a) for i, a in enumerate(arrays)}
            path = self.directory / str(new["file"])
            atomic_write(path, lambda h: np.savez(h, **payload))  # type: ignore[arg-type]
        text = json.dumps(list(entries), sort_keys=True).encode()
        atomic_write(self.directory / BUFFER_FILE, lambda h: h.write(text))
        listed = {str(e["file"]) for e in entries}
        for old in self.directory.glob("update-*.npz"):
            if old.name not in listed:
                old.unlink(missing_ok=True)

    def buffered(
        self, count: int, *, quiet: bool = False
    ) -> list[tuple[dict[str, Any], tuple[npt.NDArray[Any], ...]]]:
        """Return the buffered entries with their ``count`` arrays (see :func:`read_buffer`)."""
        return read_buffer(self.directory, BUFFER_FILE, count, quiet=quiet)

    def append_audit(self, entries: Sequence[dict[str, Any]]) -> None:
        """Append audit lines (flushed and synced)."""
        with (self.directory / AUDIT_FILE).open("a") as handle:
            for entry in entries:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def audit(self) -> list[dict[str, Any]]:
        """Return every audit line (a cut last line dropped, see :func:`read_audit`)."""
        return read_audit(self.directory / AUDIT_FILE)

    def save_run(
        self,
        record: AggregationRecord,
        keys: Sequence[str],
        arrays: Sequence[npt.NDArray[Any]],
        state: RunState,
        buffered: Sequence[dict[str, Any]],
        average: Sequence[npt.NDArray[Any]] | None = None,
    ) -> None:
        """Checkpoint aggregation ``record``: audit lines, then arrays and state, then buffer."""
        self.append_audit(audit_entries(record))
        self.save(record.round, keys, arrays, state.to_json(), average)
        self.save_buffered(buffered)

    def load_run(self, keys: Sequence[str]) -> tuple[RunState, Checkpoint]:
        """Load the run state and the checkpoint's arrays; drop audit lines after it.

        Raises
        ------
        ConfigError
            The checkpoint holds a model with other array names.
        """
        ckpt = self.load()
        if ckpt.keys != tuple(keys):
            raise ConfigError(
                f"checkpoint in {self.directory} holds a different model "
                f"({len(ckpt.keys)} arrays named {list(ckpt.keys)[:3]}...)"
            )
        state = RunState.from_json(ckpt.state)
        self.truncate_audit(ckpt.round)
        return state, ckpt

    def mark_finished(self, version: int, reason: str, num_rounds: int) -> None:
        """Record that the run ended at ``version`` (``reason``, under ``num_rounds``)."""
        entry = {"version": version, "reason": reason, "num_rounds": num_rounds}
        text = json.dumps(entry, sort_keys=True).encode()
        atomic_write(self.directory / FINISHED_FILE, lambda h: h.write(text))

    def finished(self) -> dict[str, Any] | None:
        """Return the finish record of the run in the folder (``None``: not finished)."""
        path = self.directory / FINISHED_FILE
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or not isinstance(entry.get("num_rounds"), int):
            return None
        return entry

    def archive(self) -> Path:
        """Move the run's checkpoint files into a new ``previous-<UTC time>`` subfolder.

        A new run then starts in an empty folder (its audit is not mixed with the old one's),
        and nothing of the old run is lost. Returns the subfolder.
        """
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = self.directory / f"previous-{stamp}"
        suffix = 1
        while target.exists():
            suffix += 1
            target = self.directory / f"previous-{stamp}-{suffix}"
        target.mkdir(parents=True)
        for pattern in RUN_FILES:
            for path in self.directory.glob(pattern):
                os.replace(path, target / path.name)
        return target

    def truncate_audit(self, last_round: int) -> None:
        """Drop audit lines of rounds after ``last_round`` (atomically)."""
        kept = [e for e in self.audit() if int(e["round"]) <= last_round]
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in kept).encode()
        atomic_write(self.directory / AUDIT_FILE, lambda h: h.write(text))


def open_store(directory: Path) -> CheckpointStore:
    """Return the store of ``checkpoint_dir``; raise ConfigError naming it if it is unusable."""
    try:
        store = CheckpointStore(directory)
        probe = store.directory / ".flower-edge-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"checkpoint_dir {str(directory)!r} cannot be created or written: {exc.strerror or exc}"
        ) from exc
    return store


Metrics = Mapping[int, Mapping[str, Any]]


@dataclass(frozen=True)
class NodeState:
    """What a checkpoint keeps of a node: its share plan and its time-model observations."""

    share: int
    ratio: float
    profiled: bool
    observations: tuple[tuple[float, float], ...]
    planned_out: bool = False

    @classmethod
    def of(cls, node: Node) -> NodeState:
        """Return the state of ``node``."""
        return cls(
            node.share, node.ratio, node.profiled, tuple(node.observations), node.planned_out
        )

    def apply_to(self, node: Node) -> None:
        """Restore this state into ``node``."""
        node.share = self.share
        node.ratio = self.ratio
        node.profiled = self.profiled
        node.observations = list(self.observations)
        node.planned_out = self.planned_out


@dataclass(frozen=True)
class RunState:
    """The state of a run after an aggregation, as ``state.json`` holds it.

    Attributes
    ----------
    strategy : str
        Strategy name.
    version : int
        Global version (aggregations so far).
    clock, elapsed : float
        Clock time at the checkpoint and seconds since the run's start.
    jobs : int
        Last job id handed out.
    best : float, optional
        Best test metric so far (plateau rule).
    since_best : int
        Aggregations since it improved.
    recent : tuple[float, ...]
        The test metrics of the plateau window (``StopConfig.window_passes``), oldest first.
    averaged : int
        Global models in the served moving average (0: none; its arrays are saved beside
        the global model's, as ``m0``, ``m1``, ...).
    abandoned_total : int
        Abandoned jobs so far.
    values : Mapping[int, float]
        Latest value per node.
    last_values : tuple[int, tuple[int, ...], tuple[float, ...]]
        Round, node ids and values of the last aggregation (sent to the clients).
    nodes : Mapping[int, NodeState]
        Per node.
    history : tuple[AggregationRecord, ...]
        Every aggregation so far.
    train_metrics, evaluate_metrics : Mapping[int, Mapping[str, Any]]
        The Result's ``train_metrics_clientapp`` / ``evaluate_metrics_serverapp``.
    client_evaluate_metrics : Mapping[int, Mapping[str, Any]]
        The Result's ``evaluate_metrics_clientapp`` (client-side evaluation; empty in
        checkpoints written before 2026-12-01 19:00 UTC).
    """

    strategy: str
    version: int
    clock: float
    elapsed: float
    jobs: int
    best: float | None
    since_best: int
    abandoned_total: int
    values: Mapping[int, float]
    last_values: tuple[int, tuple[int, ...], tuple[float, ...]]
    nodes: Mapping[int, NodeState]
    history: tuple[AggregationRecord, ...]
    train_metrics: Metrics
    evaluate_metrics: Metrics
    recent: tuple[float, ...] = ()
    averaged: int = 0
    client_evaluate_metrics: Metrics = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Return the JSON-ready dict written to ``state.json``."""
        rnd, ids, vals = self.last_values
        return {
            "strategy": self.strategy,
            "version": self.version,
            "clock": self.clock,
            "elapsed": self.elapsed,
            "jobs": self.jobs,
            "best": self.best,
            "since_best": self.since_best,
            "recent": list(self.recent),
            "averaged": self.averaged,
            "abandoned_total": self.abandoned_total,
            "values": {str(k): v for k, v in self.values.items()},
            "last_values": [rnd, list(ids), list(vals)],
            "nodes": {
                str(k): {
                    "share": n.share,
                    "ratio": n.ratio,
                    "profiled": n.profiled,
                    "observations": [list(o) for o in n.observations],
                    "planned_out": n.planned_out,
                }
                for k, n in self.nodes.items()
            },
            "history": [h.to_json() for h in self.history],
            "train_metrics": {str(r): dict(m) for r, m in self.train_metrics.items()},
            "evaluate_metrics": {str(r): dict(m) for r, m in self.evaluate_metrics.items()},
            "client_evaluate_metrics": {
                str(r): dict(m) for r, m in self.client_evaluate_metrics.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunState:
        """Rebuild the state from :meth:`to_json`'s output; raise InputError if malformed."""
        try:
            rnd, ids, vals = data["last_values"]
            best = data["best"]
            return cls(
                strategy=str(data["strategy"]),
                version=int(data["version"]),
                clock=float(data["clock"]),
                elapsed=float(data["elapsed"]),
                jobs=int(data["jobs"]),
                best=None if best is None else float(best),
                since_best=int(data["since_best"]),
                recent=tuple(float(m) for m in data.get("recent", ())),  # absent before 12-01
                averaged=int(data.get("averaged", 0)),
                abandoned_total=int(data["abandoned_total"]),
                values={int(k): float(v) for k, v in data["values"].items()},
                last_values=(int(rnd), tuple(int(i) for i in ids), tuple(float(v) for v in vals)),
                nodes={
                    int(k): NodeState(
                        share=int(n["share"]),
                        ratio=float(n["ratio"]),
                        profiled=bool(n["profiled"]),
                        observations=tuple((float(f), float(t)) for f, t in n["observations"]),
                        planned_out=bool(n.get("planned_out", False)),  # absent before 12-02
                    )
                    for k, n in data["nodes"].items()
                },
                history=tuple(AggregationRecord.from_json(h) for h in data["history"]),
                train_metrics={int(r): dict(m) for r, m in data["train_metrics"].items()},
                evaluate_metrics={int(r): dict(m) for r, m in data["evaluate_metrics"].items()},
                client_evaluate_metrics={
                    int(r): dict(m) for r, m in data.get("client_evaluate_metrics", {}).items()
                },
            )
        except (AttributeError, KeyError, OverflowError, TypeError, ValueError) as exc:
            raise InputError(
                f"checkpoint state is malformed: {type(exc).__name__}: {exc}"
            ) from None


def audit_entries(record: AggregationRecord) -> list[dict[str, Any]]:
    """Return the audit lines of one aggregation (one per aggregated update)."""
    return [
        {
            "round": record.round,
            "node": node,
            "job": job,
            "base_version": base,
            "weight": weight,
            "staleness": stale,
            "delay": delay,
        }
        for node, job, base, weight, stale, delay in zip(
            record.participants,
            record.job_ids,
            record.base_versions,
            record.weights,
            record.staleness,
            record.delays,
            strict=True,
        )
    ]


def buffer_entry(update: Update, start_time: float) -> dict[str, Any]:
    """Return the ``buffer.json`` entry of a buffered update (times relative to the start)."""
    return {
        "node": update.node_id,
        "job": update.job_id,
        "base_version": update.base_version,
        "num_examples": update.num_examples,
        "share": update.share,
        "delay": update.delay,
        "received": update.received_at - start_time,
        "late": update.late,
        "train_loss": update.train_loss,
        "app_metrics": dict(update.app_metrics),
        "file": f"update-{update.node_id}-{update.job_id}.npz",
    }


def _app_metric(value: Any) -> float | tuple[float, ...]:
    """Return an app metric read back from ``buffer.json`` (a JSON list is a list metric)."""
    return tuple(float(v) for v in value) if isinstance(value, list) else float(value)


def _buffered_update(
    entry: dict[str, Any], arrays: tuple[npt.NDArray[Any], ...], start_time: float
) -> Update:
    """Return the :class:`Update` of a ``buffer.json`` entry (raises if it is malformed)."""
    loss = entry.get("train_loss")
    extra = entry.get("app_metrics")
    extra_items = extra.items() if isinstance(extra, dict) else ()
    return Update(
        node_id=int(entry["node"]),
        job_id=int(entry["job"]),
        base_version=int(entry["base_version"]),
        arrays=arrays,
        num_examples=int(entry["num_examples"]),
        share=int(entry["share"]),
        delay=float(entry["delay"]),
        received_at=float(entry["received"]) + start_time,
        late=bool(entry["late"]),
        train_loss=None if loss is None else float(loss),
        app_metrics=tuple(sorted((str(k), _app_metric(v)) for k, v in extra_items)),
    )


def buffered_updates(
    store: CheckpointStore,
    global_arrays: Sequence[npt.NDArray[Any]],
    start_time: float,
    required_base: Collection[int] | None,
    name: str,
) -> list[Update]:
    """Return the buffered updates of ``store`` that can go back into the buffer.

    Updates already in the audit (aggregated before the kill), unreadable ones, ones that do
    not fit ``global_arrays``, and, when ``required_base`` is set (strategies that aggregate
    deltas: the base versions whose models are known), ones with another base version are
    left out.
    """
    counted = {(int(e["node"]), int(e["job"])) for e in store.audit()}
    out = []
    for entry, arrays in store.buffered(len(global_arrays)):
        try:
            update = _buffered_update(entry, arrays, start_time)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            why = f"{BUFFER_FILE} entry is malformed: {type(exc).__name__}: {exc}"
            log(WARNING, "%s: buffered update %r lost: %s", name, entry, why)
            continue
        if (update.node_id, update.job_id) in counted:
            continue  # aggregated before the kill: in the audit already
        base = update.base_version
        if required_base is not None and base not in required_base:
            log(
                WARNING,
                "%s: buffered update of node %s dropped: its base version %d "
                "is not in the checkpoint",
                name,
                update.node_id,
                base,
            )
            continue
        problem = check_update(list(arrays), list(global_arrays))
        if problem is not None:
            log(WARNING, "%s: buffered update of node %s lost: %s", name, update.node_id, problem)
            continue
        out.append(update)
    if out:
        log(INFO, "%s: %d accepted updates restored into the buffer", name, len(out))
    return out
