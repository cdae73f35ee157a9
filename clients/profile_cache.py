"""Reuse a device's resource profile across runs (opt-in).

The host's quick profile takes seconds, far more than a local epoch of a small model: within
one run the ClientApp already runs it once per node (cached in ``context.state``). A device
that takes part in many runs can also keep the report on disk for a while::

    from clients.profile_cache import cached_host_probe

    app = build_client_app(task, probe_fn=cached_host_probe(max_age=6 * 3600))

The report is stored as JSON (``ProfileReport.to_json``), validated when read back
(``ProfileReport.from_json``), and written atomically; an unreadable, invalid or stale file is
ignored (logged) and the probe runs again.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from logging import WARNING
from pathlib import Path

from flwr.app import Context
from flwr.common.logger import log

from flower_edge import validate
from flower_edge.errors import InputError
from flower_edge.profiling.report import MODES, Mode, ProfileReport, ResourceProbe

__all__ = ["CachedProbe", "cached_host_probe", "default_cache_dir"]


def default_cache_dir() -> Path:
    """Return ``$FLOWER_EDGE_CACHE`` or ``~/.cache/flower-edge``."""
    root = os.environ.get("FLOWER_EDGE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "flower-edge"


class CachedProbe:
    """A resource probe whose reports are kept on disk for ``max_age`` seconds.

    Parameters
    ----------
    probe : ResourceProbe
        The probe that really measures (e.g. ``HostProbe()``).
    cache_dir : str | Path | None (default: None)
        Folder of the reports (``profile-<mode>.json``); ``None``: :func:`default_cache_dir`.
    max_age : float (default: 86400.0)
        Seconds a stored report stays valid, ``>= 0`` (0 never reuses one).
    """

    def __init__(
        self, probe: ResourceProbe, cache_dir: str | Path | None = None, max_age: float = 86400.0
    ) -> None:
        validate.number("max_age (seconds)", max_age, low=0.0, finite=False)
        self.probe = probe
        self.cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
        self.max_age = float(max_age)

    def __repr__(self) -> str:
        folder = str(self.cache_dir)
        return f"CachedProbe({self.probe!r}, cache_dir={folder!r}, max_age={self.max_age})"

    def path(self, mode: Mode) -> Path:
        """Return the file of the report in ``mode``."""
        return self.cache_dir / f"profile-{mode}.json"

    def _stored(self, mode: Mode) -> ProfileReport | None:
        path = self.path(mode)
        try:
            age = time.time() - path.stat().st_mtime
            if age > self.max_age or age < 0:
                return None
            report = ProfileReport.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, InputError) as exc:
            log(WARNING, "ignoring the stored profile %s (%s): profiling again", path, exc)
            return None
        if report.mode != mode:
            log(WARNING, "stored profile %s is in mode %s, not %s", path, report.mode, mode)
            return None
        return report

    def profile(self, mode: Mode) -> ProfileReport:
        """Return the stored report when fresh, else run the probe and store its report."""
        validate.choice("mode", mode, MODES, error=InputError)
        report = self._stored(mode)
        if report is not None:
            return report
        report = self.probe.profile(mode)
        path = self.path(mode)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, suffix=".json", delete=False, encoding="utf-8"
            ) as tmp:
                tmp.write(report.to_json())
            os.replace(tmp.name, path)
        except OSError as exc:
            log(WARNING, "could not store the profile under %s (%s)", path, exc)
        return report


def cached_host_probe(
    cache_dir: str | Path | None = None, max_age: float = 86400.0
) -> Callable[[Context], CachedProbe]:
    """Return a ``probe_fn`` for :func:`~clients.app.build_client_app`: the host probe, cached.

    Parameters
    ----------
    cache_dir : str | Path | None (default: None)
        See :class:`CachedProbe`.
    max_age : float (default: 86400.0)
        See :class:`CachedProbe`.
    """
    from flower_edge.profiling import HostProbe

    probe = CachedProbe(HostProbe(), cache_dir, max_age)

    def probe_fn(_: Context) -> CachedProbe:
        return probe

    return probe_fn
