"""Workloads: each one's time grows with the amount of its resource it uses; the sampler."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from flower_edge.profiling import probe as probe_mod
from flower_edge.profiling import sampler as sampler_mod
from flower_edge.profiling.probe import measure_workload
from flower_edge.profiling.sampler import (
    CpuCounter,
    DiskCounter,
    MemoryCounter,
    UtilizationSampler,
)
from flower_edge.profiling.workloads import (
    DISK_SAMPLE_BYTES,
    MEMORY_SAMPLE_BYTES,
    SGD_LR,
    ConvWorkload,
    DenseWorkload,
    GatherWorkload,
    ShardWorkload,
    StridedCopyWorkload,
    Workload,
    peak_copy_bandwidth,
)

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _best(workload: Workload, samples: int) -> float:
    start = time.perf_counter()
    done = workload.run(samples)
    assert done == samples
    return time.perf_counter() - start


def _grows(factory: Callable[[], Workload], small: int) -> tuple[float, float]:
    """Best-of-3 seconds for ``small`` and ``4 * small`` samples, interleaved."""
    workload = factory()
    workload.prepare(4 * small)
    try:
        workload.run(small)  # warm-up
        runs = [(_best(workload, small), _best(workload, 4 * small)) for _ in range(3)]
    finally:
        workload.close()
    return min(r[0] for r in runs), min(r[1] for r in runs)


WORKLOADS: dict[str, tuple[Callable[[Path], Workload], int]] = {
    "cpu-dense": (lambda _: DenseWorkload("cpu", batch=16), 64),
    "cpu-conv": (lambda _: ConvWorkload("cpu", batch=8), 16),
    "memory-copy": (lambda _: StridedCopyWorkload(8 << 20), 1024),
    "memory-gather": (lambda _: GatherWorkload(8 << 20), 1024),
    "disk-small": (lambda d: ShardWorkload(d, 4, "disk-small"), 16),
    "disk-large": (lambda d: ShardWorkload(d, 32, "disk-large"), 64),
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_time_grows_with_the_samples_of_the_stressed_resource(name: str, tmp_path: Path) -> None:
    factory, small = WORKLOADS[name]
    t_small, t_large = _grows(lambda: factory(tmp_path), small)
    assert t_large > t_small, (name, t_small, t_large)
    assert list(tmp_path.iterdir()) == []  # disk shards deleted after every run


def test_workload_names_and_resources() -> None:
    assert (DenseWorkload().name, DenseWorkload().resource) == ("cpu-dense", "cpu")
    assert (ConvWorkload("cuda:0").name, ConvWorkload("cuda:0").resource) == ("gpu-conv", "gpu")
    assert StridedCopyWorkload(1 << 20).resource == "memory"
    assert ShardWorkload("/tmp", 16).name == "disk-48k"


def test_memory_workloads_move_the_samples_they_report() -> None:
    counter = MemoryCounter(1e9)
    copy = StridedCopyWorkload(1 << 20, counter)
    copy.prepare(100)
    assert copy.run(250) == 250  # cycles through the 85-sample buffer
    assert counter._moved == 2 * 250 * MEMORY_SAMPLE_BYTES
    # the copy is the NCHW -> NHWC transpose of the source
    assert copy._src is not None
    assert copy._dst is not None
    src = torch.arange(3 * 32 * 32, dtype=torch.float32).reshape(1, 3, 32, 32)
    copy._src[:1] = src
    copy._move(0, 1)
    assert torch.equal(copy._dst[0].view(32, 32, 3), src[0].permute(1, 2, 0))
    copy.close()


def test_gather_is_a_permutation_of_the_samples() -> None:
    gather = GatherWorkload(1 << 20)
    gather.prepare(64)
    assert gather._src is not None
    assert gather._dst is not None
    gather._src.copy_(torch.arange(64).float().view(64, 1, 1, 1).expand(64, 3, 32, 32))
    gather.run(64)
    firsts = sorted(int(v) for v in gather._dst[:, 0, 0, 0])
    assert firsts == list(range(64))
    assert not torch.equal(gather._dst[:, 0, 0, 0], gather._src[:, 0, 0, 0])


def test_disk_workload_writes_reads_and_removes_shards(tmp_path: Path) -> None:
    shards = ShardWorkload(tmp_path, 4, "disk-small")
    shards.prepare(10)
    assert len(shards._data) == 4 * DISK_SAMPLE_BYTES
    assert shards.run(10) == 10  # shards of 4, 4, 2 samples
    assert list(tmp_path.iterdir()) == []
    shards.close()
    shards.close()


def test_a_passed_deadline_stops_after_the_batch_in_progress(tmp_path: Path) -> None:
    past = time.perf_counter() - 1.0
    dense = DenseWorkload("cpu", batch=8)
    dense.prepare(64)
    assert dense.run(64, past) == 8
    shards = ShardWorkload(tmp_path, 4)
    shards.prepare(64)
    assert shards.run(64, past) == 4
    copy = StridedCopyWorkload(1 << 20)
    copy.prepare(1000)
    assert copy.run(1000, past) == copy._chunk
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [0, -1, True])
def test_workloads_reject_bad_sample_counts(bad: int) -> None:
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        DenseWorkload().prepare(bad)


def test_peak_copy_bandwidth_is_positive_and_finite() -> None:
    bandwidth = peak_copy_bandwidth(4 << 20, repeats=2)
    assert 0 < bandwidth < float("inf")


# ---------------------------------------------------------------- measure_workload


class CountingWorkload:
    """A fake workload whose runs are recorded (no timing involved in the checks)."""

    name = "fake"
    resource = "cpu"

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.closed = False

    def prepare(self, samples: int) -> None:
        self.calls.append(-samples)

    def run(self, samples: int, deadline: float | None = None) -> int:
        self.calls.append(samples)
        return samples

    def close(self) -> None:
        self.closed = True


class FixedCounter:
    def reset(self) -> None:
        pass

    def read(self) -> float:
        return 0.75


def test_measure_workload_warms_up_then_repeats_and_closes() -> None:
    fake = CountingWorkload()
    result = measure_workload(fake, 40, FixedCounter(), repeats=3, min_samples=4)
    # prepare(40), one batch of warm-up, a pilot of a quarter, three timed runs
    assert fake.calls == [-40, 4, 10, 40, 40, 40]
    assert fake.closed
    assert result.samples == 40
    assert result.utilization == 0.75
    assert result.intensity == pytest.approx(40 / result.seconds)


def test_measure_workload_closes_on_interrupt() -> None:
    fake = CountingWorkload()

    def boom(samples: int, deadline: float | None = None) -> int:
        raise KeyboardInterrupt

    fake.run = boom  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        measure_workload(fake, 10, FixedCounter())
    assert fake.closed


# ---------------------------------------------------------------- the sampler


def _fake_clock(monkeypatch: pytest.MonkeyPatch, clock: Iterator[float]) -> None:
    """Give the sampler module a scripted ``time.perf_counter`` (the real one is untouched)."""
    monkeypatch.setattr(sampler_mod, "time", SimpleNamespace(perf_counter=lambda: next(clock)))


class ScriptedCounter:
    def __init__(self, values: list[float]) -> None:
        self.values = values
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def read(self) -> float:
        return self.values.pop(0) if self.values else 0.0


def test_sampler_mean_is_time_weighted_and_clipped(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([1.0, 3.0, 4.0])  # three readings at 1, 3 and 4 s after a start at 0
    _fake_clock(monkeypatch, clock)
    s = UtilizationSampler(ScriptedCounter([0.5, 2.0, -1.0]), interval=1.0)
    s._last = 0.0
    s._take()
    s._take()
    s._take()
    # (1 * 0.5 + 2 * 1.0 (clipped) + 1 * 0.0 (clipped)) / 4
    assert s.readings == ((1.0, 0.5), (2.0, 1.0), (1.0, 0.0))
    assert s.utilization == pytest.approx(2.5 / 4)


def test_sampler_thread_reads_until_stopped() -> None:
    counter = ScriptedCounter([0.2] * 1000)
    s = UtilizationSampler(counter, interval=0.001).start()
    with pytest.raises(RuntimeError, match="already started"):
        s.start()
    assert s.stop() == pytest.approx(0.2)
    assert counter.resets == 1
    assert len(s.readings) >= 1
    assert s.stop() == pytest.approx(0.2)  # idempotent


def test_sampler_rejects_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval must be > 0, got"):
        UtilizationSampler(FixedCounter(), interval=0)


def test_memory_counter_is_bytes_over_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_clock(monkeypatch, iter([10.0, 10.0, 12.0]))
    counter = MemoryCounter(reference_bandwidth=100.0)
    counter.reset()
    counter.add(50)
    counter.add(30)
    assert counter.read() == pytest.approx(80 / (2.0 * 100.0))
    with pytest.raises(ValueError, match="reference_bandwidth must be > 0"):
        MemoryCounter(0.0)


def test_cpu_counter_reads_a_share() -> None:
    counter = CpuCounter()
    counter.reset()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass
    assert 0.0 <= counter.read() <= 1.0


def test_disk_counter_takes_the_busiest_device(monkeypatch: pytest.MonkeyPatch) -> None:
    class Io:
        def __init__(self, busy_ms: int) -> None:
            self.busy_time = busy_ms

    readings = iter([{"vda": Io(0), "vdb": Io(100)}, {"vda": Io(500), "vdb": Io(200)}])
    fake = SimpleNamespace(disk_io_counters=lambda perdisk: next(readings), Process=psutil.Process)
    monkeypatch.setattr(sampler_mod, "psutil", fake)
    _fake_clock(monkeypatch, iter([0.0, 1.0]))
    counter = DiskCounter()
    assert counter.has_busy_time
    assert counter.read() == pytest.approx(0.5)  # vda: 500 ms busy in 1 s


def test_disk_counter_falls_back_to_off_cpu_share(monkeypatch: pytest.MonkeyPatch) -> None:
    class Times:
        def __init__(self, cpu: float) -> None:
            self.user, self.system = cpu, 0.0

    class Proc:
        def __init__(self) -> None:
            self.values = iter([Times(1.0), Times(1.25)])

        def cpu_times(self) -> Times:
            return next(self.values)

    fake = SimpleNamespace(disk_io_counters=lambda perdisk: None, Process=Proc)
    monkeypatch.setattr(sampler_mod, "psutil", fake)
    _fake_clock(monkeypatch, iter([0.0, 1.0]))
    counter = DiskCounter()
    assert not counter.has_busy_time
    assert counter.read() == pytest.approx(0.75)  # 0.25 s on CPU in 1 s of wall time


def test_disk_counter_falls_back_when_no_device_was_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    class Io:
        busy_time = 7  # unchanged: the folder is on tmpfs or a network file system

    class Times:
        def __init__(self, cpu: float) -> None:
            self.user, self.system = cpu, 0.0

    class Proc:
        def __init__(self) -> None:
            self.values = iter([Times(0.0), Times(0.5)])

        def cpu_times(self) -> Times:
            return next(self.values)

    fake = SimpleNamespace(disk_io_counters=lambda perdisk: {"vda": Io()}, Process=Proc)
    monkeypatch.setattr(sampler_mod, "psutil", fake)
    _fake_clock(monkeypatch, iter([0.0, 2.0]))
    counter = DiskCounter()
    assert counter.read() == pytest.approx(0.75)  # 0.5 s on CPU in 2 s


class ClockedWorkload:
    """A fake workload on a fake clock: each sample costs ``cost`` seconds."""

    name = "clocked"
    resource = "cpu"

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self.now = 0.0
        self.calls: list[int] = []

    def prepare(self, samples: int) -> None:
        pass

    def run(self, samples: int, deadline: float | None = None) -> int:
        done = 0
        while done < samples:
            self.now += self.cost
            done += 1
            if deadline is not None and self.now > deadline:
                break
        self.calls.append(done)
        return done

    def close(self) -> None:
        pass


def _clocked(monkeypatch: pytest.MonkeyPatch, cost: float) -> ClockedWorkload:
    fake = ClockedWorkload(cost)
    monkeypatch.setattr(probe_mod, "time", SimpleNamespace(perf_counter=lambda: fake.now))
    return fake


def test_measure_shrinks_a_slow_workload_to_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _clocked(monkeypatch, cost=2**-7)  # powers of two: the fake clock adds exactly
    result = measure_workload(fake, 512, FixedCounter(), 3, run_budget=1.0, min_samples=16)
    # pilot: 128 samples in 1 s -> 512 would take 4 s > 1 s -> 512 / 4 = 128 samples
    assert fake.calls == [16, 128, 128, 128, 128]
    assert result.samples == 128
    assert result.seconds == 1.0
    assert result.intensity == 128.0


def test_measure_grows_a_fast_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _clocked(monkeypatch, cost=2**-13)
    result = measure_workload(
        fake, 512, FixedCounter(), 1, run_budget=1.0, min_samples=16, max_growth=16
    )
    # pilot: 128 samples in 1/64 s -> 512 take 1/16 s < 1/4 -> grow 0.5 / (1/16) = 8 times
    assert fake.calls == [16, 128, 4096]
    assert result.samples == 4096
    assert result.seconds == 0.5
    capped = _clocked(monkeypatch, cost=2**-30)
    measure_workload(capped, 512, FixedCounter(), 1, run_budget=1.0, min_samples=16, max_growth=16)
    assert capped.calls[-1] == 512 * 16


def test_measure_cuts_runs_at_the_hard_limit_and_stops_repeating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _clocked(monkeypatch, cost=1.0)
    result = measure_workload(fake, 8, FixedCounter(), 3, warmup=False, run_budget=1.0)
    # each run is cut after the sample that passes 2 s; after two runs (6 s > 1.5 * 1 * 3 s)
    # the repeats stop; the report counts the samples done
    assert fake.calls == [3, 3]
    assert result.samples == 3
    assert result.seconds == 3.0
    slow = _clocked(monkeypatch, cost=0.5)
    measure_workload(slow, 16, FixedCounter(), 1, run_budget=1.0, min_samples=1)
    # warm-up 1; pilot of 4 cut after the sample that passes 1 s (3 samples, 1.5 s, so 16
    # project to 8 s); the timed run shrinks to 16 / 8 = 2 samples
    assert slow.calls == [1, 3, 2]


def test_train_workloads_leave_the_global_rng_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    dense = DenseWorkload("cpu", batch=4)
    dense.prepare(8)
    dense.run(8)
    assert torch.equal(torch.rand(3), expected)


def test_cpu_counter_is_busy_share_without_double_counted_guest_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from collections import namedtuple

    Times = namedtuple("Times", "user nice system idle iowait guest guest_nice")
    readings = iter([Times(10, 0, 5, 80, 5, 2, 0), Times(40, 0, 15, 100, 5, 12, 0)])
    monkeypatch.setattr(sampler_mod, "psutil", SimpleNamespace(cpu_times=lambda: next(readings)))
    counter = CpuCounter()
    # total 100 -> 160 (guest is inside user), busy (not idle, not iowait) 15 -> 55
    assert counter.read() == pytest.approx(40 / 60)


# ---------------------------------------------------------------- sizing hooks (train workloads)


def test_resize_changes_the_work_per_step() -> None:
    dense = DenseWorkload("cpu", batch=4)
    dense.prepare(4)
    dense.resize(16)
    assert dense.batch == 16
    assert dense._x is not None
    assert dense._x.shape == (16, 784)
    assert dense.run(40) == 40  # steps of 16, 16, 8
    dense.close()
    with pytest.raises(RuntimeError, match="prepare"):
        dense.resize(8)
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        DenseWorkload("cpu", batch=0)
    with pytest.raises(ValueError, match="precision must be one of"):
        DenseWorkload("cpu", precision="fp8")  # type: ignore[arg-type]


def test_out_of_device_memory_becomes_memory_error(monkeypatch: pytest.MonkeyPatch) -> None:
    dense = DenseWorkload("cpu", batch=4)
    dense.prepare(4)

    def oom(*args: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(dense, "_make_batch", oom)
    with pytest.raises(MemoryError, match="out of device memory at batch 1048576"):
        dense.resize(1 << 20)
    assert dense.batch == 4  # unchanged; the batch was dropped and must be resized again
    assert dense._x is None
    conv = ConvWorkload("cpu", batch=2)
    conv.prepare(2)
    monkeypatch.setattr(conv, "_steps", oom)
    with pytest.raises(MemoryError, match="cpu-conv: out of device memory"):
        conv.run(4)
    other = DenseWorkload("cpu", batch=2)
    other.prepare(2)

    def broken(*args: object) -> None:
        raise RuntimeError("an unrelated failure")

    monkeypatch.setattr(other, "_steps", broken)
    with pytest.raises(RuntimeError, match="unrelated"):
        other.run(2)


@pytest.mark.parametrize(
    ("device", "precision", "bf16", "enabled"),
    [
        ("cuda", "auto", True, True),
        ("cuda", "auto", False, False),  # no bf16 on the device (pre-Ampere): fp32
        ("cuda", "fp32", True, False),
        ("cpu", "auto", True, False),  # the cpu workloads keep fp32
    ],
)
def test_bf16_autocast_only_on_a_cuda_device_that_has_it(
    monkeypatch: pytest.MonkeyPatch, device: str, precision: str, bf16: bool, enabled: bool
) -> None:
    from contextlib import nullcontext

    from flower_edge.profiling.workloads import _precision

    calls: list[tuple[str, object, bool]] = []

    def autocast(device_type: str, dtype: object = None, enabled: bool = True) -> nullcontext[None]:
        calls.append((device_type, dtype, enabled))
        return nullcontext()

    monkeypatch.setattr(torch, "autocast", autocast)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    with _precision(SimpleNamespace(type=device), precision):  # type: ignore[arg-type]
        pass
    assert calls == [("cuda", torch.bfloat16, enabled)]


def test_a_batch_projected_past_half_the_device_memory_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flower_edge.profiling.workloads import MEMORY_SHARE, fits_memory

    assert MEMORY_SHARE == 0.5
    assert fits_memory(500, 1000.0, 1_000_000, 0.5)
    assert not fits_memory(501, 1000.0, 1_000_000, 0.5)
    dense = DenseWorkload("cpu", batch=4)
    dense.prepare(4)
    dense.run(4)
    assert dense.bytes_per_sample is None  # measured on CUDA only
    dense.resize(1 << 12)  # no projection on the CPU
    made: list[int] = []
    monkeypatch.setattr(dense, "_make_batch", made.append)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=10**6)
    )
    dense.device_name, dense.bytes_per_sample = "cuda:0", 1000.0  # as after a run on a card
    with pytest.raises(MemoryError, match=r"batch 501 would take about .* over 50%"):
        dense.resize(501)
    dense.resize(500)
    assert made == [500]
    assert dense.batch == 500


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("cls", [DenseWorkload, ConvWorkload])
def test_the_training_step_is_torch_optim_sgd(
    cls: type[DenseWorkload], foreach: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The written-out step gives the parameters ``torch.optim.SGD(lr=SGD_LR)`` gives.

    Also without ``torch._foreach_add_`` (a private function a future torch may drop).
    """
    if not foreach:
        monkeypatch.delattr(torch, "_foreach_add_")
    workload = cls("cpu", batch=8)
    workload.prepare(8)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        reference, _ = workload._build()  # the same initial weights as the workload's model
    assert workload._x is not None
    assert workload._y is not None
    x, y = workload._x.clone(), workload._y.clone()
    workload.run(24)  # three steps of the batch of 8
    opt = torch.optim.SGD(reference.parameters(), lr=SGD_LR)
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(reference(x), y).backward()  # type: ignore[no-untyped-call]
        opt.step()
    assert workload._model is not None
    for got, want in zip(workload._model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    workload.close()


def test_a_training_workload_does_not_import_torch_dynamo() -> None:
    """torch.optim's first use imports torch._dynamo (seconds): the quick profile avoids it."""
    code = (
        "import sys\n"
        "from flower_edge.profiling.workloads import DenseWorkload\n"
        "w = DenseWorkload('cpu', batch=4)\n"
        "w.prepare(8)\n"
        "w.run(8)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip() == "False"
