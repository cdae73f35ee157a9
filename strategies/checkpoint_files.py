"""Reading the files of a checkpoint folder: a damaged file is an error that names it.

A checkpoint folder can be damaged in ways its atomic writes do not rule out: a kill while
the audit was being appended (the one file written in place) leaves a cut last line, a full
disk or a copy gone wrong leaves a truncated ``.npz``, a user may point ``checkpoint_dir`` at
a folder of other files. Every reader here turns whatever numpy, ``zipfile`` or ``json``
raise on such a file into :class:`~flower_edge.errors.InputError` naming the file, so that a
resume fails with a message instead of a traceback from inside the library (or, for the
audit's cut last line, drops it: its round was never checkpointed, see
:func:`read_audit`).
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from logging import WARNING
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from flwr.common.logger import log

from flower_edge.errors import InputError

__all__ = ["UNREADABLE", "atomic_write", "read_audit", "read_buffer", "read_json", "read_npz"]

#: what reading a damaged or foreign file raises (numpy, zipfile, json, a wrong JSON type)
UNREADABLE: Final = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    EOFError,
    zipfile.BadZipFile,
)
#: the fields every audit line has, as integers
AUDIT_INTS: Final = ("round", "node", "job")


def atomic_write(path: Path, write: Any) -> None:
    """Write ``path`` through ``write(handle)`` atomically: a temporary file, fsync, rename."""
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


def read_json(path: Path) -> Any:
    """Return the JSON document in ``path``; raise InputError naming the file if unreadable."""
    try:
        return json.loads(path.read_text())
    except UNREADABLE as exc:
        raise InputError(f"{path.name} cannot be read: {type(exc).__name__}: {exc}") from None


def read_npz(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Return every array of the ``.npz`` file ``path`` by name (no pickles).

    Raises
    ------
    InputError
        The file is missing, truncated, not an ``.npz`` archive, or holds a pickled object;
        the message names the file.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.array(data[name]) for name in data.files}
    except UNREADABLE as exc:
        raise InputError(f"{path.name} cannot be read: {type(exc).__name__}: {exc}") from None


def _audit_entry(line: str) -> dict[str, Any] | None:
    """Return one audit line as a dict with integer round, node and job (``None``: damaged)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    for key in AUDIT_INTS:
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
    return entry


def read_audit(path: Path) -> list[dict[str, Any]]:
    """Return the lines of the audit file ``path`` (none if it does not exist).

    The audit is appended line by line after each aggregation, before the state that
    checkpoints it: a run killed during the append leaves a cut last line of a round that
    no checkpoint holds. That line is dropped with a WARNING (the resume drops that round's
    lines anyway). A damaged line before the last is an InputError naming the file and the
    line: the audit of checkpointed rounds cannot be trusted.
    """
    if not path.is_file():
        return []
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise InputError(f"{path.name} cannot be read: {type(exc).__name__}: {exc}") from None
    out = []
    for number, line in enumerate(lines, start=1):
        entry = _audit_entry(line)
        if entry is not None:
            out.append(entry)
        elif number == len(lines):
            log(
                WARNING,
                "%s: its last line is cut or damaged (a run killed while appending it): "
                "dropped, its round was not checkpointed (%r)",
                path,
                line[:80],
            )
        else:
            raise InputError(
                f"{path.name} line {number} is not an audit entry (an object with integer "
                f"{', '.join(AUDIT_INTS)}): {line[:80]!r}"
            )
    return out


def read_buffer(
    directory: Path, name: str, count: int, *, quiet: bool = False
) -> list[tuple[dict[str, Any], tuple[npt.NDArray[Any], ...]]]:
    """Return the entries of the buffer list ``directory / name`` with their ``count`` arrays.

    Each entry names its ``.npz`` file under ``"file"``. An unreadable list, entry or array
    file is left out with a WARNING naming it (``quiet``: without, for a second read of the
    same files): those updates are lost, the rest of the checkpoint still resumes.
    """
    path = directory / name
    if not path.is_file():
        return []
    try:
        entries = read_json(path)
        if not isinstance(entries, list):
            raise InputError(f"{name} holds a {type(entries).__name__}, not a list")
    except InputError as exc:
        if not quiet:
            log(WARNING, "checkpoint in %s: buffered updates lost: %s", directory, exc)
        return []
    out = []
    for entry in entries:
        try:
            data = read_npz(directory / str(entry["file"]))
            arrays = tuple(data[f"a{i}"] for i in range(count))
        except (InputError, *UNREADABLE) as exc:
            if not quiet:
                why = f"{type(exc).__name__}: {exc}"
                log(WARNING, "checkpoint in %s: buffered update %r lost: %s", directory, entry, why)
            continue
        out.append((entry, arrays))
    return out
