"""GPU sizing (issue 12): the growth policy against brute force, the timed window, with fakes.

No GPU is needed: a fake launch-bound device on a fake clock stands for the card (a step of
``w`` samples costs ``max(launch, w / peak)`` seconds, busy ``w / peak`` of them), and a fake
window reads its exact busy share. The same driver also runs a real workload on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from conftest import TINY, check_contract
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flower_edge.errors import ConfigError
from flower_edge.profiling import PLANS, HostProbe, ProfilePlan
from flower_edge.profiling import probe as probe_mod
from flower_edge.profiling.gpu import GpuInfo
from flower_edge.profiling.probe import measure_sized_workload
from flower_edge.profiling.report import WorkloadResult
from flower_edge.profiling.sizing import (
    STOP_REASONS,
    SizingOutcome,
    SizingPolicy,
    SizingStep,
    choose,
    decide,
    ladder,
    size_workload,
    timed_capacity,
)
from flower_edge.profiling.window import CounterWindow

torch = pytest.importorskip("torch")


def policy(**overrides: object) -> SizingPolicy:
    values: dict[str, object] = {
        "start": 16,
        "max_work": 1 << 16,
        "step_budget": 0.01,
        "total_budget": 1.0,
    }
    values.update(overrides)
    return SizingPolicy(**values)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the policy by hand


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("start", 0, "start must be an integer >= 1, got 0"),
        ("start", 1.5, "start must be an integer >= 1, got 1.5"),
        ("max_work", 8, "max_work must be an integer >= 16, got 8"),
        ("factor", 1, r"factor must be an integer in \[2, 64\], got 1"),
        ("step_budget", 0.0, r"step_budget \(seconds\) must be > 0, got 0.0"),
        ("total_budget", math.inf, r"total_budget \(seconds\) must be a finite number > 0"),
        ("target_utilization", 0.0, r"target_utilization must be in \(0, 1\], got 0.0"),
        ("min_gain", 5.0, r"min_gain must be in \[1, 4\], got 5.0"),
    ],
)
def test_policy_rejects_bad_settings(field: str, value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        policy(**{field: value})


def test_ladder_is_geometric_up_to_the_ceiling() -> None:
    assert ladder(policy(start=3, max_work=200, factor=4)) == [3, 12, 48, 192]
    assert ladder(policy(start=16, max_work=16)) == [16]


def step(work: int, rate: float, util: float | None = None, overhead: float = 0.0) -> SizingStep:
    return SizingStep(work, round(rate), 1.0, util, overhead)


def test_decide_names_each_reason() -> None:
    p = policy(step_budget=1.0, total_budget=10.0)
    assert decide(p, [step(16, 1000)]) is None
    assert decide(p, [step(16, 1000), SizingStep(64, 0, 0.0)]) == "failed"
    assert decide(p, [step(16, 1000, util=0.95)]) == "utilization"
    assert decide(p, [step(16, 1000, util=0.85)]) is None
    assert decide(p, [step(16, 1000), step(64, 1090)]) == "plateau"  # < 1.1x the best
    assert decide(p, [step(16, 1000), step(64, 1100)]) is None
    assert decide(policy(max_work=63, step_budget=1.0), [step(16, 1000)]) == "ceiling"
    # a step of 16 samples at 1000 samples/s takes 16 ms; the next size 64 ms > 50 ms
    assert decide(policy(step_budget=0.05), [step(16, 1000)]) == "step-budget"
    assert decide(policy(step_budget=1.0, total_budget=0.5), [step(16, 1000, overhead=0.5)]) == (
        "total-budget"
    )
    with pytest.raises(ValueError, match="at least one"):
        decide(p, [])


def test_choose_takes_the_highest_rate_and_the_smaller_work_on_a_tie() -> None:
    steps = [step(16, 1000), step(64, 4000), step(256, 4000), SizingStep(1024, 0, 0.0)]
    assert choose(steps).work == 64
    with pytest.raises(ValueError, match="smallest work failed"):
        choose([SizingStep(16, 0, 0.0)])


def test_timed_capacity_is_whole_steps_filling_the_budget() -> None:
    # 1000 samples/s, steps of 64 samples (0.064 s): 0.5 s hold 7 whole steps
    assert timed_capacity(SizingStep(64, 1000, 1.0), 0.5) == 7 * 64
    assert timed_capacity(SizingStep(64, 1000, 1.0), 0.01) == 64  # at least one step
    with pytest.raises(ValueError, match="failed"):
        timed_capacity(SizingStep(64, 0, 0.0), 1.0)
    with pytest.raises(ConfigError, match=r"run_budget \(seconds\) must be > 0"):
        timed_capacity(SizingStep(64, 1000, 1.0), 0.0)


@settings(deadline=None)  # no timing in tests: a loaded host must not fail it
@given(
    work=st.integers(1, 1 << 16),
    samples=st.integers(1, 10**6),
    seconds=st.floats(1e-4, 10.0),
    steps=st.floats(0.0, 2000.0),
)
def test_timed_capacity_against_brute_force(
    work: int, samples: int, seconds: float, steps: float
) -> None:
    chosen = SizingStep(work, samples, seconds)
    budget = steps * chosen.step_seconds
    assume(budget > 0)
    assume(abs(steps - round(steps)) > 1e-6)  # not on a float edge between two counts
    # brute force: the most whole steps whose projected time fits the budget, at least one
    best = 1
    while (best + 1) * work / chosen.rate <= budget:
        best += 1
    assert timed_capacity(chosen, budget) == best * work


# ---------------------------------------------------------------- brute-force reference


def reference(p: SizingPolicy, table: dict[int, SizingStep]) -> tuple[list[int], str, int]:
    """Measure every size, then find the first prefix whose last step meets a stop rule."""
    sizes = [p.start * p.factor**k for k in range(64) if p.start * p.factor**k <= p.max_work]
    measured = [table[w] for w in sizes]
    for k in range(1, len(measured) + 1):
        prefix = measured[:k]
        last = prefix[-1]
        earlier = [s.rate for s in prefix[:-1] if not s.failed]
        ran = not last.failed
        rules = {
            "failed": last.failed,
            "utilization": ran
            and last.utilization is not None
            and last.utilization >= p.target_utilization,
            "plateau": ran and bool(earlier) and last.rate < p.min_gain * max(earlier),
            "ceiling": k == len(sizes),
            "step-budget": last.work / max(last.rate, 1e-300) * p.factor > p.step_budget,
            "total-budget": sum(s.seconds + s.overhead for s in prefix) >= p.total_budget,
        }
        hits = [r for r in STOP_REASONS if rules[r]]
        if hits:
            best = max((s for s in prefix if not s.failed), key=lambda s: (s.rate, -s.work))
            return [s.work for s in prefix], hits[0], best.work
    raise AssertionError("the ladder always ends")  # pragma: no cover


level = st.tuples(
    st.integers(1, 10**6),  # samples
    st.floats(1e-4, 1.0),  # seconds
    st.one_of(st.none(), st.floats(0.0, 1.0)),  # utilisation
    st.floats(0.0, 0.5),  # overhead
    st.booleans(),  # fails (ignored for the first size)
)


@settings(max_examples=300, deadline=None)
@given(
    start=st.integers(1, 64),
    factor=st.sampled_from([2, 3, 4, 8]),
    depth=st.integers(0, 7),
    step_budget=st.floats(1e-3, 100.0),
    total_budget=st.floats(1e-3, 20.0),
    target=st.floats(0.05, 1.0),
    gain=st.floats(1.0, 2.0),
    levels=st.lists(level, min_size=8, max_size=8),
    fail_rate=st.sampled_from([0.0, 0.2]),
)
def test_size_workload_matches_the_brute_force_reference(
    start: int,
    factor: int,
    depth: int,
    step_budget: float,
    total_budget: float,
    target: float,
    gain: float,
    levels: list[tuple[int, float, float | None, float, bool]],
    fail_rate: float,
) -> None:
    p = SizingPolicy(start, start * factor**depth, step_budget, total_budget, factor, target, gain)
    table: dict[int, SizingStep] = {}
    for k, (samples, seconds, util, overhead, fails) in enumerate(levels):
        work = start * factor**k
        failed = k > 0 and fails and fail_rate > 0
        table[work] = (
            SizingStep(work, 0, 0.0, None, overhead)
            if failed
            else SizingStep(work, samples, seconds, util, overhead)
        )
    asked: list[int] = []

    def measure(work: int) -> SizingStep:
        asked.append(work)
        return table[work]

    outcome = size_workload(p, measure)
    sizes, reason, chosen = reference(p, table)
    assert asked == sizes
    assert [s.work for s in outcome.steps] == sizes
    assert outcome.reason == reason
    assert outcome.chosen.work == chosen
    # invariants that hold whatever the rules' order
    assert max(asked) <= p.max_work
    assert all(s.rate <= outcome.chosen.rate for s in outcome.steps)
    assert math.fsum(s.seconds + s.overhead for s in outcome.steps[:-1]) < p.total_budget
    for before in outcome.steps[:-1]:
        assert before.step_seconds * factor <= step_budget  # no size past the step budget


def test_a_failing_first_size_is_an_error() -> None:
    with pytest.raises(ValueError, match="smallest work failed"):
        size_workload(policy(), lambda w: SizingStep(w, 0, 0.0))
    with pytest.raises(ValueError, match="returned a step of work 17"):
        size_workload(policy(), lambda w: SizingStep(w + 1, 10, 1.0))


# ---------------------------------------------------------------- a fake launch-bound GPU


class FakeGpu:
    """A launch-bound device on a fake clock.

    A step of ``w`` samples takes ``max(launch, w / peak)`` seconds of wall time, of which
    ``w / peak`` the device is busy (at the end of the step). A warm-up run (no deadline)
    first spends ``warmup_idle`` seconds on the host with the device idle. Batches above
    ``oom_above`` do not fit.
    """

    name = "gpu-fake"
    resource = "gpu"

    def __init__(
        self,
        launch: float = 1e-4,
        peak: float = 1e7,
        batch: int = 16,
        warmup_idle: float = 0.0,
        oom_above: int | None = None,
    ) -> None:
        self.launch, self.peak, self.batch = launch, peak, batch
        self.warmup_idle, self.oom_above = warmup_idle, oom_above
        self.now = 0.0
        self.busy: list[tuple[float, float]] = []
        self.events: list[tuple[str, float]] = []
        self.closed = False

    def prepare(self, samples: int) -> None:
        self.events.append(("prepare", self.now))

    def resize(self, batch: int) -> None:
        if self.oom_above is not None and batch > self.oom_above:
            raise MemoryError(f"out of device memory at batch {batch}")
        self.batch = batch
        self.events.append(("resize", self.now))

    def run(self, samples: int, deadline: float | None = None) -> int:
        self.events.append(("timed" if deadline is not None else "warm-up", self.now))
        if deadline is None:
            self.now += self.warmup_idle
        done = 0
        while done < samples:
            n = min(self.batch, samples - done)
            compute = n / self.peak
            wall = max(self.launch, compute)
            self.busy.append((self.now + wall - compute, self.now + wall))
            self.now += wall
            done += n
            if deadline is not None and done < samples and self.now > deadline:
                break
        return done

    def close(self) -> None:
        self.closed = True

    def busy_share(self, t0: float, t1: float) -> float:
        """Brute force: the busy time inside ``[t0, t1]`` over its length."""
        busy = math.fsum(max(0.0, min(b, t1) - max(a, t0)) for a, b in self.busy)
        return busy / (t1 - t0)


class FakeWindow:
    """Reads the fake device's exact busy share; ``None`` for windows under ``shortest``."""

    def __init__(self, gpu: FakeGpu, shortest: float = 0.0) -> None:
        self.gpu = gpu
        self.shortest = shortest
        self.windows: list[tuple[float, float]] = []
        self._start = 0.0

    def begin(self) -> None:
        self._start = self.gpu.now
        self.gpu.events.append(("begin", self.gpu.now))

    def end(self) -> float | None:
        self.windows.append((self._start, self.gpu.now))
        self.gpu.events.append(("end", self.gpu.now))
        if self.gpu.now - self._start < self.shortest:
            return None
        return self.gpu.busy_share(self._start, self.gpu.now)


def sized(
    gpu: FakeGpu, p: SizingPolicy, window: FakeWindow, repeats: int = 3
) -> tuple[WorkloadResult, SizingOutcome]:
    return measure_sized_workload(
        gpu, p, window, repeats, run_budget=0.1, probe_seconds=0.02, clock=lambda: gpu.now
    )


@pytest.mark.parametrize(("shortest", "reason"), [(0.0, "utilization"), (0.05, "plateau")])
def test_sizing_loads_a_launch_bound_device(shortest: float, reason: str) -> None:
    # launch-bound below 1000 samples per step (1e-4 s launch, 1e7 samples/s peak)
    gpu = FakeGpu(warmup_idle=0.05)
    window = FakeWindow(gpu, shortest)
    result, outcome = sized(gpu, policy(), window)
    assert outcome.reason == reason
    # equal rates at 1024 and 4096 up to the fake clock's rounding
    assert outcome.chosen.work in (1024, 4096)
    assert [s.work for s in outcome.steps] == ([16, 64, 256, 1024] + ([4096] * (shortest > 0)))
    assert result.utilization >= 0.8
    assert result.intensity >= 0.8 * gpu.peak
    assert result.samples % outcome.chosen.work == 0
    assert gpu.closed
    # the timed window: after the last warm-up, around the timed runs, and nothing else
    timed_start, timed_stop = window.windows[-1]
    assert result.utilization == pytest.approx(gpu.busy_share(timed_start, timed_stop))
    last_warmup = max(t for kind, t in gpu.events if kind == "warm-up")
    assert last_warmup + gpu.warmup_idle <= timed_start
    # the unsized workload (the first batch only) on the same device, for comparison
    base = FakeGpu(warmup_idle=0.05)
    flat, _ = sized(base, policy(max_work=16), FakeWindow(base))
    assert flat.utilization < 0.2
    gain = (result.utilization * result.intensity) / (flat.utilization * flat.intensity)
    assert gain >= 20  # issue 12's target ratio, reached here by sizing alone


def test_every_window_covers_one_timed_run_only() -> None:
    gpu = FakeGpu(warmup_idle=0.05)
    _, outcome = sized(gpu, policy(), FakeWindow(gpu), repeats=3)
    kinds = [kind for kind, _ in gpu.events]
    assert kinds[:2] == ["prepare", "warm-up"]  # one-time initialisation
    # each size: resize, warm-up, then a window around exactly one timed run
    sizes = len(outcome.steps)
    assert kinds[2 : 2 + 5 * sizes] == ["resize", "warm-up", "begin", "timed", "end"] * sizes
    # the timed phase: resize, warm-up, one window around the three repeats
    assert kinds[2 + 5 * sizes :] == ["resize", "warm-up", "begin"] + ["timed"] * 3 + ["end"]


def test_out_of_memory_stops_the_growth_at_the_last_size_that_fits() -> None:
    gpu = FakeGpu(oom_above=256)
    result, outcome = sized(gpu, policy(), FakeWindow(gpu, 0.05))
    assert outcome.reason == "failed"
    assert [s.work for s in outcome.steps] == [16, 64, 256, 1024]
    assert outcome.steps[-1].failed
    assert outcome.chosen.work == 256
    assert gpu.batch == 256
    assert result.samples % 256 == 0
    tight = FakeGpu(oom_above=8)
    with pytest.raises(MemoryError):
        sized(tight, policy(), FakeWindow(tight))
    assert tight.closed


def test_budgets_bound_the_sizing_of_a_slow_device() -> None:
    # an edge GPU: 2e4 samples/s, so a step of 64 samples already takes 3.2 ms
    gpu = FakeGpu(launch=1e-4, peak=2e4)
    _, outcome = sized(gpu, policy(step_budget=0.01), FakeWindow(gpu, 0.05))
    assert outcome.reason in ("plateau", "step-budget")
    assert all(s.work <= 256 for s in outcome.steps)
    gpu = FakeGpu()
    _, outcome = sized(gpu, policy(total_budget=0.03), FakeWindow(gpu, 0.05))
    assert outcome.reason == "total-budget"
    assert len(outcome.steps) == 2  # two sizes of 0.02 s each pass 0.03 s


def test_no_utilisation_reading_counts_as_zero(caplog: pytest.LogCaptureFixture) -> None:
    gpu = FakeGpu()
    result, _ = sized(gpu, policy(), FakeWindow(gpu, shortest=1e9))
    assert result.utilization == 0.0
    assert "no utilisation reading" in caplog.text


# ---------------------------------------------------------------- the CPU backend


class FixedCounter:
    def __init__(self, value: float = 0.9) -> None:
        self.value = value
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def read(self) -> float:
        return self.value


def test_the_same_sizing_runs_a_real_workload_on_the_cpu() -> None:
    from flower_edge.profiling.workloads import DenseWorkload

    torch.set_num_threads(1)
    dense = DenseWorkload("cpu", batch=2)
    counter = FixedCounter()
    p = SizingPolicy(start=2, max_work=32, step_budget=0.05, total_budget=0.3)
    result, outcome = measure_sized_workload(
        dense, p, CounterWindow(counter), 2, run_budget=0.05, probe_seconds=0.02
    )
    assert outcome.reason in STOP_REASONS
    assert [s.work for s in outcome.steps] == ladder(p)[: len(outcome.steps)]
    assert outcome.chosen.work in ladder(p)
    assert result.name == "cpu-dense"
    assert result.samples % outcome.chosen.work == 0  # whole steps, even when cut
    assert result.utilization == 0.9
    assert counter.resets == len(outcome.steps) + 1  # one window per size, one timed
    assert dense._model is None  # closed


# ---------------------------------------------------------------- the probe, with a fake GPU


def test_probe_sizes_both_gpu_workloads_with_a_fake_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flower_edge.profiling.workloads import ConvWorkload, DenseWorkload

    tiny = dataclasses.replace(
        TINY,
        gpu_batches=(2, 2),
        gpu_max_batches=(8, 8),
        gpu_run_budget=0.02,
        gpu_sizing_budget=0.05,
    )
    monkeypatch.setitem(PLANS, "quick", tiny)
    fake = GpuInfo(True, "Fake GPU", None, 0, 1 << 30, handle=object())
    monkeypatch.setattr(probe_mod, "detect_gpu", lambda: fake)
    monkeypatch.setattr(probe_mod, "nvml_shutdown", lambda: None)

    def on_the_cpu(gpu: GpuInfo, plan: ProfilePlan) -> list[object]:
        dense, conv = DenseWorkload("cpu", plan.gpu_batches[0]), ConvWorkload("cpu", 2)
        dense.name, conv.name = "gpu-dense", "gpu-conv"  # the CPU stands in for the card
        return [dense, conv]

    windows: list[GpuInfo] = []

    def window(gpu: GpuInfo) -> CounterWindow:
        windows.append(gpu)
        return CounterWindow(FixedCounter(0.85))

    monkeypatch.setattr(probe_mod, "_gpu_workloads", on_the_cpu)
    monkeypatch.setattr(probe_mod, "_gpu_window", window)
    torch.set_num_threads(1)
    probe = HostProbe(tmp_path)
    report = probe.profile("quick")
    gpu = report.resources["gpu"]
    assert gpu.available
    assert [w.name for w in gpu.workloads] == ["gpu-dense", "gpu-conv"]
    assert all(w.utilization == 0.85 for w in gpu.workloads)
    assert sorted(probe.sizing) == ["gpu-conv", "gpu-dense"]
    for w in gpu.workloads:
        assert w.samples % probe.sizing[w.name].chosen.work == 0
    assert windows == [fake, fake]
    assert check_contract(report.to_dict()) == []


def test_plan_gpu_settings_are_validated() -> None:
    base = {
        "cpu_samples": (1, 1),
        "memory_samples": (1, 1),
        "memory_buffer_bytes": 1 << 20,
        "disk_samples": (1, 1),
        "repeats": 1,
        "run_budget": 1.0,
    }
    with pytest.raises(ConfigError, match="gpu_max_batches must be two integers >= gpu_batches"):
        ProfilePlan(**base, gpu_batches=(256, 128), gpu_max_batches=(128, 128))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"gpu_run_budget \(seconds\) must be > 0"):
        ProfilePlan(**base, gpu_run_budget=0.0)  # type: ignore[arg-type]
    policy_ = PLANS["full"].gpu_policy(1)
    assert (policy_.start, policy_.max_work) == (128, 1 << 16)
    assert policy_.step_budget == PLANS["full"].gpu_run_budget / 8


def test_sizing_outcome_is_json_ready() -> None:
    gpu = FakeGpu()
    _, outcome = sized(gpu, policy(), FakeWindow(gpu))
    data = outcome.to_dict()
    assert data["chosen_work"] == 1024
    steps = data["steps"]
    assert isinstance(steps, list)
    assert [s["work"] for s in steps] == [16, 64, 256, 1024]
