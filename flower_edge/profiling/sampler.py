"""Background utilisation sampling of one resource while a workload runs.

A :class:`UtilizationSampler` runs a daemon thread that reads a :class:`Counter` every
``interval`` seconds; the utilisation ``U`` of the workload is the time-weighted mean of the
per-interval readings, each clipped to ``[0, 1]``. Cumulative counters make the mean exact
whatever the interval: the last reading is taken by :meth:`UtilizationSampler.stop`.

What each counter means, and its limits
---------------------------------------
:class:`CpuCounter` (cpu)
    ``psutil.cpu_times()`` summed over all logical cores: busy = everything except ``idle``
    and ``iowait``; ``U = d(busy) / d(total)``. It is system-wide, so work of other processes
    counts too: on a loaded host ``U`` is near 1 even when the workload got only part of the
    cores, and the workload's slower ``E`` carries the contention. Steal time of a VM counts
    as busy. Resolution is the kernel's tick (10 ms on most Linux builds).
:class:`MemoryCounter` (memory)
    psutil has no memory-bandwidth counter. The workload publishes the bytes it moves
    (:meth:`MemoryCounter.add`); ``U = achieved bandwidth / reference bandwidth``, the
    reference being the best contiguous copy rate of a buffer well beyond the last-level cache,
    measured just before (see :func:`~flower_edge.profiling.workloads.peak_copy_bandwidth`). It
    is a proxy: the share of the node's demonstrated streaming bandwidth the workload sustains,
    not a hardware counter (no DRAM controller statistics are read).
:class:`DiskCounter` (disk)
    ``psutil.disk_io_counters(perdisk=True)``: ``busy_time`` (Linux, FreeBSD) is the time in ms
    during which the device had I/O in flight (iostat's ``%util``); the most busy device in
    the interval is taken, so partitions are not counted twice. Like the cpu counter it is
    device-wide: other processes' I/O counts too. For devices that can serve
    requests in parallel (SSD, NVMe, network disks) 100 % busy is not saturation; the counter
    has millisecond resolution. Where ``busy_time`` is missing (macOS, Windows), there are no
    counters (some containers), or no device was busy during the interval (a folder on tmpfs,
    overlay or network file systems, whose I/O no block device sees), the fallback is the share
    of wall time the workload's process spent off-CPU, ``1 - d(process cpu time) / d(wall)``,
    i.e. waiting for I/O.
:class:`~.window.NvmlWindow` (gpu, not a sampler counter)
    NVML's reading is not cumulative: each is the share of the driver's last sample period
    (1/6 s to 1 s depending on the product) during which a kernel ran, so readings taken by a
    background thread at the start of a run describe the time before it. The gpu workloads
    therefore read NVML's timestamped samples over their timed window instead (see
    :mod:`flower_edge.profiling.window`).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Protocol

import psutil

from flower_edge import validate

__all__ = [
    "CpuCounter",
    "Counter",
    "DiskCounter",
    "MemoryCounter",
    "UtilizationSampler",
]


def _clip(value: float) -> float:
    if not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, value))


class Counter(Protocol):
    """A utilisation source: ``reset()`` starts an interval, ``read()`` closes it."""

    def reset(self) -> None:
        """Start a new interval now."""
        ...

    def read(self) -> float:
        """Return the utilisation since the last ``reset``/``read`` (any float) and restart."""
        ...


class CpuCounter:
    """System-wide CPU utilisation over all logical cores from ``psutil.cpu_times()``."""

    def __init__(self) -> None:
        self._busy, self._total = self._now()

    @staticmethod
    def _now() -> tuple[float, float]:
        times = psutil.cpu_times()
        # Linux counts guest time inside user and nice already (as psutil.cpu_percent does)
        total = float(sum(times)) - float(getattr(times, "guest", 0.0))
        total -= float(getattr(times, "guest_nice", 0.0))
        idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
        return total - idle, total

    def reset(self) -> None:
        """Start a new interval now."""
        self._busy, self._total = self._now()

    def read(self) -> float:
        """Return the busy share of all cores since the last reading."""
        busy, total = self._now()
        d_busy, d_total = busy - self._busy, total - self._total
        self._busy, self._total = busy, total
        return d_busy / d_total if d_total > 0 else 0.0


class MemoryCounter:
    """Bandwidth proxy: bytes moved by the workload over ``reference_bandwidth * seconds``.

    Parameters
    ----------
    reference_bandwidth : float
        Bytes per second counted as full utilisation, ``> 0``.
    """

    def __init__(self, reference_bandwidth: float) -> None:
        self.reference_bandwidth = validate.number(
            "reference_bandwidth", reference_bandwidth, low=0.0, low_inclusive=False
        )
        self._lock = threading.Lock()
        self._moved = 0
        self._seen = 0
        self._start = time.perf_counter()

    def add(self, nbytes: int) -> None:
        """Record ``nbytes`` moved (read plus written) by the workload."""
        with self._lock:
            self._moved += nbytes

    def reset(self) -> None:
        """Start a new interval now."""
        with self._lock:
            self._seen = self._moved
        self._start = time.perf_counter()

    def read(self) -> float:
        """Return achieved over reference bandwidth since the last reading."""
        now = time.perf_counter()
        with self._lock:
            moved, self._seen = self._moved - self._seen, self._moved
        seconds, self._start = now - self._start, now
        return moved / (seconds * self.reference_bandwidth) if seconds > 0 else 0.0


class DiskCounter:
    """Disk busy-time share of the busiest device, with an off-CPU fallback."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._state = self._now()

    def _now(self) -> tuple[float, dict[str, float] | None, float]:
        wall = time.perf_counter()
        busy: dict[str, float] | None = None
        try:
            counters: Any = psutil.disk_io_counters(perdisk=True)
        except (OSError, RuntimeError):  # pragma: no cover - platform dependent
            counters = None
        if counters:
            values = {
                name: float(c.busy_time) / 1000.0
                for name, c in counters.items()
                if hasattr(c, "busy_time")
            }
            busy = values or None
        cpu = self._process.cpu_times()
        return wall, busy, float(cpu.user + cpu.system)

    @property
    def has_busy_time(self) -> bool:
        """Whether the platform reports per-device busy time."""
        return self._state[1] is not None

    def reset(self) -> None:
        """Start a new interval now."""
        self._state = self._now()

    def read(self) -> float:
        """Return the busiest device's busy share (or the off-CPU share) since the last read."""
        wall, busy, cpu = self._now()
        wall0, busy0, cpu0 = self._state
        self._state = (wall, busy, cpu)
        d_wall = wall - wall0
        if d_wall <= 0:
            return 0.0
        if busy is not None and busy0 is not None:
            most = max((busy[k] - busy0[k] for k in busy.keys() & busy0.keys()), default=0.0)
            if most > 0:
                return most / d_wall
        return 1.0 - (cpu - cpu0) / d_wall


class UtilizationSampler:
    """Sample a :class:`Counter` on a daemon thread between :meth:`start` and :meth:`stop`.

    Parameters
    ----------
    counter : Counter
        The utilisation source.
    interval : float (default: 0.05)
        Seconds between readings, ``> 0``.

    Examples
    --------
    >>> with UtilizationSampler(CpuCounter(), interval=0.01) as sampler:
    ...     _ = sum(range(10_000))
    >>> 0.0 <= sampler.utilization <= 1.0
    True
    """

    def __init__(self, counter: Counter, interval: float = 0.05) -> None:
        self.counter = counter
        self.interval = validate.number("interval", interval, low=0.0, low_inclusive=False)
        self._readings: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0.0

    def _take(self) -> None:
        now = time.perf_counter()
        value = _clip(self.counter.read())
        self._readings.append((now - self._last, value))
        self._last = now

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._take()

    def start(self) -> UtilizationSampler:
        """Reset the counter and start sampling; return ``self``."""
        if self._thread is not None:
            raise RuntimeError("sampler already started")
        self._readings.clear()
        self._stop.clear()
        self.counter.reset()
        self._last = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, name="flower-edge-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop sampling, take the last reading, return the utilisation in ``[0, 1]``."""
        thread, self._thread = self._thread, None
        if thread is None:
            return self.utilization
        self._stop.set()
        thread.join(timeout=10.0)
        self._take()
        return self.utilization

    @property
    def readings(self) -> tuple[tuple[float, float], ...]:
        """Return ``(seconds, utilisation)`` of every interval so far."""
        return tuple(self._readings)

    @property
    def utilization(self) -> float:
        """Return the time-weighted mean utilisation in ``[0, 1]`` (0 before any reading)."""
        readings = list(self._readings)
        total = math.fsum(dt for dt, _ in readings)
        if total <= 0:
            return _clip(math.fsum(u for _, u in readings) / len(readings)) if readings else 0.0
        return _clip(math.fsum(dt * u for dt, u in readings) / total)

    def __enter__(self) -> UtilizationSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
