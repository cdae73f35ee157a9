"""``benchmarks/gpu_check.py`` runs as is: no GPU here (exit 2), and its checks with a fake GPU."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY, load_benchmark

from flower_edge.profiling import PLANS
from flower_edge.profiling import probe as probe_mod
from flower_edge.profiling.gpu import GpuInfo
from flower_edge.profiling.window import CounterWindow

torch = pytest.importorskip("torch")
SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_a_gpu_the_script_says_so_and_exits_2() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "no GPU: no CUDA device" in done.stdout


class Fixed:
    def __init__(self, value: float) -> None:
        self.value = value

    def reset(self) -> None:
        pass

    def read(self) -> float:
        return self.value


def fake_gpu(monkeypatch: pytest.MonkeyPatch, utilization: float) -> None:
    """The CPU stands in for the card; the window reads ``utilization``."""
    from flower_edge.profiling.workloads import ConvWorkload, DenseWorkload

    tiny = dataclasses.replace(
        TINY,
        gpu_batches=(2, 2),
        gpu_max_batches=(8, 8),
        gpu_run_budget=0.02,
        gpu_sizing_budget=0.05,
    )
    monkeypatch.setitem(PLANS, "quick", tiny)
    monkeypatch.setitem(PLANS, "full", tiny)
    fake = GpuInfo(True, "Fake GPU", None, 0, 1 << 30, handle=object())
    monkeypatch.setattr(probe_mod, "detect_gpu", lambda: fake)
    monkeypatch.setattr(probe_mod, "nvml_shutdown", lambda: None)

    def on_the_cpu(gpu: GpuInfo, plan: object) -> list[object]:
        dense, conv = DenseWorkload("cpu", 2), ConvWorkload("cpu", 2)
        dense.name, conv.name = "gpu-dense", "gpu-conv"
        return [dense, conv]

    monkeypatch.setattr(probe_mod, "_gpu_workloads", on_the_cpu)
    monkeypatch.setattr(probe_mod, "_gpu_window", lambda gpu: CounterWindow(Fixed(utilization)))


def test_check_mode_reports_the_ratio_and_the_missed_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_benchmark("gpu_check")
    fake_gpu(monkeypatch, utilization=0.5)
    torch.set_num_threads(1)
    record, missed = script.check_mode("full", str(tmp_path))
    out = capsys.readouterr().out
    report = record["report"]
    gpu_n = report["resources"]["gpu"]["evaluation"]
    cpu_n = report["resources"]["cpu"]["evaluation"]
    assert record["ratio"] == pytest.approx(gpu_n / cpu_n)
    assert sorted(record["sizing"]) == ["gpu-conv", "gpu-dense"]
    assert "gpu-dense: batch" in out
    assert "ratio" in out
    # U 0.5 < 0.8 for both workloads; the CPU standing in for a GPU is no 20x faster
    assert "full: gpu-dense utilisation 0.500 < 0.8" in missed
    assert "full: gpu-conv utilisation 0.500 < 0.8" in missed
    assert any(m.startswith("full: GPU N / CPU N = ") for m in missed)
    json.dumps(record)  # the record is JSON-ready


def test_check_mode_quick_passes_the_utilisation_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = load_benchmark("gpu_check")
    fake_gpu(monkeypatch, utilization=0.9)
    torch.set_num_threads(1)
    _, missed = script.check_mode("quick", str(tmp_path))
    assert not [m for m in missed if "utilisation" in m or "gpu not rated" in m]


def test_cpu_dry_run_runs_the_sizing_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_benchmark("gpu_check")
    tiny = dataclasses.replace(TINY, repeats=1, gpu_run_budget=0.02, gpu_sizing_budget=0.04)
    monkeypatch.setitem(PLANS, "full", tiny)
    threads = torch.get_num_threads()
    try:
        assert script.cpu_dry_run(start=2) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "cpu-dense up to 2: batch 2" in out
    assert "cpu-conv up to 512: batch " in out
    assert "dense: sized / first batch U*E = " in out
