"""Reuse a device's resource profile across runs (opt-in).

The host's quick profile takes seconds, far more than a local epoch of a small model: within
one run the ClientApp already runs it once per node (cached in ``context.state``). A device
that takes part in many runs can also keep the report on disk. Without changing the app, give
the SuperNode a folder in its node config (rate the device there once, when it is enrolled)::

    flower-edge profile --quick --cache /var/lib/flower-edge/profile
    flower-supernode ... --node-config "profile-cache='/var/lib/flower-edge/profile'"

(``profile-max-age``, seconds, default one day, says how long a stored report is reused;
see :func:`node_probe`). Or choose the folder in the app::

    from clients.profile_cache import cached_host_probe

    app = build_client_app(task, probe_fn=cached_host_probe(max_age=6 * 3600))

The report is stored as JSON (``ProfileReport.to_json``), validated when read back
(``ProfileReport.from_json``), and written atomically; an unreadable, invalid or stale file is
ignored (logged) and the probe runs again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from logging import WARNING
from pathlib import Path

from flwr.app import Context
from flwr.common.logger import log

from flower_edge import validate, wire
from flower_edge.errors import ConfigError, InputError
from flower_edge.profiling.report import MODES, Mode, ProfileReport, ResourceProbe
from flower_edge.profiling.store import read_report, report_path, write_report

__all__ = ["DEFAULT_MAX_AGE", "CachedProbe", "cached_host_probe", "default_cache_dir", "node_probe"]

#: seconds a stored report is reused when the node config sets no ``profile-max-age``
DEFAULT_MAX_AGE = 86400.0


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
        self,
        probe: ResourceProbe,
        cache_dir: str | Path | None = None,
        max_age: float = DEFAULT_MAX_AGE,
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
        return report_path(self.cache_dir, mode)

    def _stored(self, mode: Mode) -> ProfileReport | None:
        try:
            return read_report(self.cache_dir, mode, self.max_age)
        except InputError as exc:
            log(WARNING, "ignoring %s: profiling again", exc)
            return None

    def profile(self, mode: Mode) -> ProfileReport:
        """Return the stored report when fresh, else run the probe and store its report."""
        validate.choice("mode", mode, MODES, error=InputError)
        report = self._stored(mode)
        if report is not None:
            return report
        report = self.probe.profile(mode)
        try:
            write_report(self.cache_dir, report)
        except OSError as exc:
            log(WARNING, "could not store the profile under %s (%s)", self.cache_dir, exc)
        return report


def cached_host_probe(
    cache_dir: str | Path | None = None, max_age: float = DEFAULT_MAX_AGE
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


def node_probe(ctx: Context) -> ResourceProbe:
    """Return the node's host probe, kept on disk when its node config says where.

    The default ``probe_fn`` of :func:`~clients.app.build_client_app`. With the node config key
    ``profile-cache`` (:data:`flower_edge.wire.PROFILE_CACHE`, a folder) the probe is a
    :class:`CachedProbe` over that folder, reusing a report for ``profile-max-age``
    (:data:`flower_edge.wire.PROFILE_MAX_AGE`) seconds, default :data:`DEFAULT_MAX_AGE`;
    without it, the host's probe measures on every first contact.

    Raises
    ------
    ConfigError
        When ``profile-cache`` is not a non-empty string or ``profile-max-age`` is not a
        number >= 0 (the message names the key).
    """
    from flower_edge.profiling import HostProbe

    folder = ctx.node_config.get(wire.PROFILE_CACHE)
    if folder is None:
        return HostProbe()
    if not isinstance(folder, str) or not folder.strip():
        raise ConfigError(
            f"node config {wire.PROFILE_CACHE!r} must be a folder (a non-empty string), "
            f"got {folder!r}"
        )
    max_age = validate.number(
        f"node config {wire.PROFILE_MAX_AGE!r}",
        ctx.node_config.get(wire.PROFILE_MAX_AGE, DEFAULT_MAX_AGE),
        low=0.0,
        finite=False,
    )
    return CachedProbe(HostProbe(), Path(folder).expanduser(), max_age)
