"""Utilisation over a timed window: NVML's periodic samples against brute-force integration."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.profiling.window import (
    DEFAULT_NVML_PERIOD,
    CounterWindow,
    NvmlWindow,
    sample_period,
    window_mean,
)


def busy_between(busy: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Brute force: seconds of ``[t0, t1]`` inside the busy intervals (disjoint)."""
    return math.fsum(max(0.0, min(b, t1) - max(a, t0)) for a, b in busy)


def nvml_samples(
    busy: list[tuple[float, float]], phase: float, period: float, count: int
) -> list[tuple[float, float]]:
    """What NVML records: at ``phase + k * period`` the busy share of the period before it."""
    out = []
    for k in range(1, count + 1):
        t = phase + k * period
        out.append((t, busy_between(busy, t - period, t) / period))
    return out


def test_sample_period_is_the_median_spacing() -> None:
    assert sample_period([0.0, 0.2, 0.4, 0.9]) == pytest.approx(0.2)
    assert sample_period([1.0]) == DEFAULT_NVML_PERIOD
    assert sample_period([], default=1.0) == 1.0


@settings(max_examples=200, deadline=None)
@given(
    cuts=st.lists(st.floats(0.0, 10.0), min_size=2, max_size=20),
    phase=st.floats(0.0, 0.5),
    period=st.floats(0.1, 1.0),
    start=st.floats(0.0, 4.0),
    length=st.floats(2.0, 5.0),
)
def test_window_mean_is_the_busy_share_of_the_periods_inside(
    cuts: list[float], phase: float, period: float, start: float, length: float
) -> None:
    edges = sorted(cuts)
    busy = [(edges[i], edges[i + 1]) for i in range(0, len(edges) - 1, 2)]
    samples = nvml_samples(busy, phase, period, count=int(12 / period))
    stop = start + length
    inside = [t for t, _ in samples if t - period >= start and t <= stop]
    if not inside:  # the window is at least two periods long: a full period lies inside
        raise AssertionError((start, stop, period))
    covered_from, covered_to = min(inside) - period, max(inside)
    expected = busy_between(busy, covered_from, covered_to) / (covered_to - covered_from)
    assert window_mean(samples, start, stop, period) == pytest.approx(expected, abs=1e-9)
    assert start <= covered_from
    assert covered_to <= stop


def test_work_before_the_window_does_not_count() -> None:
    # idle until 1.0 s, busy from then on; periods of 0.25 s
    samples = nvml_samples([(1.0, 9.0)], 0.0, 0.25, 20)
    assert window_mean(samples, 1.0, 2.0, 0.25) == 1.0
    # a background sampler's mean over the same readings would include the idle lead-in
    assert window_mean(samples, 0.0, 2.0, 0.25) == pytest.approx(0.5)


def test_a_window_shorter_than_a_period_weighs_samples_by_overlap() -> None:
    samples = [(1.0, 0.2), (2.0, 0.8)]  # periods (0, 1] and (1, 2]
    # window [0.75, 1.5]: 0.25 s of the first period, 0.5 s of the second
    assert window_mean(samples, 0.75, 1.5, 1.0) == pytest.approx((0.25 * 0.2 + 0.5 * 0.8) / 0.75)
    assert window_mean(samples, 5.0, 6.0, 1.0) is None
    with pytest.raises(ValueError, match=r"period \(seconds\) must be > 0, got"):
        window_mean(samples, 0.0, 1.0, 0.0)


def test_values_are_clipped() -> None:
    assert window_mean([(1.0, 1.5), (2.0, 1.5)], 0.0, 2.0, 1.0) == 1.0


class FakeNvml:
    """Fake pynvml: timestamped samples (us) and an instantaneous reading."""

    def __init__(self, samples: list[tuple[float, int]] | None, instant: int | None) -> None:
        self.samples = samples
        self.instant = instant
        self.asked: list[int] = []

    def nvmlDeviceGetSamples(  # noqa: N802
        self, handle: object, kind: int, since_us: int
    ) -> tuple[int, list[SimpleNamespace]]:
        assert kind == 1  # NVML_GPU_UTILIZATION_SAMPLES
        self.asked.append(since_us)
        if self.samples is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        raw = [
            SimpleNamespace(timeStamp=int(t * 1e6), sampleValue=SimpleNamespace(uiVal=u))
            for t, u in self.samples
            if t * 1e6 > since_us
        ]
        return 1, raw

    def nvmlDeviceGetUtilizationRates(self, handle: object) -> SimpleNamespace:  # noqa: N802
        if self.instant is None:
            raise RuntimeError("NVML_ERROR_UNKNOWN")
        return SimpleNamespace(gpu=self.instant, memory=0)


def clock(*times: float) -> Callable[[], float]:
    it = iter(times)
    return lambda: next(it)


def test_nvml_window_reads_the_samples_inside_the_window() -> None:
    # 0 % before 100 s, 90 % from then on, a sample every 0.25 s
    samples = [(99.0 + 0.25 * k, 0 if 99.0 + 0.25 * k <= 100.0 else 90) for k in range(1, 13)]
    nvml = FakeNvml(samples, instant=0)
    window = NvmlWindow("h", nvml, clock(100.0, 101.5))
    window.begin()
    assert window.end() == pytest.approx(0.9)
    assert window.last_source == "samples"
    assert nvml.asked == [int(98.0 * 1e6)]  # two seconds of look-back for the period
    with pytest.raises(RuntimeError, match="begin"):
        window.end()


def test_nvml_window_falls_back_to_the_instantaneous_reading() -> None:
    window = NvmlWindow("h", FakeNvml(None, instant=75), clock(10.0, 11.0))
    window.begin()
    assert window.end() == 0.75
    assert window.last_source == "instant"
    nothing = NvmlWindow("h", FakeNvml(None, instant=None), clock(10.0, 11.0))
    nothing.begin()
    assert nothing.end() is None
    stale = NvmlWindow("h", FakeNvml([(1.0, 50), (2.0, 50)], instant=30), clock(10.0, 11.0))
    stale.begin()
    assert stale.end() == 0.3  # samples from long before the window do not count


def test_counter_window_resets_at_begin_and_reads_at_end() -> None:
    class Counter:
        def __init__(self) -> None:
            self.log: list[str] = []

        def reset(self) -> None:
            self.log.append("reset")

        def read(self) -> float:
            self.log.append("read")
            return 1.25

    counter = Counter()
    window = CounterWindow(counter)
    window.begin()
    assert window.end() == 1.0
    assert counter.log == ["reset", "read"]
