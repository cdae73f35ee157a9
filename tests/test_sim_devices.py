import math

import pytest

from flower_edge.errors import ConfigError, InputError
from flower_edge.timing import DeviceTimer
from simulations.devices import (
    DeviceSpec,
    JobCost,
    PopulationConfig,
    VirtualDevice,
    make_population,
)

COST = JobCost(compute_flops=6e4, memory_bytes=2e4, sample_bytes=256, model_bytes=40_000)


def _device(**spec: float) -> VirtualDevice:
    base = {
        "node": 3,
        "cpu_flops": 1e7,
        "gpu_flops": 0.0,
        "memory_bandwidth": 1e9,
        "disk_bandwidth": 1e8,
        "network_bandwidth": 1e6,
    }
    base.update(spec)
    return VirtualDevice(DeviceSpec(**base), COST, seed=7, noise=0.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("distribution", ["lognormal", "pareto"])
@pytest.mark.parametrize("n", [2, 20, 100])
def test_population_spread_is_exact(distribution: str, n: int) -> None:
    specs = make_population(
        PopulationConfig(num_devices=n, seed=1, distribution=distribution, compute_spread=30)  # type: ignore[arg-type]
    )
    cpu = [s.cpu_flops for s in specs]
    assert max(cpu) / min(cpu) == pytest.approx(30.0)
    assert [s.node for s in specs] == list(range(n))


def test_population_is_seeded() -> None:
    a = make_population(PopulationConfig(num_devices=50, seed=3))
    b = make_population(PopulationConfig(num_devices=50, seed=3))
    c = make_population(PopulationConfig(num_devices=50, seed=4))
    assert a == b
    assert a != c


def test_population_fractions() -> None:
    specs = make_population(
        PopulationConfig(num_devices=100, seed=0, gpu_fraction=0.1, flaky_fraction=0.3)
    )
    assert sum(s.has_gpu for s in specs) == 10
    assert sum(s.flaky for s in specs) == 30
    for s in specs:
        if s.has_gpu:
            assert s.gpu_flops == pytest.approx(8 * s.cpu_flops)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("num_devices", 0, "num_devices must be an integer >= 1"),
        ("compute_spread", 0.5, "compute_spread must be"),
        ("gpu_fraction", 1.5, r"gpu_fraction must be in \[0, 1\], got 1.5"),
        ("distribution", "uniform", "distribution must be one of lognormal, pareto"),
        ("mean_offline", 0.0, "mean_offline must be > 0, got 0.0"),
        ("noise", math.nan, "noise must be"),
    ],
)
def test_population_rejects_bad_config(field: str, value: object, match: str) -> None:
    kwargs: dict[str, object] = {"num_devices": 4, field: value}
    with pytest.raises(ConfigError, match=match):
        PopulationConfig(**kwargs)  # type: ignore[arg-type]


def test_device_is_a_device_timer() -> None:
    assert isinstance(_device(), DeviceTimer)


def test_slice_seconds_by_hand() -> None:
    d = _device()
    per_sample = 6e4 / 1e7 + 2e4 / 1e9 + 256 / 1e8
    assert d.seconds_per_sample == pytest.approx(per_sample)
    got = d.slice_seconds(5.0, samples=100, download_bytes=40_000, upload_bytes=40_000)
    assert got == pytest.approx(0.04 + 100 * per_sample + 0.04)


def test_gpu_runs_compute_at_gpu_rate() -> None:
    cpu_only = _device()
    with_gpu = _device(gpu_flops=8e7)
    assert with_gpu.seconds_per_sample < cpu_only.seconds_per_sample
    assert with_gpu.seconds_per_sample == pytest.approx(6e4 / 8e7 + 2e4 / 1e9 + 256 / 1e8)


def test_samples_within_matches_slice_seconds() -> None:
    d = _device()
    n = d.samples_within(0.0, 1.0)
    assert n == int(1.0 / d.seconds_per_sample)
    assert d.slice_seconds(0.0, n, 0, 0) <= 1.0 < d.slice_seconds(0.0, n + 1, 0, 0)


def test_offline_stretch_pauses_work() -> None:
    flaky = _device(mean_online=10.0, mean_offline=5.0)
    always = _device()
    # find an offline stretch and start work just before it
    work = always.slice_seconds(0.0, 50, 0, 0)
    assert work > 0.01
    stretches = flaky.offline_stretches(0.0, 500.0)
    # an offline stretch followed by an online one long enough to finish the work
    pairs = [(a, b) for a, b in zip(stretches, stretches[1:], strict=False) if b[0] - a[1] > work]
    assert pairs, "a flaky device must go offline within 500 s at mean online 10 s"
    (off_start, off_end), _ = pairs[0]
    start = off_start - 0.01
    work = always.slice_seconds(start, 50, 0, 0)
    assert flaky.slice_seconds(start, 50, 0, 0) == pytest.approx(work + (off_end - off_start))
    assert not flaky.online_at((off_start + off_end) / 2)
    assert flaky.online_at(off_start - 1e-9)
    assert flaky.online_seconds(off_start, off_end) == pytest.approx(0.0)


def test_answers_do_not_depend_on_call_order() -> None:
    spec = DeviceSpec(3, 1e7, 0.0, 1e9, 1e8, 1e6, mean_online=10.0, mean_offline=5.0)
    starts = [0.0, 3.5, 77.25, 12.0, 500.0, 41.0]
    a = VirtualDevice(spec, COST, seed=5)
    first = [a.slice_seconds(t, 120, 1000, 1000) for t in starts]
    b = VirtualDevice(spec, COST, seed=5)
    second = [b.slice_seconds(t, 120, 1000, 1000) for t in reversed(starts)]
    assert first == list(reversed(second))
    c = VirtualDevice(spec, COST, seed=6)
    assert [c.slice_seconds(t, 120, 1000, 1000) for t in starts] != first


def test_noise_is_bounded_and_seeded() -> None:
    spec = DeviceSpec(0, 1e7, 0.0, 1e9, 1e8, 1e6)
    d = VirtualDevice(spec, COST, seed=1, noise=0.1)
    factors = [d.noise_factor(float(t)) for t in range(200)]
    assert 0.6 < min(factors) < 1.0 < max(factors) < 1.6
    assert factors == [d.noise_factor(float(t)) for t in range(200)]


def test_bad_arguments() -> None:
    d = _device()
    with pytest.raises(InputError, match="budget must be"):
        d.samples_within(0.0, 0.0)
    with pytest.raises(InputError, match="samples, download_bytes and upload_bytes"):
        d.slice_seconds(0.0, -1, 0, 0)
    with pytest.raises(InputError, match="compute_flops must be"):
        JobCost(compute_flops=-1.0, memory_bytes=0.0)
    with pytest.raises(InputError, match="positive compute, memory or sample cost"):
        JobCost(compute_flops=0.0, memory_bytes=0.0)


def test_resource_evaluations_follow_the_device() -> None:
    slow, fast = _device(), _device(cpu_flops=4e7, gpu_flops=1e8)
    es, ef = slow.resource_evaluations(), fast.resource_evaluations()
    assert ef["cpu"] == pytest.approx(4 * es["cpu"])
    assert es["gpu"] == 0.0 < ef["gpu"]
    assert set(es) == {"cpu", "gpu", "memory", "disk"}
