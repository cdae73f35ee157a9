"""Checkpoints of the strategy loop: global arrays as ``.npz``, all state as JSON, no pickle.

Layout of a checkpoint folder:

``global-<round>.npz``
    The global model after aggregation ``round`` (arrays ``a0, a1, ...`` in model order;
    their names are in ``state.json``).
``state.json``
    Everything else (round, version, clock time, job counter, shares, time-model observations,
    values, history, Result metrics). Written last, atomically (temporary file, ``fsync``,
    ``os.replace``): a run killed mid-write leaves the previous checkpoint intact.
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
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from flower_edge.errors import InputError

__all__ = ["Checkpoint", "CheckpointStore"]

STATE_FILE = "state.json"
AUDIT_FILE = "audit.jsonl"
BUFFER_FILE = "buffer.json"


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
    """

    round: int
    keys: tuple[str, ...]
    arrays: tuple[npt.NDArray[Any], ...]
    state: dict[str, Any]


def _atomic_write(path: Path, write: Any) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
    ) -> None:
        """Write the checkpoint of aggregation ``round_`` atomically; drop older array files."""
        name = f"global-{round_:06d}.npz"
        payload = {f"a{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)}
        _atomic_write(self.directory / name, lambda h: np.savez(h, **payload))  # type: ignore[arg-type]
        full = dict(state, round=round_, arrays_file=name, keys=list(keys))
        text = json.dumps(full, sort_keys=True).encode()
        _atomic_write(self.directory / STATE_FILE, lambda h: h.write(text))
        for old in self.directory.glob("global-*.npz"):
            if old.name != name:
                old.unlink(missing_ok=True)

    def load(self) -> Checkpoint:
        """Load the latest checkpoint; raise InputError if it is missing or unreadable."""
        path = self.directory / STATE_FILE
        try:
            state = json.loads(path.read_text())
            keys = tuple(str(k) for k in state["keys"])
            with np.load(self.directory / state["arrays_file"], allow_pickle=False) as data:
                arrays = tuple(np.array(data[f"a{i}"]) for i in range(len(keys)))
            round_ = int(state["round"])
        except (OSError, ValueError, KeyError) as exc:
            raise InputError(f"checkpoint in {self.directory} cannot be read: {exc}") from None
        return Checkpoint(round_, keys, arrays, state)

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
            payload = {f"a{i}": np.ascontiguousarray(a) for i, a in enumerate(arrays)}
            path = self.directory / str(new["file"])
            _atomic_write(path, lambda h: np.savez(h, **payload))  # type: ignore[arg-type]
        text = json.dumps(list(entries), sort_keys=True).encode()
        _atomic_write(self.directory / BUFFER_FILE, lambda h: h.write(text))
        listed = {str(e["file"]) for e in entries}
        for old in self.directory.glob("update-*.npz"):
            if old.name not in listed:
                old.unlink(missing_ok=True)

    def buffered(self, count: int) -> list[tuple[dict[str, Any], tuple[npt.NDArray[Any], ...]]]:
        """Return the buffered entries with their ``count`` arrays (unreadable ones skipped)."""
        path = self.directory / BUFFER_FILE
        if not path.is_file():
            return []
        out = []
        for entry in json.loads(path.read_text()):
            try:
                with np.load(self.directory / str(entry["file"]), allow_pickle=False) as data:
                    arrays = tuple(np.array(data[f"a{i}"]) for i in range(count))
            except (OSError, ValueError, KeyError):
                continue
            out.append((entry, arrays))
        return out

    def append_audit(self, entries: Sequence[dict[str, Any]]) -> None:
        """Append audit lines (flushed and synced)."""
        with (self.directory / AUDIT_FILE).open("a") as handle:
            for entry in entries:
                handle.write(json.dumps(entry, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def audit(self) -> list[dict[str, Any]]:
        """Return every audit line."""
        path = self.directory / AUDIT_FILE
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def truncate_audit(self, last_round: int) -> None:
        """Drop audit lines of rounds after ``last_round`` (atomically)."""
        kept = [e for e in self.audit() if int(e["round"]) <= last_round]
        text = "".join(json.dumps(e, sort_keys=True) + "\n" for e in kept).encode()
        _atomic_write(self.directory / AUDIT_FILE, lambda h: h.write(text))
