"""Virtual edge devices: a seeded, heterogeneous population and its virtual-time model.

Every virtual client of a simulation shares one host, so its wall-clock timings say nothing
about the edge device it stands for. Each node is therefore given a :class:`VirtualDevice`
drawn from a seeded population (:func:`make_population`), and the client asks that device
how long its work takes in *virtual* seconds (the :class:`flower_edge.timing.DeviceTimer`
protocol). The server orders events by those durations, so a run's history depends on the
seed only, never on the host's speed or load.

Cost model (FedScale-style: compute time per sample plus bytes over bandwidth)
-----------------------------------------------------------------------------
A training job's cost per sample comes from the model's operator profile
(:class:`JobCost`, built from ``flower_edge.operators``): the compute-intensive operators'
FLOPs run at the device's FLOP rate (its GPU's when it has one), the memory-intensive
operators' bytes move at its memory bandwidth, and the sample itself is read from storage
at its disk bandwidth (roofline-style: each operator is bound by one resource)::

    per_sample = compute_flops / flops + memory_bytes / memory_bw + sample_bytes / disk_bw

A slice of ``n`` samples that downloads ``d`` and uploads ``u`` bytes lasts::

    d / net_bw  +  n * per_sample * noise  +  u / net_bw      (online seconds)

``noise`` is log-normal with median 1, drawn from ``(seed, node, start)``: the same call
gives the same answer whatever the order of calls or the process that makes it.

Availability: a fraction of devices is *flaky*: it alternates online stretches
(exponential, mean ``mean_online``) and offline stretches (exponential, mean
``mean_offline``), drawn in order from ``(seed, node)``. Work pauses while a device is
offline and resumes when it is back, so offline stretches lengthen the slices that cross
them. The other devices are always online.

Heterogeneity: log compute speeds are drawn from a log-normal or Pareto law and stretched so
that the fastest device is exactly ``compute_spread`` times faster than the slowest
(default 30x). Memory, disk and network bandwidths are correlated with compute speed
(cheap devices tend to be slow at everything) with independent log-normal jitter.
"""

from __future__ import annotations

import bisect
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from flower_edge import validate
from flower_edge.errors import InputError

__all__ = [
    "DISTRIBUTIONS",
    "Distribution",
    "DeviceSpec",
    "JobCost",
    "PopulationConfig",
    "VirtualDevice",
    "make_population",
]

Distribution = Literal["lognormal", "pareto"]
DISTRIBUTIONS: tuple[str, ...] = get_args(Distribution)

#: stream tags mixed into the seed so that the random streams do not overlap
_POPULATION_STREAM = 0
_AVAILABILITY_STREAM = 1
_NOISE_STREAM = 2
_PROBE_STREAM = 3


@dataclass(frozen=True)
class JobCost:
    """Cost of training one sample, and the size of one model transfer.

    Parameters
    ----------
    compute_flops : float
        FLOPs of the compute-intensive operators per training sample (forward and backward).
    memory_bytes : float
        Bytes moved by the memory-access-intensive operators per training sample.
    sample_bytes : float (default: 0.0)
        Bytes of one sample read from storage.
    model_bytes : int (default: 0)
        Bytes of the model's arrays: the size of one download or upload.
    """

    compute_flops: float
    memory_bytes: float
    sample_bytes: float = 0.0
    model_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("compute_flops", "memory_bytes", "sample_bytes"):
            validate.number(f"JobCost.{name}", getattr(self, name), low=0.0, error=InputError)
        validate.integer("JobCost.model_bytes", self.model_bytes, low=0, error=InputError)
        if self.compute_flops == 0 and self.memory_bytes == 0 and self.sample_bytes == 0:
            raise InputError("JobCost must have a positive compute, memory or sample cost")


@dataclass(frozen=True)
class DeviceSpec:
    """Resources of one virtual device.

    Parameters
    ----------
    node : int
        Index of the device in its population (the Flower partition id).
    cpu_flops : float
        Sustained CPU throughput on training kernels, FLOP/s.
    gpu_flops : float
        Sustained GPU throughput, FLOP/s; 0 when the device has no GPU.
    memory_bandwidth : float
        Memory bandwidth, bytes/s.
    disk_bandwidth : float
        Storage read/write bandwidth, bytes/s.
    network_bandwidth : float
        Network bandwidth to the server, bytes/s (same both ways).
    mean_online : float
        Mean online stretch, seconds; ``math.inf`` for an always-online device.
    mean_offline : float
        Mean offline stretch, seconds; 0 for an always-online device.
    """

    node: int
    cpu_flops: float
    gpu_flops: float
    memory_bandwidth: float
    disk_bandwidth: float
    network_bandwidth: float
    mean_online: float = math.inf
    mean_offline: float = 0.0

    @property
    def has_gpu(self) -> bool:
        """Whether the device has a GPU."""
        return self.gpu_flops > 0

    @property
    def flaky(self) -> bool:
        """Whether the device goes offline for stretches."""
        return math.isfinite(self.mean_online) and self.mean_offline > 0

    @property
    def flops(self) -> float:
        """FLOP rate that training runs at: the GPU's when there is one, else the CPU's."""
        return self.gpu_flops if self.has_gpu else self.cpu_flops


@dataclass(frozen=True)
class PopulationConfig:
    """How a heterogeneous device population is drawn.

    Parameters
    ----------
    num_devices : int
        Number of devices (>= 1).
    seed : int (default: 0)
        Seed of every random draw (>= 0).
    distribution : {"lognormal", "pareto"} (default: "lognormal")
        Law of the log compute speeds before stretching.
    compute_spread : float (default: 30.0)
        Fastest over slowest CPU FLOP rate (>= 1); the heterogeneity knob.
    median_flops : float (default: 2e7)
        Median CPU FLOP rate. The default stands for small edge devices running a
        framework on tiny batches (tens of MFLOP/s effective).
    gpu_fraction : float (default: 0.1)
        Fraction of devices with a GPU, in [0, 1].
    gpu_speedup : float (default: 8.0)
        GPU FLOP rate over the device's CPU FLOP rate (>= 1).
    median_memory_bandwidth : float (default: 2e9)
        Median memory bandwidth, bytes/s.
    median_disk_bandwidth : float (default: 5e7)
        Median storage bandwidth, bytes/s.
    median_network_bandwidth : float (default: 1e6)
        Median network bandwidth, bytes/s.
    bandwidth_jitter : float (default: 0.5)
        Standard deviation of the independent log-normal jitter of the bandwidths.
    flaky_fraction : float (default: 0.3)
        Fraction of devices that go offline for stretches, in [0, 1].
    mean_online : float (default: 60.0)
        Mean online stretch of a flaky device, virtual seconds (> 0).
    mean_offline : float (default: 15.0)
        Mean offline stretch of a flaky device, virtual seconds (> 0).
    noise : float (default: 0.1)
        Standard deviation of the log-normal noise on a slice's compute time (>= 0).
    """

    num_devices: int
    seed: int = 0
    distribution: Distribution = "lognormal"
    compute_spread: float = 30.0
    median_flops: float = 2e7
    gpu_fraction: float = 0.1
    gpu_speedup: float = 8.0
    median_memory_bandwidth: float = 2e9
    median_disk_bandwidth: float = 5e7
    median_network_bandwidth: float = 1e6
    bandwidth_jitter: float = 0.5
    flaky_fraction: float = 0.3
    mean_online: float = 60.0
    mean_offline: float = 15.0
    noise: float = 0.1

    def __post_init__(self) -> None:
        validate.integer("num_devices", self.num_devices, low=1)
        validate.integer("seed", self.seed, low=0)
        validate.choice("distribution", self.distribution, DISTRIBUTIONS)
        _check_range("compute_spread", self.compute_spread, low=1.0)
        _check_range("gpu_speedup", self.gpu_speedup, low=1.0)
        for name in ("gpu_fraction", "flaky_fraction"):
            _check_range(name, getattr(self, name), low=0.0, high=1.0)
        for name in (
            "median_flops",
            "median_memory_bandwidth",
            "median_disk_bandwidth",
            "median_network_bandwidth",
            "mean_online",
            "mean_offline",
        ):
            _check_range(name, getattr(self, name), low=0.0, open_low=True)
        _check_range("bandwidth_jitter", self.bandwidth_jitter, low=0.0)
        _check_range("noise", self.noise, low=0.0)


def _check_range(
    name: str, value: float, *, low: float, high: float | None = None, open_low: bool = False
) -> None:
    validate.number(name, value, low=low, high=high, low_inclusive=not open_low)


def _stretch(logs: np.ndarray, spread: float) -> np.ndarray:
    """Map log values affinely so that ``max - min == log(spread)`` and the median is 0."""
    if logs.size == 1 or spread == 1.0:
        return np.zeros_like(logs)
    width = float(logs.max() - logs.min())
    if width == 0.0:  # all draws equal: spread them evenly instead
        logs = np.linspace(0.0, 1.0, logs.size)
        width = 1.0
    scaled = (logs - logs.min()) * (math.log(spread) / width)
    out: np.ndarray = scaled - np.median(scaled)
    return out


def make_population(config: PopulationConfig) -> tuple[DeviceSpec, ...]:
    """Draw the devices of a population.

    Parameters
    ----------
    config : PopulationConfig
        Size, seed and heterogeneity of the population.

    Returns
    -------
    tuple[DeviceSpec, ...]
        One spec per device, ``node`` = its index. The fastest CPU is exactly
        ``config.compute_spread`` times the slowest (for two devices or more).
    """
    n = config.num_devices
    rng = np.random.default_rng([config.seed, _POPULATION_STREAM])
    if config.distribution == "lognormal":
        raw = rng.standard_normal(n)
    else:
        raw = np.log(rng.pareto(1.5, n) + 1.0)
    tier = _stretch(raw, config.compute_spread)  # log speed relative to the median
    cpu = config.median_flops * np.exp(tier)

    def correlated(median: float) -> np.ndarray:
        jitter = rng.standard_normal(n) * config.bandwidth_jitter
        out: np.ndarray = median * np.exp(0.5 * tier + jitter)
        return out

    memory = correlated(config.median_memory_bandwidth)
    disk = correlated(config.median_disk_bandwidth)
    network = correlated(config.median_network_bandwidth)

    n_gpu = round(config.gpu_fraction * n)
    gpu_nodes = set(rng.permutation(n)[:n_gpu].tolist())
    n_flaky = round(config.flaky_fraction * n)
    flaky_nodes = set(rng.permutation(n)[:n_flaky].tolist())

    specs = []
    for node in range(n):
        flaky = node in flaky_nodes
        specs.append(
            DeviceSpec(
                node=node,
                cpu_flops=float(cpu[node]),
                gpu_flops=float(cpu[node] * config.gpu_speedup) if node in gpu_nodes else 0.0,
                memory_bandwidth=float(memory[node]),
                disk_bandwidth=float(disk[node]),
                network_bandwidth=float(network[node]),
                mean_online=config.mean_online if flaky else math.inf,
                mean_offline=config.mean_offline if flaky else 0.0,
            )
        )
    return tuple(specs)


def _float_bits(value: float) -> int:
    """Return the IEEE-754 bits of ``value`` as a non-negative integer (a seed word)."""
    bits: int = struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    return bits


@dataclass
class _Timeline:
    """Lazily drawn alternation of online and offline stretches; pure given its seed.

    ``bounds`` holds the switch times ``[on_end_0, off_end_0, on_end_1, off_end_1, ...]``,
    drawn in order from one stream, so extending it never changes what was drawn before.
    """

    seed: int
    node: int
    mean_online: float
    mean_offline: float
    bounds: list[float] = field(default_factory=list)
    _rng: np.random.Generator | None = None

    def _extend_to(self, t: float) -> None:
        if self._rng is None:
            self._rng = np.random.default_rng([self.seed, _AVAILABILITY_STREAM, self.node])
        while not self.bounds or self.bounds[-1] <= t:
            last = self.bounds[-1] if self.bounds else 0.0
            on = float(self._rng.exponential(self.mean_online))
            off = float(self._rng.exponential(self.mean_offline))
            self.bounds.extend((last + on, last + on + off))

    def online_at(self, t: float) -> bool:
        """Return whether the device is online at time ``t`` (>= 0)."""
        self._extend_to(t)
        return bisect.bisect_right(self.bounds, t) % 2 == 0

    def advance(self, t: float, work: float) -> float:
        """Return when ``work`` online seconds started at ``t`` are done (pausing offline)."""
        while True:
            self._extend_to(t)
            i = bisect.bisect_right(self.bounds, t)
            if i % 2 == 1:  # offline until bounds[i]
                t = self.bounds[i]
                continue
            room = self.bounds[i] - t
            if work <= room:
                return t + work
            work -= room
            t = self.bounds[i]

    def online_seconds(self, t0: float, t1: float) -> float:
        """Return the online seconds within ``[t0, t1]``."""
        total = 0.0
        t = t0
        while t < t1:
            self._extend_to(t)
            i = bisect.bisect_right(self.bounds, t)
            end = min(self.bounds[i], t1)
            if i % 2 == 0:
                total += end - t
            t = end
        return total

    def offline_stretches(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """Return the offline stretches that overlap ``[t0, t1]``, clipped to it."""
        self._extend_to(t1)
        out = []
        for k in range(1, len(self.bounds), 2):
            start, end = self.bounds[k - 1], self.bounds[k]
            if end > t0 and start < t1:
                out.append((max(start, t0), min(end, t1)))
        return out


class VirtualDevice:
    """One virtual device: implements :class:`flower_edge.timing.DeviceTimer`.

    Parameters
    ----------
    spec : DeviceSpec
        The device's resources.
    cost : JobCost
        Per-sample training cost and transfer size of the model it trains.
    seed : int (default: 0)
        Seed of its availability and noise streams.
    noise : float (default: 0.1)
        Standard deviation of the log-normal noise on compute time (0 = exact).

    Notes
    -----
    All answers are pure functions of ``(spec, cost, seed, arguments)``: the availability
    timeline is drawn lazily but always in the same order, and the noise of a slice is
    drawn from ``(seed, node, start)``.
    """

    def __init__(self, spec: DeviceSpec, cost: JobCost, seed: int = 0, noise: float = 0.1) -> None:
        validate.integer("seed", seed, low=0)
        _check_range("noise", noise, low=0.0)
        self.spec = spec
        self.cost = cost
        self.seed = seed
        self.noise = noise
        self._timeline = (
            _Timeline(seed, spec.node, spec.mean_online, spec.mean_offline) if spec.flaky else None
        )

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"VirtualDevice(node={s.node}, flops={s.flops:.3g}, gpu={s.has_gpu}, "
            f"net={s.network_bandwidth:.3g} B/s, flaky={s.flaky})"
        )

    # ------------------------------------------------------------ cost model
    @property
    def seconds_per_sample(self) -> float:
        """Noise-free online seconds to train one sample."""
        s, c = self.spec, self.cost
        return (
            c.compute_flops / s.flops
            + c.memory_bytes / s.memory_bandwidth
            + c.sample_bytes / s.disk_bandwidth
        )

    def transfer_seconds(self, nbytes: int) -> float:
        """Online seconds to send or receive ``nbytes``."""
        return nbytes / self.spec.network_bandwidth

    def noise_factor(self, start: float) -> float:
        """Multiplicative noise of the slice that starts at ``start`` (median 1)."""
        if self.noise == 0.0:
            return 1.0
        rng = np.random.default_rng([self.seed, _NOISE_STREAM, self.spec.node, _float_bits(start)])
        return float(math.exp(self.noise * rng.standard_normal()))

    # ------------------------------------------------------------ availability
    def online_at(self, t: float) -> bool:
        """Return whether the device is online at virtual time ``t``."""
        return True if self._timeline is None else self._timeline.online_at(max(t, 0.0))

    def advance(self, t: float, work: float) -> float:
        """Return when ``work`` online seconds started at ``t`` end, offline stretches paused."""
        validate.number("work", work, low=0.0, finite=False, error=InputError)
        if self._timeline is None:
            return t + work
        return self._timeline.advance(max(t, 0.0), work)

    def online_seconds(self, t0: float, t1: float) -> float:
        """Return the online seconds within ``[t0, t1]``."""
        if t1 <= t0:
            return 0.0
        if self._timeline is None:
            return t1 - t0
        return self._timeline.online_seconds(max(t0, 0.0), t1)

    def offline_stretches(self, t0: float, t1: float) -> list[tuple[float, float]]:
        """Return the offline stretches overlapping ``[t0, t1]`` (for timelines)."""
        if self._timeline is None or t1 <= t0:
            return []
        return self._timeline.offline_stretches(max(t0, 0.0), t1)

    # ------------------------------------------------------------ DeviceTimer
    def samples_within(self, start: float, budget: float) -> int:
        """Return how many samples the device trains in ``budget`` virtual seconds.

        Offline time within the budget does not count; the slice's noise factor (drawn from
        ``start``) applies, as in :meth:`slice_seconds`.
        """
        validate.number("budget", budget, low=0.0, low_inclusive=False, error=InputError)
        online = self.online_seconds(start, start + budget)
        per_sample = self.seconds_per_sample * self.noise_factor(start)
        return int(online / per_sample)

    def slice_seconds(
        self, start: float, samples: int, download_bytes: int, upload_bytes: int
    ) -> float:
        """Return the virtual seconds from ``start`` until the slice's reply reaches the server.

        Download, then ``samples`` training samples, then upload, each paused while the
        device is offline.
        """
        if samples < 0 or download_bytes < 0 or upload_bytes < 0:
            raise InputError(
                "samples, download_bytes and upload_bytes must be >= 0, got "
                f"{samples}, {download_bytes}, {upload_bytes}"
            )
        work = (
            self.transfer_seconds(download_bytes)
            + samples * self.seconds_per_sample * self.noise_factor(start)
            + self.transfer_seconds(upload_bytes)
        )
        return self.advance(start, work) - start

    # ------------------------------------------------------------ probe numbers
    def resource_evaluations(self) -> dict[str, float]:
        """Return the device's seed-formula-4 evaluation per resource, in samples/s.

        The virtual device answers the single-resource benchmarks from its own numbers:
        ``cpu`` / ``gpu`` samples/s of a reference compute workload of ``compute_flops``
        per sample (0 without a GPU), ``memory`` samples/s of ``memory_bytes`` per sample,
        ``disk`` samples/s of a reference shard sample. Utilisation is taken as 1.
        """
        s, c = self.spec, self.cost
        flops = c.compute_flops or 1.0
        mem = c.memory_bytes or 1.0
        return {
            "cpu": s.cpu_flops / flops,
            "gpu": s.gpu_flops / flops,
            "memory": s.memory_bandwidth / mem,
            "disk": s.disk_bandwidth / (c.sample_bytes or _DISK_SAMPLE_BYTES),
        }


#: bytes of a reference sample in the disk benchmark when the job's samples have no size
_DISK_SAMPLE_BYTES = 4096.0


def device_table(devices: Sequence[VirtualDevice]) -> list[dict[str, float | int | bool]]:
    """Return one plain dict per device (for reports)."""
    rows: list[dict[str, float | int | bool]] = []
    for d in devices:
        s = d.spec
        rows.append(
            {
                "node": s.node,
                "cpu_flops": s.cpu_flops,
                "gpu_flops": s.gpu_flops,
                "memory_bandwidth": s.memory_bandwidth,
                "disk_bandwidth": s.disk_bandwidth,
                "network_bandwidth": s.network_bandwidth,
                "flaky": s.flaky,
                "seconds_per_sample": d.seconds_per_sample,
            }
        )
    return rows
