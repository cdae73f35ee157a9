"""HostProbe, GPU detection, bad inputs and cleanup; and the ``flower-edge profile`` command."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import TINY, check_contract

from flower_edge.cli import main
from flower_edge.cli_profile import format_report
from flower_edge.errors import ConfigError, InputError
from flower_edge.profiling import PLANS, HostProbe, ProfileReport, profile_host
from flower_edge.profiling import gpu as gpu_mod
from flower_edge.profiling import probe as probe_mod
from flower_edge.profiling.gpu import GpuInfo, detect_gpu
from flower_edge.profiling.workloads import DenseWorkload, ShardWorkload

torch = pytest.importorskip("torch")
HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True)
def _tiny_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PLANS, "quick", TINY)
    monkeypatch.setitem(PLANS, "full", TINY)


def _interrupt_in_disk_workload(monkeypatch: pytest.MonkeyPatch, how: str = "raise") -> list[Path]:
    """Make the first disk workload write a shard, then get interrupted."""
    seen: list[Path] = []

    def interrupted(self: ShardWorkload, samples: int, deadline: float | None = None) -> int:
        shard = self.directory / "shard-000000.bin"
        shard.write_bytes(b"x" * 100)
        seen.append(shard)
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    monkeypatch.setattr(ShardWorkload, "run", interrupted)
    return seen


# ---------------------------------------------------------------- the probe


@pytest.fixture(scope="module")
def tiny_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ProfileReport, list[tuple[str, float]], Path, int]:
    """One tiny quick profile through ``profile_host``, shared by the tests that read it."""
    folder = tmp_path_factory.mktemp("disk")
    calls: list[tuple[str, float]] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(PLANS, "quick", TINY)
            report = profile_host("quick", folder, None, lambda label, f: calls.append((label, f)))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    return report, calls, folder, after


def test_probe_report_meets_the_contract_and_leaves_no_files(
    tiny_run: tuple[ProfileReport, list[tuple[str, float]], Path, int],
) -> None:
    report, calls, folder, _ = tiny_run
    assert check_contract(report.to_dict()) == []
    assert ProfileReport.from_json(report.to_json()) == report
    assert report.mode == "quick"
    assert [w.name for w in report.resources["cpu"].workloads] == ["cpu-dense", "cpu-conv"]
    assert [w.name for w in report.resources["memory"].workloads] == [
        "memory-copy",
        "memory-gather",
    ]
    assert [w.name for w in report.resources["disk"].workloads] == ["disk-small", "disk-large"]
    for name in ("cpu", "memory", "disk"):
        assert report.resources[name].available
        assert report.evaluations[name] > 0
    assert report.host.cores == os.cpu_count()
    assert list(folder.iterdir()) == []
    labels = [label for label, _ in calls]
    assert labels[0] == "cpu-dense"
    assert calls[-1] == ("done", 1.0)
    assert "disk-large" in labels
    fractions = [f for _, f in calls]
    assert fractions == sorted(fractions)


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_gpu_absent_is_reported_with_reason_and_zero_evaluation(
    tiny_run: tuple[ProfileReport, list[tuple[str, float]], Path, int],
) -> None:
    report = tiny_run[0]
    gpu = report.resources["gpu"]
    assert gpu.available is False
    assert gpu.evaluation == 0.0
    assert gpu.workloads == ()
    assert gpu.reason is not None
    assert "CUDA" in gpu.reason
    assert report.evaluations["gpu"] == 0.0
    assert report.host.gpu_name is None


def test_probe_restores_torch_threads(
    tiny_run: tuple[ProfileReport, list[tuple[str, float]], Path, int],
) -> None:
    assert tiny_run[3] == 1  # the probe used every core, then put back the caller's setting


@pytest.mark.parametrize("repeats", [0, -3, 101, True, 2.5])
def test_probe_rejects_bad_repeats(repeats: Any) -> None:
    with pytest.raises(ConfigError, match=r"repeats must be an integer in \[1, 100\], got"):
        HostProbe(repeats=repeats)


def test_probe_rejects_bad_mode(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mode must be one of quick, full, got 'slow'"):
        HostProbe(tmp_path).profile("slow")  # type: ignore[arg-type]


def test_probe_rejects_missing_and_non_folder_disk_dir(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="disk_dir '.*nope' does not exist"):
        HostProbe(tmp_path / "nope")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="disk_dir '.*file' is not a folder"):
        HostProbe(tmp_path / "file")


def test_probe_rejects_unwritable_disk_dir_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(**kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    monkeypatch.setattr(HostProbe, "_run_all", lambda *a: pytest.fail("workloads ran"))
    with pytest.raises(InputError, match="disk_dir '.*' is not writable: Permission denied"):
        HostProbe(tmp_path).profile("quick")


def test_interrupt_inside_a_workload_removes_the_temp_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _interrupt_in_disk_workload(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        HostProbe(tmp_path).profile("quick")
    assert len(seen) == 1
    assert seen[0].parent.name.startswith(probe_mod.TEMP_PREFIX)  # it was in the temp folder
    assert not seen[0].exists()
    assert list(tmp_path.iterdir()) == []


def test_remove_tree_removes_nested_folders(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("x")
    probe_mod.remove_tree(tmp_path / "a")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_during_removal_waits_until_the_folder_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "t"
    for i in range(20):
        (folder / str(i)).mkdir(parents=True)
        (folder / str(i) / "f").write_text("x")
    real = shutil.rmtree
    # Ctrl-C raises KeyboardInterrupt, even where the runner started pytest with SIGINT
    # ignored (a background job of a non-interactive shell, as some CI runners do)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)

    def interrupted_rmtree(path: Path, ignore_errors: bool = False) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, in the middle of the removal
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(shutil, "rmtree", interrupted_rmtree)
    try:
        with pytest.raises(KeyboardInterrupt):
            probe_mod.remove_tree(folder)
        assert list(tmp_path.iterdir()) == []
        assert signal.getsignal(signal.SIGINT) == before
    finally:
        signal.signal(signal.SIGINT, inherited)


# ---------------------------------------------------------------- GPU detection


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_detect_gpu_without_cuda() -> None:
    info = detect_gpu()
    assert info == GpuInfo(False, None, "no CUDA device (torch.cuda.is_available() is False)")


def _fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    props = SimpleNamespace(
        name="Fake GPU", total_memory=1 << 30, pci_domain_id=0, pci_bus_id=1, pci_device_id=0
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)


def test_detect_gpu_reports_nvml_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch)

    def fail() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    fake_nvml = SimpleNamespace(nvmlInit=fail, nvmlShutdown=lambda: None)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    info = detect_gpu()
    assert info.available is False
    assert info.reason is not None
    assert info.reason.startswith("NVML error: OSError('libnvidia-ml.so.1")


def test_detect_gpu_reports_missing_nvml_library(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    info = detect_gpu()
    assert info.available is False
    assert info.reason is not None
    assert info.reason.startswith("NVML unavailable (install nvidia-ml-py)")


def test_detect_gpu_matches_nvml_handle_by_pci_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cuda(monkeypatch)
    asked: list[str] = []

    def by_bus(bus: str) -> str:
        asked.append(bus)
        return "handle-1"

    fake_nvml = SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByPciBusId=by_bus,
        nvmlDeviceGetHandleByIndex=lambda i: pytest.fail("fell back to the index"),
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=0, memory=0),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    info = detect_gpu()
    assert asked == ["00000000:01:00.0"]
    assert info == GpuInfo(True, "Fake GPU", None, 0, 1 << 30, "handle-1")


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_gpu_workload_failure_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = GpuInfo(True, "Fake GPU", None, 0, 1 << 30, handle=object())
    monkeypatch.setattr(probe_mod, "detect_gpu", lambda: fake)
    monkeypatch.setattr(probe_mod, "nvml_shutdown", lambda: None)
    report = HostProbe(tmp_path).profile("quick")  # CPU-only torch cannot move to cuda:0
    gpu = report.resources["gpu"]
    assert gpu.available is False
    assert gpu.reason is not None
    assert gpu.reason.startswith("gpu workload failed: ")
    assert report.host.gpu_name == "Fake GPU"
    assert check_contract(report.to_dict()) == []


def test_nvml_shutdown_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> None:
        raise RuntimeError("not initialised")

    monkeypatch.setitem(sys.modules, "pynvml", SimpleNamespace(nvmlShutdown=fail))
    gpu_mod.nvml_shutdown()


# ---------------------------------------------------------------- the CLI


def test_cli_json_prints_only_the_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["profile", "--quick", "--json", "--disk-dir", str(tmp_path), "--repeats", "2"])
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)  # stdout is the JSON and nothing else
    assert check_contract(doc) == []
    assert doc["mode"] == "quick"
    assert "[100%] done" in err
    assert list(tmp_path.iterdir()) == []


def test_cli_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["profile", "--disk-dir", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert code == 0
    assert out.startswith("flower-edge profile (full, ")
    for name in ("cpu-dense", "cpu-conv", "memory-copy", "memory-gather", "disk-small"):
        assert name in out
    if not HAS_CUDA:
        assert "unavailable: no CUDA device" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeats", "0"], r"--repeats must be an integer in [1, 100], got 0"),
        (["--repeats", "many"], r"--repeats must be an integer in [1, 100], got 'many'"),
        (["--disk-dir", "{tmp}/missing"], "--disk-dir '{tmp}/missing' does not exist"),
        (["--disk-dir", "{tmp}/file"], "--disk-dir '{tmp}/file' is not a folder"),
    ],
)
def test_cli_bad_input_exits_2_naming_the_option(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code = main(["profile", "--quick", *args])
    _, err = capsys.readouterr()
    assert code == 2
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs")
def test_cli_unwritable_disk_dir_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["profile", "--quick", "--disk-dir", "/sys/kernel"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "--disk-dir '/sys/kernel' is not writable" in err


@pytest.mark.parametrize("how", ["raise", "sigterm"])
def test_cli_interrupted_exits_130_and_leaves_nothing(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[Path] = []

    def interrupted(self: object, samples: int, deadline: float | None = None) -> int:
        (temp,) = tmp_path.iterdir()  # the probe's temporary folder, made before any workload
        (temp / "partial.bin").write_bytes(b"x" * 100)
        seen.append(temp / "partial.bin")
        if how == "sigterm":
            os.kill(os.getpid(), signal.SIGTERM)
        raise KeyboardInterrupt

    monkeypatch.setattr(DenseWorkload, "run", interrupted)  # the first workload
    code = main(["profile", "--quick", "--json", "--disk-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 130
    assert "interrupted" in err
    assert out == ""
    assert len(seen) == 1
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"],
)
def test_real_process_interrupted_mid_profile_exits_130_and_cleans_up(
    signum: int, tmp_path: Path
) -> None:
    """Run ``flower-edge profile`` for real and signal it once it reports progress."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flower_edge.cli", "profile", "--disk-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a terminal's Ctrl-C, even where this test runs with SIGINT ignored (a background
        # job of a non-interactive shell): the child would inherit the ignore
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 120.0
        line = ""
        while "cpu-dense" not in line:  # the temp folder exists before the first workload
            ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
            assert ready, "no progress line within 120 s"
            line = proc.stderr.readline()
            assert line, "the profile ended before reporting progress"
        made = [p.name for p in tmp_path.iterdir()]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120.0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(made) == 1
    assert made[0].startswith(probe_mod.TEMP_PREFIX)
    assert proc.returncode == 130
    assert "flower-edge: interrupted" in err
    assert list(tmp_path.iterdir()) == []


def test_a_failing_disk_is_reported_absent_and_cleaned_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, data: memoryview) -> None:
        path.write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ShardWorkload, "_write", staticmethod(full))
    report = HostProbe(tmp_path).profile("quick")
    disk = report.resources["disk"]
    assert disk.available is False
    assert disk.evaluation == 0.0
    assert disk.reason == "disk workload failed: [Errno 28] No space left on device"
    assert report.resources["cpu"].available
    assert list(tmp_path.iterdir()) == []


def test_filesystem_type_picks_the_longest_mount_point(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [
        SimpleNamespace(mountpoint="/", fstype="ext4"),
        SimpleNamespace(mountpoint="/data", fstype="xfs"),
        SimpleNamespace(mountpoint="/data/fast", fstype="tmpfs"),
        SimpleNamespace(mountpoint="/dat", fstype="nfs"),
    ]
    monkeypatch.setattr(probe_mod, "psutil", SimpleNamespace(disk_partitions=lambda all: parts))
    assert probe_mod.filesystem_type("/data/x/y") == "xfs"
    assert probe_mod.filesystem_type("/data/fast") == "tmpfs"
    assert probe_mod.filesystem_type("/database") == "ext4"  # /dat is no folder prefix of it


def test_a_disk_dir_in_memory_is_rated_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(probe_mod, "filesystem_type", lambda path: "tmpfs")
    report = HostProbe(tmp_path).profile("quick")
    disk = report.resources["disk"]
    assert disk.available
    assert disk.reason is not None
    assert disk.reason.startswith(f"{tmp_path} is on tmpfs (memory, not a disk): pass a folder")
    assert check_contract(report.to_dict()) == []
    table = format_report(report).splitlines()
    note = table.index(next(line for line in table if "note:" in line))
    assert table[note - 1].lstrip().startswith("disk-large")


def test_median_run_by_hand() -> None:
    # whole runs (same samples): the median time, not the mean (one slow outlier)
    assert probe_mod._median_run([(100, 1.0), (100, 1.5), (100, 5.0)]) == (100, 1.5)
    # cut runs: the run of median intensity (samples / seconds), not of median time;
    # intensities 200, 10, 30 -> the 30-samples/s run
    assert probe_mod._median_run([(100, 0.5), (10, 1.0), (90, 3.0)]) == (90, 3.0)
    # an even count takes the lower median: intensities 40, 50, 90, 100 -> 50
    runs = [(100, 1.0), (50, 1.0), (80, 2.0), (90, 1.0)]
    assert probe_mod._median_run(runs) == (50, 1.0)
