"""The opt-in on-disk cache of a device's profile report."""

import logging
import os
from pathlib import Path

import pytest

from clients.profile_cache import CachedProbe
from flower_edge.errors import ConfigError, InputError
from flower_edge.profiling.report import (
    HostFacts,
    ProfileReport,
    ResourceReport,
    WorkloadResult,
)


def _report(mode: str, cpu: float) -> ProfileReport:
    def rated(name: str, rate: float) -> ResourceReport:
        work = WorkloadResult.measured(f"{name}-256", 256, 256 / rate, 1.0)
        return ResourceReport.from_workloads([work], reason="test")

    resources = {
        "cpu": rated("cpu", cpu),
        "gpu": ResourceReport.absent("no gpu"),
        "memory": rated("memory", 50.0),
        "disk": rated("disk", 20.0),
    }
    host = HostFacts(
        cores=2,
        cpu_model="test",
        memory_bytes=2**30,
        gpu_name=None,
        load_average=(0.0, 0.0, 0.0),
        platform="test",
    )
    return ProfileReport(host, resources, mode, 0.5)  # type: ignore[arg-type]


class CountingProbe:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def profile(self, mode: str) -> ProfileReport:
        self.calls.append(mode)
        return _report(mode, 100.0 + len(self.calls))


def test_report_is_reused_across_probe_instances_while_fresh(tmp_path: Path) -> None:
    inner = CountingProbe()
    first = CachedProbe(inner, tmp_path).profile("quick")
    again = CachedProbe(inner, tmp_path).profile("quick")  # a new run on the same device
    assert inner.calls == ["quick"]
    assert again.evaluations == first.evaluations
    CachedProbe(inner, tmp_path).profile("full")
    assert inner.calls == ["quick", "full"]
    assert (tmp_path / "profile-quick.json").is_file()


def test_stale_report_is_measured_again(tmp_path: Path) -> None:
    inner = CountingProbe()
    probe = CachedProbe(inner, tmp_path, max_age=60.0)
    probe.profile("quick")
    path = probe.path("quick")
    old = path.stat().st_mtime - 120.0
    os.utime(path, (old, old))
    second = probe.profile("quick")
    assert inner.calls == ["quick", "quick"]
    assert second.evaluations["cpu"] == pytest.approx(102.0)


@pytest.mark.parametrize("content", ['{"host": 1}', "not json", _report("full", 5.0).to_json()])
def test_invalid_or_mismatched_report_is_ignored(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "profile-quick.json").write_text(content)
    inner = CountingProbe()
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        report = CachedProbe(inner, tmp_path).profile("quick")
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert inner.calls == ["quick"]
    assert report.mode == "quick"
    assert "profile" in caplog.text


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match=r"max_age \(seconds\) must be >= 0, got -1"):
        CachedProbe(CountingProbe(), max_age=-1)
    with pytest.raises(InputError, match="mode must be one of quick, full, got 'slow'"):
        CachedProbe(CountingProbe()).profile("slow")  # type: ignore[arg-type]
