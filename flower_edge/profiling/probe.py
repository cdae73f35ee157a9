"""The real resource probe: runs the workloads on this host and builds a :class:`ProfileReport`.

For every workload the probe prepares it (not timed), runs a warm-up of one batch and a pilot
of a quarter of its samples, then times ``repeats`` runs while a
:class:`~.sampler.UtilizationSampler` samples the resource; ``Time_w`` is the median of the
repeats and ``U_w`` the sampler's mean over them. When the pilot shows that one run would take
longer than the plan's ``run_budget``, the capacity shrinks to fit (in whole batches or
shards): a slow edge device still finishes in bounded time, and ``E = Capacity / Time`` stays
comparable across nodes; when it would take less than a quarter of the budget, the capacity
grows (at most ``max_growth`` times) towards half the budget, so fast devices are timed
over a meaningful interval. On a host loaded by others, runs are cut and repeats stop early
so that the profile's time stays bounded (see :func:`measure_workload`).

The gpu workloads are sized instead (:func:`measure_sized_workload`, issue 12): a small batch
on a large GPU is launch-bound, so the batch grows geometrically (``gpu_batches`` times 4, 16,
... up to ``gpu_max_batches``) until the rate stops growing, NVML shows the card loaded, one
step would pass an eighth of ``gpu_run_budget``, the sizing used ``gpu_sizing_budget`` or the
card runs out of memory; the timed runs then take whole steps of the chosen batch filling
``gpu_run_budget``, and ``U`` is the mean of NVML's samples inside the timed window only
(:class:`~.window.NvmlWindow`).

The disk workloads write into a fresh temporary folder under ``disk_dir``; it is created
before any workload runs (so an unwritable folder fails at once) and removed afterwards, also
on an exception or Ctrl-C; SIGINT/SIGTERM arriving while it is removed are held back until
it is gone (:func:`remove_tree`). A resource whose workloads fail for a reason of the node
(no GPU, CUDA out of memory, disk full or I/O error) is reported unavailable with the reason
and N = 0, the other resources are still rated.

``elapsed_seconds`` counts from the first workload-related step (GPU detection) to the last
workload; importing torch, which a client has done long before, is not part of it.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from logging import INFO, WARNING, getLogger
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import psutil

from flower_edge import validate
from flower_edge.errors import ConfigError, InputError
from flower_edge.profiling.gpu import GpuInfo, detect_gpu, nvml_shutdown
from flower_edge.profiling.report import (
    MODES,
    RESOURCES,
    HostFacts,
    Mode,
    ProfileReport,
    ResourceReport,
    WorkloadResult,
)
from flower_edge.profiling.sampler import (
    Counter,
    CpuCounter,
    DiskCounter,
    MemoryCounter,
    UtilizationSampler,
)
from flower_edge.profiling.sizing import (
    SizingOutcome,
    SizingPolicy,
    SizingStep,
    size_workload,
    timed_capacity,
)
from flower_edge.profiling.window import NvmlWindow, UtilizationWindow

if TYPE_CHECKING:
    from flower_edge.profiling.workloads import SizableWorkload, Workload

__all__ = [
    "PLANS",
    "MEMORY_FILESYSTEMS",
    "TEMP_PREFIX",
    "HostProbe",
    "ProfilePlan",
    "filesystem_type",
    "host_facts",
    "measure_sized_workload",
    "measure_workload",
    "profile_host",
    "remove_tree",
]

logger = getLogger(__name__)

#: prefix of the temporary folder the disk workloads write into
TEMP_PREFIX: Final = "flower-edge-profile-"
#: a progress callback: (what runs now, fraction of the profile done in [0, 1])
ProgressFn = Callable[[str, float], None]
_MAX_REPEATS: Final = 100
#: a timed run stops after the batch in progress once it took this many run budgets
_HARD_LIMIT: Final = 2.0
#: repeats stop once they took this many run budgets per repeat
_TOTAL_LIMIT: Final = 1.5


@dataclass(frozen=True)
class ProfilePlan:
    """Sizes of one profiling mode.

    Parameters
    ----------
    cpu_samples : tuple[int, int]
        Capacities of ``cpu-dense`` and ``cpu-conv``.
    memory_samples : tuple[int, int]
        Capacities of ``memory-copy`` and ``memory-gather`` (12 KiB samples).
    memory_buffer_bytes : int
        Upper bound of each memory buffer; the probe also keeps both buffers within a quarter
        of the available memory.
    disk_samples : tuple[int, int]
        Capacities of ``disk-small`` and ``disk-large`` (3 KiB samples).
    repeats : int
        Timed runs per workload (the median counts) when the caller gives none.
    run_budget : float
        Seconds one timed run may take before the capacity shrinks.
    disk_shard_samples : tuple[int, int] (default: (16, 256))
        Samples per shard of ``disk-small`` and ``disk-large``.
    sample_interval : float (default: 0.02)
        Seconds between utilisation readings.
    max_growth : float (default: 16.0)
        Largest factor by which a fast device's capacities grow towards half ``run_budget``
        (see :func:`measure_workload`); 1 keeps the plan's capacities as the ceiling.
    gpu_batches : tuple[int, int] (default: (256, 128))
        First batch (work per step) of ``gpu-dense`` and ``gpu-conv``; the sizing grows it
        (:func:`measure_sized_workload`).
    gpu_max_batches : tuple[int, int] (default: (65536, 16384))
        Largest batch of ``gpu-dense`` and ``gpu-conv`` (a memory ceiling; running out of
        device memory earlier also stops the growth).
    gpu_run_budget : float (default: 0.2)
        Seconds one timed gpu run should take; a step of the chosen batch takes at most an
        eighth of it.
    gpu_sizing_budget : float (default: 0.25)
        Seconds the sizing of one gpu workload may take; each size runs for an eighth of it.
    """

    cpu_samples: tuple[int, int]
    memory_samples: tuple[int, int]
    memory_buffer_bytes: int
    disk_samples: tuple[int, int]
    repeats: int
    run_budget: float
    disk_shard_samples: tuple[int, int] = (16, 256)
    sample_interval: float = 0.02
    max_growth: float = 16.0
    gpu_batches: tuple[int, int] = (256, 128)
    gpu_max_batches: tuple[int, int] = (1 << 16, 1 << 14)
    gpu_run_budget: float = 0.2
    gpu_sizing_budget: float = 0.25

    def __post_init__(self) -> None:
        for name in ("cpu_samples", "memory_samples", "disk_samples", "gpu_batches"):
            values = getattr(self, name)
            if len(values) != 2:
                raise ConfigError(f"{name} must be two integers >= 1, got {values!r}")
            for i, value in enumerate(values):
                validate.integer(f"{name}[{i}]", value, low=1)
        validate.integer("memory_buffer_bytes", self.memory_buffer_bytes, low=1 << 20)
        validate.integer("repeats", self.repeats, low=1, high=_MAX_REPEATS)
        for name in ("run_budget", "sample_interval", "gpu_run_budget", "gpu_sizing_budget"):
            validate.number(f"{name} (seconds)", getattr(self, name), low=0.0, low_inclusive=False)
        validate.number("max_growth", self.max_growth, low=1.0, high=1024.0)
        if len(self.gpu_max_batches) != 2 or any(
            int(m) < int(b) for m, b in zip(self.gpu_max_batches, self.gpu_batches, strict=True)
        ):
            raise ConfigError(
                f"gpu_max_batches must be two integers >= gpu_batches {self.gpu_batches!r}, "
                f"got {self.gpu_max_batches!r}"
            )

    def gpu_policy(self, index: int) -> SizingPolicy:
        """Return the sizing policy of gpu workload ``index`` (0 dense, 1 conv)."""
        return SizingPolicy(
            start=int(self.gpu_batches[index]),
            max_work=int(self.gpu_max_batches[index]),
            step_budget=self.gpu_run_budget / 8,
            total_budget=self.gpu_sizing_budget,
        )


#: the sizes of each mode (quick: a client's first contact, <= 3 s; full: <= 15 s on 2 cores)
PLANS: dict[str, ProfilePlan] = {
    "quick": ProfilePlan(
        cpu_samples=(1024, 256),
        memory_samples=(16384, 16384),
        memory_buffer_bytes=64 << 20,
        disk_samples=(512, 2048),
        repeats=1,
        run_budget=0.15,
        gpu_max_batches=(1 << 16, 1 << 14),
        gpu_run_budget=0.2,
        gpu_sizing_budget=0.25,
    ),
    "full": ProfilePlan(
        cpu_samples=(4096, 1024),
        memory_samples=(65536, 65536),
        memory_buffer_bytes=128 << 20,
        disk_samples=(2048, 8192),
        repeats=3,
        run_budget=0.4,
        gpu_max_batches=(1 << 18, 1 << 16),
        gpu_run_budget=0.75,
        gpu_sizing_budget=1.5,
    ),
}


# ---------------------------------------------------------------- host facts


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()[:200]
    except OSError:
        pass
    return (platform.processor() or platform.machine())[:200]


def host_facts(gpu_name: str | None = None) -> HostFacts:
    """Return the facts of this host, load average taken now."""
    try:
        load = tuple(float(v) for v in psutil.getloadavg())
    except (OSError, AttributeError):  # pragma: no cover - platform dependent
        load = (0.0, 0.0, 0.0)
    return HostFacts(
        cores=os.cpu_count() or 1,
        cpu_model=_cpu_model(),
        memory_bytes=int(psutil.virtual_memory().total),
        gpu_name=gpu_name,
        load_average=cast(tuple[float, float, float], load),
        platform=f"{platform.system()}-{platform.machine()}",
    )


# ---------------------------------------------------------------- measuring


def measure_workload(
    workload: Workload,
    samples: int,
    counter: Counter,
    repeats: int = 1,
    *,
    warmup: bool = True,
    run_budget: float | None = None,
    min_samples: int = 1,
    interval: float = 0.02,
    max_growth: float = 1.0,
) -> WorkloadResult:
    """Time one workload and sample its resource's utilisation.

    Parameters
    ----------
    workload : Workload
        The workload; this function prepares and closes it.
    samples : int
        ``Capacity_w`` before any shrinking, ``>= 1``.
    counter : Counter
        Utilisation source of the workload's resource.
    repeats : int (default: 1)
        Timed runs; the median time counts.
    warmup : bool (default: True)
        First run ``min_samples`` samples (lazy initialisation), then a pilot of a quarter of
        the samples, both untimed.
    run_budget : float | None (default: None)
        Shrink ``samples`` so that a run takes about this many seconds, judged by the pilot
        (itself cut after ``run_budget`` seconds); cut a timed run short (after its batch in
        progress) past ``2 * run_budget`` seconds, and stop repeating once the timed runs
        took ``1.5 * run_budget * repeats`` seconds. A cut run counts the samples it did; the
        run of median intensity is then reported.
    min_samples : int (default: 1)
        Floor and step of the shrinking (a batch or a shard), so that batches keep their shape.
    interval : float (default: 0.02)
        Seconds between utilisation readings.
    max_growth : float (default: 1.0)
        When the pilot projects less than a quarter of ``run_budget``, grow ``samples`` by up
        to this factor towards half the budget: short runs time poorly and NVML's sample
        period (up to 1 s) needs a GPU busy for a while. 1 never grows.

    Returns
    -------
    WorkloadResult
        Samples, median seconds, utilisation and ``E`` (seed formula 3).
    """
    validate.integer("repeats", repeats, low=1)
    sampler = UtilizationSampler(counter, interval)
    workload.prepare(samples)
    floor = max(1, min(min_samples, samples))
    try:
        if warmup:
            workload.run(floor)  # lazy initialisation: allocator, kernels, file system
            pilot = max(floor, samples // 4)
            start = time.perf_counter()
            cutoff = None if run_budget is None else start + run_budget
            piloted = workload.run(pilot, cutoff)
            projected = (time.perf_counter() - start) * samples / piloted
            if run_budget is not None and projected > run_budget:
                shrunk = int(samples * run_budget / projected) // floor * floor
                samples = max(floor, shrunk)
            elif run_budget is not None and projected < run_budget / 4 and max_growth > 1:
                factor = min(max_growth, run_budget / 2 / max(projected, 1e-9))
                samples = max(samples, int(samples * factor) // floor * floor)
        total_limit = None if run_budget is None else _TOTAL_LIMIT * run_budget * repeats
        runs: list[tuple[int, float]] = []  # (samples processed, seconds)
        sampler.start()
        began = time.perf_counter()
        for _ in range(repeats):
            start = time.perf_counter()
            cutoff = None if run_budget is None else start + _HARD_LIMIT * run_budget
            done = workload.run(samples, cutoff)
            runs.append((done, time.perf_counter() - start))
            if total_limit is not None and time.perf_counter() - began > total_limit:
                break  # a loaded host: keep the profile's time bounded
        utilization = sampler.stop()
    finally:
        sampler.stop()
        workload.close()
    samples, seconds = _median_run(runs)
    return WorkloadResult.measured(workload.name, samples, seconds, utilization)


def _median_run(runs: list[tuple[int, float]]) -> tuple[int, float]:
    """Return (samples, seconds): the median time, or the run of median intensity if cut."""
    counts = {done for done, _ in runs}
    if len(counts) == 1:
        return counts.pop(), max(statistics.median(t for _, t in runs), 1e-9)
    ranked = sorted(runs, key=lambda r: r[0] / max(r[1], 1e-9))
    done, seconds = ranked[(len(ranked) - 1) // 2]
    return done, max(seconds, 1e-9)


#: most steps of work one sizing run may queue (its deadline ends it long before)
_SIZING_STEPS: Final = 1 << 20


def measure_sized_workload(
    workload: SizableWorkload,
    policy: SizingPolicy,
    window: UtilizationWindow,
    repeats: int = 1,
    *,
    run_budget: float,
    probe_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[WorkloadResult, SizingOutcome]:
    """Size a workload's batch to load its device, then time it (issue 12).

    1. Sizing (:func:`~.sizing.size_workload`), after one untimed step at the first batch
       (one-time initialisation, outside the sizing budget): at each batch of the policy's
       geometric ladder, resize, warm up one step (untimed: kernel selection, allocator),
       then run until ``probe_seconds`` have passed, with ``window`` open over that run only.
       Running out of device memory at a batch above the first ends the growth.
    2. Timed runs at the chosen batch (the highest rate): capacity
       :func:`~.sizing.timed_capacity` (whole steps filling ``run_budget``), ``repeats`` runs,
       each cut after its step in progress past ``2 * run_budget``, repeats stopped once they
       took ``1.5 * run_budget * repeats``; ``window`` is opened after the warm-up and closed
       right after the last timed run, so that ``U`` covers the timed window only.

    Parameters
    ----------
    workload : SizableWorkload
        The workload; prepared at ``policy.start`` and closed here.
    policy : SizingPolicy
        Ladder and budgets of the sizing.
    window : UtilizationWindow
        Utilisation of the workload's resource (:class:`~.window.NvmlWindow` on a GPU).
    repeats : int (default: 1)
        Timed runs; the median counts.
    run_budget : float
        Seconds one timed run should take, ``> 0``.
    probe_seconds : float
        Seconds each sizing run lasts, ``> 0``.
    clock : Callable[[], float] (default: time.perf_counter)
        The clock of the deadlines the workload honours (tests pass a fake one).

    Returns
    -------
    tuple[WorkloadResult, SizingOutcome]
        The timed result (``U`` 0 when the window knew nothing, logged) and the sizing.
    """
    validate.integer("repeats", repeats, low=1)
    for name, seconds in (("run_budget", run_budget), ("probe_seconds", probe_seconds)):
        validate.number(f"{name} (seconds)", seconds, low=0.0, low_inclusive=False)

    def measure(work: int) -> SizingStep:
        began = clock()
        try:
            workload.resize(work)
            workload.run(work)  # warm-up: one step at this size, untimed
            overhead = clock() - began
            window.begin()
            start = clock()
            done = workload.run(work * _SIZING_STEPS, start + probe_seconds)
            seconds = clock() - start
            utilization = window.end()
        except MemoryError as exc:
            if work == policy.start:
                raise
            logger.log(INFO, "%s: batch %s does not fit (%s)", workload.name, work, exc)
            return SizingStep(work, 0, 0.0, None, clock() - began)
        return SizingStep(work, done, seconds, utilization, overhead)

    workload.prepare(policy.start)
    try:
        workload.run(policy.start)  # one-time initialisation (libraries, kernels), not budgeted
        outcome = size_workload(policy, measure)
        chosen = outcome.chosen
        workload.resize(chosen.work)
        workload.run(chosen.work)  # warm-up after a larger size was tried
        samples = timed_capacity(chosen, run_budget)
        total_limit = _TOTAL_LIMIT * run_budget * repeats
        runs: list[tuple[int, float]] = []
        window.begin()
        began = clock()
        for _ in range(repeats):
            start = clock()
            done = workload.run(samples, start + _HARD_LIMIT * run_budget)
            runs.append((done, clock() - start))
            if clock() - began > total_limit:
                break
        utilization = window.end()
    finally:
        workload.close()
    if utilization is None:
        logger.log(WARNING, "%s: no utilisation reading in the timed window", workload.name)
        utilization = 0.0
    utilization = min(1.0, max(0.0, utilization))
    done, seconds = _median_run(runs)
    result = WorkloadResult.measured(workload.name, done, seconds, utilization)
    logger.log(
        INFO,
        "%s: batch %s (%s after %s sizes), %.4g samples/s, utilisation %.2f",
        workload.name,
        chosen.work,
        outcome.reason,
        len(outcome.steps),
        result.intensity,
        utilization,
    )
    return result, outcome


def remove_tree(path: str | Path) -> None:
    """Remove a folder tree so that Ctrl-C or SIGTERM cannot cut the removal short.

    In the main thread, SIGINT and SIGTERM arriving during the removal are held back and
    re-raised once it is done (so the interrupt still happens, after the cleanup).
    """
    held: list[int] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))
            except (ValueError, OSError):  # pragma: no cover - platform dependent
                continue
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if os.path.lexists(path):
        logger.log(WARNING, "could not remove the profiling folder %s; remove it by hand", path)
    if held:
        signal.raise_signal(held[0])


@contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: file systems that keep files in memory: a disk rating there measures memory
MEMORY_FILESYSTEMS: Final = frozenset({"tmpfs", "ramfs", "devtmpfs"})


def filesystem_type(path: str | Path) -> str | None:
    """Return the type of the file system holding ``path`` (``"ext4"``, ``"tmpfs"``, ...).

    The mount point that is the longest prefix of the resolved path wins; ``None`` when psutil
    cannot tell.
    """
    target = Path(path).resolve()
    best: tuple[int, str] | None = None
    try:
        partitions = psutil.disk_partitions(all=True)
    except (OSError, RuntimeError):  # pragma: no cover - platform dependent
        return None
    for part in partitions:
        mount = Path(part.mountpoint)
        if target == mount or mount in target.parents:
            depth = len(mount.parts)
            if best is None or depth >= best[0]:
                best = (depth, part.fstype)
    return best[1] if best else None


def _check_disk_dir(disk_dir: str | Path | None) -> Path:
    if disk_dir is None:
        return Path(tempfile.gettempdir())
    if not isinstance(disk_dir, str | os.PathLike) or not str(disk_dir).strip():
        raise InputError(f"disk_dir must be a folder path, got {disk_dir!r}")
    path = Path(disk_dir)
    if not path.exists():
        raise InputError(f"disk_dir {str(path)!r} does not exist")
    if not path.is_dir():
        raise InputError(f"disk_dir {str(path)!r} is not a folder")
    return path


# ---------------------------------------------------------------- the probe


class HostProbe:
    """Profile this host's cpu, gpu, memory and disk (seed 000 step 2, formulas 3 and 4).

    Parameters
    ----------
    disk_dir : str | Path | None (default: None)
        Existing, writable folder under which the disk workloads make a temporary folder;
        ``None`` for the system's temporary folder.
    repeats : int | None (default: None)
        Timed runs per workload, in ``[1, 100]``; ``None`` for the mode's default
        (quick 1, full 3).
    progress : Callable[[str, float], None] | None (default: None)
        Called with (workload about to run, fraction done) and finally ``("done", 1.0)``.
    plans : dict[str, ProfilePlan] | None (default: None)
        Sizes per mode; ``None`` for :data:`PLANS` (tests pass tiny ones).

    Raises
    ------
    InputError
        When ``disk_dir`` does not exist or is not a folder, or ``repeats`` is out of range.
    """

    def __init__(
        self,
        disk_dir: str | Path | None = None,
        repeats: int | None = None,
        progress: ProgressFn | None = None,
        *,
        plans: dict[str, ProfilePlan] | None = None,
    ) -> None:
        validate.integer("repeats", repeats, low=1, high=_MAX_REPEATS, allow_none=True)
        self.disk_dir = _check_disk_dir(disk_dir)
        self.repeats = repeats
        self.progress = progress
        self.plans = PLANS if plans is None else plans
        #: the gpu workloads' sizing of the last profile, by workload name
        self.sizing: dict[str, SizingOutcome] = {}

    def _tell(self, label: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(label, done / total if total else 1.0)

    def _make_temp(self) -> Path:
        try:
            return Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=self.disk_dir))
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise InputError(f"disk_dir {str(self.disk_dir)!r} is not writable: {reason}") from None

    def profile(self, mode: Mode) -> ProfileReport:
        """Run every workload of ``mode`` and return the report.

        Parameters
        ----------
        mode : {"quick", "full"}
            ``"quick"`` for a client's first contact, ``"full"`` for a complete rating.

        Raises
        ------
        ConfigError
            When ``mode`` is not one of ``("quick", "full")``.
        InputError
            When ``disk_dir`` is not writable.
        KeyboardInterrupt
            Passed on after the temporary folder is removed.
        """
        validate.choice("mode", mode, MODES)
        plan = self.plans[mode]
        repeats = self.repeats or plan.repeats
        facts = host_facts()  # load average before any workload
        temp = self._make_temp()  # an unwritable disk_dir fails before any work
        gpu: GpuInfo | None = None
        try:
            import torch  # noqa: F401  (loading the library is not part of the profile)

            start = time.perf_counter()
            gpu = detect_gpu()
            with _torch_threads(os.cpu_count() or 1):
                resources = self._run_all(plan, repeats, temp, gpu)
            elapsed = time.perf_counter() - start
        finally:
            remove_tree(temp)
            if gpu is not None and gpu.available:
                nvml_shutdown()
        self._tell("done", 1, 1)
        host = HostFacts(
            facts.cores,
            facts.cpu_model,
            facts.memory_bytes,
            gpu.name if gpu.available else None,
            facts.load_average,
            facts.platform,
        )
        return ProfileReport(host, resources, mode, elapsed)

    def _run_all(
        self, plan: ProfilePlan, repeats: int, temp: Path, gpu: GpuInfo
    ) -> dict[str, ResourceReport]:
        from flower_edge.profiling.workloads import (
            ConvWorkload,
            DenseWorkload,
            GatherWorkload,
            ShardWorkload,
            StridedCopyWorkload,
            peak_copy_bandwidth,
        )

        total = 6 + (2 if gpu.available else 0)
        step = 0

        def run(workload: Workload, samples: int, counter: Counter, floor: int) -> WorkloadResult:
            nonlocal step
            self._tell(workload.name, step, total)
            result = measure_workload(
                workload,
                samples,
                counter,
                repeats,
                run_budget=plan.run_budget,
                min_samples=floor,
                interval=plan.sample_interval,
                max_growth=plan.max_growth,
            )
            step += 1
            return result

        out: dict[str, ResourceReport] = {}
        dense, conv = DenseWorkload("cpu"), ConvWorkload("cpu")
        out["cpu"] = ResourceReport.from_workloads(
            [
                run(dense, plan.cpu_samples[0], CpuCounter(), dense.batch),
                run(conv, plan.cpu_samples[1], CpuCounter(), conv.batch),
            ]
        )

        def tell(label: str) -> None:
            nonlocal step
            self._tell(label, step, total)
            step += 1

        out["gpu"] = self._gpu(plan, gpu, repeats, tell)
        buffer = self._memory_buffer(plan)
        self._tell("memory-peak", step, total)
        counter = MemoryCounter(peak_copy_bandwidth(buffer, repeats=2))
        floor = max(1, buffer // (4 << 20))
        out["memory"] = ResourceReport.from_workloads(
            [
                run(StridedCopyWorkload(buffer, counter), plan.memory_samples[0], counter, floor),
                run(GatherWorkload(buffer, counter), plan.memory_samples[1], counter, floor),
            ]
        )
        small, large = plan.disk_shard_samples
        fstype = filesystem_type(temp)
        note = None
        if fstype in MEMORY_FILESYSTEMS:
            note = (
                f"{self.disk_dir} is on {fstype} (memory, not a disk): "
                "pass a folder on the disk (--disk-dir) to rate the disk"
            )
            logger.log(WARNING, "%s", note)
        try:
            out["disk"] = ResourceReport.from_workloads(
                [
                    run(
                        ShardWorkload(temp, small, "disk-small"),
                        plan.disk_samples[0],
                        DiskCounter(),
                        small,
                    ),
                    run(
                        ShardWorkload(temp, large, "disk-large"),
                        plan.disk_samples[1],
                        DiskCounter(),
                        large,
                    ),
                ],
                note,
            )
        except OSError as exc:  # disk full, quota, I/O error: the node cannot use this disk
            logger.log(WARNING, "disk workload failed in %s: %s", temp, exc)
            out["disk"] = ResourceReport.absent(f"disk workload failed: {exc}"[:256])
        return {r: out[r] for r in RESOURCES}

    @staticmethod
    def _memory_buffer(plan: ProfilePlan) -> int:
        """Bytes per memory buffer: the plan's bound, both buffers within 1/4 of available."""
        available = int(psutil.virtual_memory().available)
        return max(1 << 20, min(plan.memory_buffer_bytes, available // 8))

    def _gpu(
        self, plan: ProfilePlan, gpu: GpuInfo, repeats: int, tell: Callable[[str], None]
    ) -> ResourceReport:
        self.sizing = {}
        if not gpu.available:
            return ResourceReport.absent(gpu.reason or "no GPU")
        results = []
        try:
            for index, workload in enumerate(_gpu_workloads(gpu, plan)):
                tell(workload.name)
                result, outcome = measure_sized_workload(
                    workload,
                    plan.gpu_policy(index),
                    _gpu_window(gpu),
                    repeats,
                    run_budget=plan.gpu_run_budget,
                    probe_seconds=plan.gpu_sizing_budget / 8,
                )
                self.sizing[result.name] = outcome
                results.append(result)
        except Exception as exc:  # CUDA out of memory, launch failures, a CPU-only torch
            return ResourceReport.absent(f"gpu workload failed: {exc}"[:256])
        return ResourceReport.from_workloads(results)


def _gpu_workloads(gpu: GpuInfo, plan: ProfilePlan) -> list[SizableWorkload]:
    """Return ``gpu-dense`` and ``gpu-conv`` on the GPU, at the plan's first batches."""
    from flower_edge.profiling.workloads import ConvWorkload, DenseWorkload

    device = f"cuda:{gpu.device_index}"
    return [DenseWorkload(device, plan.gpu_batches[0]), ConvWorkload(device, plan.gpu_batches[1])]


def _gpu_window(gpu: GpuInfo) -> UtilizationWindow:
    """Return the GPU's utilisation window (NVML's timestamped samples)."""
    return NvmlWindow(gpu.handle)


def profile_host(
    mode: Mode = "full",
    disk_dir: str | Path | None = None,
    repeats: int | None = None,
    progress: ProgressFn | None = None,
) -> ProfileReport:
    """Profile this host; see :class:`HostProbe` for the parameters."""
    return HostProbe(disk_dir, repeats, progress).profile(mode)
