"""A device's profile kept on disk: one JSON report per mode, ``<folder>/profile-<mode>.json``.

A device's resources change rarely, so a deployment can rate each device once, when it is
enrolled, instead of in every run::

    flower-edge profile --quick --cache /var/lib/flower-edge/profile
    flower-supernode ... --node-config "profile-cache='/var/lib/flower-edge/profile'"

The flower-edge ClientApp then answers the server's profile request from the stored report
(``clients.profile_cache.CachedProbe``) while it is younger than ``profile-max-age`` seconds,
and measures (and stores) a new one when it is not. Reports are written atomically and
validated when read back (:meth:`ProfileReport.from_json`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from flower_edge import validate
from flower_edge.errors import InputError
from flower_edge.profiling.report import MODES, Mode, ProfileReport

__all__ = ["read_report", "report_path", "write_report"]


def report_path(folder: str | Path, mode: Mode) -> Path:
    """Return the file of the report in ``mode`` inside ``folder``."""
    validate.choice("mode", mode, MODES, error=InputError)
    return Path(folder) / f"profile-{mode}.json"


def write_report(folder: str | Path, report: ProfileReport) -> Path:
    """Store ``report`` atomically as ``<folder>/profile-<mode>.json``; return its path.

    Raises
    ------
    OSError
        When the folder cannot be created or written, or the report's name is taken by a
        folder; the temporary file is removed (it was left behind: found by a new-user probe).
    """
    path = report_path(folder, report.mode)
    path.parent.mkdir(parents=True, exist_ok=True)
    written: str | None = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, suffix=".json", delete=False, encoding="utf-8"
        ) as tmp:
            written = tmp.name
            tmp.write(report.to_json() + "\n")
        # a full disk fails as the file is closed (its buffer flushed), not in write()
        os.replace(written, path)
    except BaseException:
        if written is not None:
            Path(written).unlink(missing_ok=True)
        raise
    return path


def read_report(
    folder: str | Path, mode: Mode, max_age: float, now: float | None = None
) -> ProfileReport | None:
    """Return the stored report in ``mode`` if it exists and is at most ``max_age`` s old.

    Parameters
    ----------
    folder : str | Path
        Folder of the reports.
    mode : {"quick", "full"}
        The mode asked for.
    max_age : float
        Seconds a stored report stays valid, ``>= 0``.
    now : float | None (default: None)
        The current time (``time.time()`` when ``None``).

    Returns
    -------
    ProfileReport | None
        ``None`` when there is no report or it is stale (older than ``max_age``, or dated in
        the future).

    Raises
    ------
    InputError
        When the file is unreadable or not a valid report in ``mode`` (the message names the
        file and the field).
    """
    validate.number("max_age (seconds)", max_age, low=0.0, finite=False)
    path = report_path(folder, mode)
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
        if age > max_age or age < 0:
            return None
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InputError(f"stored profile {path}: {exc}") from None
    try:
        report = ProfileReport.from_json(text)
    except InputError as exc:
        raise InputError(f"stored profile {path}: {exc}") from None
    if report.mode != mode:
        raise InputError(f"stored profile {path}: 'mode' is {report.mode!r}, not {mode!r}")
    return report
