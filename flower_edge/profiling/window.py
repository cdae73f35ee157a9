"""Utilisation over one timed window: ``begin()`` before the timed runs, ``end()`` after.

The background :class:`~.sampler.UtilizationSampler` suits cumulative counters (CPU times,
bytes moved, disk busy time). NVML's GPU utilisation is not cumulative: each reading is the
share of the driver's last sample period (1/6 s to 1 s depending on the product) during which
a kernel ran, so a reading taken at the start of a short run describes the time *before* it
(the untimed warm-up, the host-side set-up) and one at its end may straddle it. Issue 12
measured 0 % for a GPU workload this way.

:class:`NvmlWindow` instead asks NVML for its timestamped samples
(``nvmlDeviceGetSamples(..., NVML_GPU_UTILIZATION_SAMPLES, ...)``; each sample's timestamp is
a CPU time in microseconds, read here against ``time.time()``) and averages those that cover
the window only (:func:`window_mean`). :class:`CounterWindow` adapts a cumulative
:class:`~.sampler.Counter` (reset at ``begin``, read at ``end``).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from logging import DEBUG, getLogger
from typing import Any, Final, Protocol

from flower_edge import validate
from flower_edge.profiling.sampler import Counter

__all__ = [
    "DEFAULT_NVML_PERIOD",
    "CounterWindow",
    "NvmlWindow",
    "UtilizationWindow",
    "sample_period",
    "window_mean",
]

logger = getLogger(__name__)

#: NVML sample period assumed when fewer than two samples show it (the shortest products')
DEFAULT_NVML_PERIOD: Final = 1.0 / 6.0
#: NVML_GPU_UTILIZATION_SAMPLES (nvml.h's nvmlSamplingType_t)
_GPU_UTILIZATION_SAMPLES: Final = 1
#: seconds of samples before the window asked for, to see the sample period
_LOOKBACK: Final = 2.0


class UtilizationWindow(Protocol):
    """Utilisation of one resource over the window between ``begin`` and ``end``."""

    def begin(self) -> None:
        """Open the window now."""
        ...

    def end(self) -> float | None:
        """Close the window; return its utilisation in ``[0, 1]``, ``None`` when unknown."""
        ...


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


def sample_period(timestamps: Sequence[float], default: float = DEFAULT_NVML_PERIOD) -> float:
    """Return the median spacing of increasing sample timestamps, ``default`` under two."""
    gaps = [b - a for a, b in zip(timestamps, timestamps[1:], strict=False) if b > a]
    return statistics.median(gaps) if gaps else default


def window_mean(
    samples: Sequence[tuple[float, float]], start: float, stop: float, period: float
) -> float | None:
    """Return the mean utilisation over ``[start, stop]`` from periodic samples.

    A sample ``(t, u)`` says the resource was busy a share ``u`` of ``(t - period, t]``. The
    samples whose period lies inside the window count with equal weight; when none does (a
    window shorter than two periods), each sample counts by the overlap of its period with the
    window. ``None`` when no sample overlaps the window.

    Parameters
    ----------
    samples : Sequence[tuple[float, float]]
        ``(timestamp in seconds, utilisation)`` pairs.
    start, stop : float
        The window, ``start <= stop``, on the samples' clock.
    period : float
        Seconds each sample covers, ``> 0``.
    """
    validate.number("period (seconds)", period, low=0.0, low_inclusive=False)
    inside = [u for t, u in samples if t - period >= start and t <= stop]
    if inside:
        return _clip(math.fsum(inside) / len(inside))
    weighted = [(min(t, stop) - max(t - period, start), u) for t, u in samples]
    weighted = [(w, u) for w, u in weighted if w > 0]
    total = math.fsum(w for w, _ in weighted)
    if total <= 0:
        return None
    return _clip(math.fsum(w * u for w, u in weighted) / total)


class CounterWindow:
    """A window over a cumulative :class:`~.sampler.Counter`: reset at begin, read at end.

    Parameters
    ----------
    counter : Counter
        The utilisation source (e.g. :class:`~.sampler.CpuCounter`).
    """

    def __init__(self, counter: Counter) -> None:
        self.counter = counter

    def begin(self) -> None:
        """Start the counter's interval now."""
        self.counter.reset()

    def end(self) -> float | None:
        """Return the counter's reading since :meth:`begin`, clipped to ``[0, 1]``."""
        return _clip(self.counter.read())


class NvmlWindow:
    """GPU utilisation over the window from NVML's timestamped samples.

    Parameters
    ----------
    handle : object
        An NVML device handle.
    nvml : Any (default: None)
        The NVML module (``pynvml``); ``None`` imports it. Tests pass a fake.
    clock : Callable[[], float] (default: time.time)
        Wall clock in seconds on the samples' time base (NVML stamps CPU time in us).

    Notes
    -----
    When NVML has no samples for the window (``nvmlDeviceGetSamples`` unsupported or failing),
    :meth:`end` falls back to the instantaneous reading
    (``nvmlDeviceGetUtilizationRates``), which covers the last sample period: the end of a
    window at least that long, partly the time before a shorter one.
    """

    def __init__(
        self, handle: object, nvml: Any = None, clock: Callable[[], float] = time.time
    ) -> None:
        if nvml is None:
            import pynvml

            nvml = pynvml
        self.handle = handle
        self.nvml = nvml
        self.clock = clock
        self._start: float | None = None
        self.last_source = "none"

    def begin(self) -> None:
        """Open the window now."""
        self._start = self.clock()

    def _samples(self, since: float) -> list[tuple[float, float]]:
        try:
            _, raw = self.nvml.nvmlDeviceGetSamples(
                self.handle, _GPU_UTILIZATION_SAMPLES, max(0, int(since * 1e6))
            )
        except Exception as exc:  # NVMLError: not supported, not found (no samples yet)
            logger.log(DEBUG, "nvmlDeviceGetSamples failed: %r", exc)
            return []
        out = [(float(s.timeStamp) / 1e6, float(s.sampleValue.uiVal) / 100.0) for s in raw]
        return sorted(out)

    def end(self) -> float | None:
        """Close the window; return the mean GPU utilisation over it (see the class notes)."""
        if self._start is None:
            raise RuntimeError("begin() before end()")
        start, stop = self._start, self.clock()
        self._start = None
        samples = self._samples(start - _LOOKBACK)
        if samples:
            period = sample_period([t for t, _ in samples])
            mean = window_mean(samples, start, stop, period)
            if mean is not None:
                self.last_source = "samples"
                return mean
        try:
            rates = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
        except Exception as exc:
            logger.log(DEBUG, "nvmlDeviceGetUtilizationRates failed: %r", exc)
            self.last_source = "none"
            return None
        self.last_source = "instant"
        return _clip(float(rates.gpu) / 100.0)
