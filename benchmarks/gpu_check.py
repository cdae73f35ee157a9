"""Check that the GPU rating reflects the hardware (issue 12), on a machine with an NVIDIA GPU.

Runs the real probe (``HostProbe``) in quick, then full mode, and prints per mode the profile's
time and, per gpu workload, the batch the sizing chose, why its growth stopped, samples/s,
utilisation and every sizing step; then N of the GPU and of the CPU and their ratio.

Targets (issue 12):

* full profile: GPU N >= 20 x the same host's CPU N, and every gpu workload's utilisation >= 0.8;
* quick profile: the profile takes <= 3 s, and every gpu workload reads a utilisation > 0.

Usage, from the repository root (needs torch with CUDA, psutil and nvidia-ml-py; not flwr)::

    PYTHONPATH=. python3 benchmarks/gpu_check.py [--json PATH] [--disk-dir PATH] [--sweep SECONDS]

``--sweep SECONDS`` first runs each gpu workload for that long at every batch of its full
ladder (dense 256 to 262144, conv 128 to 65536) and prints samples/s and NVML's utilisation
per batch: a diagnostic, not a check.

Exit codes: 0 every target met; 1 a target missed or the GPU not rated; 2 no GPU (nothing
checked: prints ``no GPU: <reason>``).

``--device cpu`` instead runs the same sizing driver on this host's CPU (dense and conv from
batch 64, the full plan's gpu budgets, psutil's CPU counter as the window) and prints each
size and N = U x E against the first batch alone: a dry run of the growth logic on real
hardware where no GPU is lent. It checks nothing and exits 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere, not installed

#: issue 12's targets
RATIO_TARGET = 20.0
UTILIZATION_TARGET = 0.8
QUICK_SECONDS = 3.0


def nvml_facts() -> list[str]:
    """Return what NVML sees (driver, devices, current utilisation)."""
    try:
        import pynvml
    except ImportError as exc:
        return [f"pynvml not importable: {exc}"]
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return [f"nvmlInit failed: {exc!r}"]
    try:
        out = [f"NVML driver {pynvml.nvmlSystemGetDriverVersion()}"]
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            bus = pynvml.nvmlDeviceGetPciInfo(h).busId
            out.append(f"  nvml[{i}] {pynvml.nvmlDeviceGetName(h)} bus {bus} util {util.gpu} %")
        return out
    finally:
        pynvml.nvmlShutdown()


def check_mode(mode: str, disk_dir: str | None) -> tuple[dict[str, Any], list[str]]:
    """Profile in ``mode``; return the record and the targets it missed."""
    from flower_edge.profiling import HostProbe

    start = time.perf_counter()
    steps: list[tuple[str, float]] = []

    def progress(label: str, _fraction: float) -> None:
        steps.append((label, time.perf_counter() - start))

    probe = HostProbe(disk_dir, progress=progress)
    report = probe.profile(mode)  # type: ignore[arg-type]
    wall = time.perf_counter() - start
    # where the wall time went: each step from its start to the next one's
    marks = [("set-up and GPU detection", 0.0), *steps, ("end", wall)]
    print(
        f"  {mode} steps: "
        + ", ".join(f"{a} {t1 - t0:.2f} s" for (a, t0), (_, t1) in itertools.pairwise(marks))
    )
    gpu, cpu = report.resources["gpu"], report.resources["cpu"]
    ratio = gpu.evaluation / cpu.evaluation if cpu.evaluation > 0 else float("inf")
    print(f"--- {mode}: profile {report.elapsed_seconds:.2f} s (call {wall:.2f} s)")
    missed: list[str] = []
    if not gpu.available:
        missed.append(f"{mode}: gpu not rated: {gpu.reason}")
    for w in gpu.workloads:
        sizing = probe.sizing.get(w.name)
        how = f"batch {sizing.chosen.work} ({sizing.reason})" if sizing else "not sized"
        print(
            f"  {w.name}: {how}, {w.samples} samples in {w.seconds:.3f} s, "
            f"E {w.intensity:.4g} samples/s, U {w.utilization:.3f}, "
            f"U*E {w.utilization * w.intensity:.4g}"
        )
        for s in sizing.steps if sizing else ():
            util = "n/a" if s.utilization is None else f"{s.utilization:.2f}"
            print(
                f"    size {s.work:>7}: {s.samples:>9} samples in {s.seconds:.3f} s "
                f"(+{s.overhead:.3f} s), {s.rate:.4g} samples/s, U {util}"
            )
        if mode == "full" and w.utilization < UTILIZATION_TARGET:
            missed.append(f"full: {w.name} utilisation {w.utilization:.3f} < {UTILIZATION_TARGET}")
        if mode == "quick" and w.utilization <= 0:
            missed.append(f"quick: {w.name} read no utilisation")
    for w in cpu.workloads:
        print(f"  {w.name}: E {w.intensity:.4g} samples/s, U {w.utilization:.3f}")
    print(f"  N gpu {gpu.evaluation:.4g}, N cpu {cpu.evaluation:.4g}, ratio {ratio:.1f}")
    print("  evaluations:", {k: round(v, 1) for k, v in report.evaluations.items()})
    if mode == "full" and gpu.available and ratio < RATIO_TARGET:
        missed.append(f"full: GPU N / CPU N = {ratio:.1f} < {RATIO_TARGET}")
    if mode == "quick" and report.elapsed_seconds > QUICK_SECONDS:
        missed.append(f"quick: profile took {report.elapsed_seconds:.2f} s > {QUICK_SECONDS}")
    record = {
        "mode": mode,
        "call_seconds": wall,
        "steps": steps,
        "ratio": ratio,
        "report": report.to_dict(),
        "sizing": {name: outcome.to_dict() for name, outcome in probe.sizing.items()},
    }
    return record, missed


def cpu_dry_run(start: int = 64) -> int:
    """Run the gpu sizing driver on the CPU workloads from batch ``start``; print the steps."""
    import torch

    from flower_edge.profiling import PLANS
    from flower_edge.profiling.probe import measure_sized_workload
    from flower_edge.profiling.sampler import CpuCounter
    from flower_edge.profiling.sizing import SizingPolicy
    from flower_edge.profiling.window import CounterWindow
    from flower_edge.profiling.workloads import ConvWorkload, DenseWorkload

    plan = PLANS["full"]
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"cpu dry run: {os.cpu_count()} cores, load {os.getloadavg()}")
    for make in (DenseWorkload, ConvWorkload):
        rows = []
        for max_work in (start, start * 4**4):
            policy = SizingPolicy(start, max_work, plan.gpu_run_budget / 8, plan.gpu_sizing_budget)
            began = time.perf_counter()
            result, outcome = measure_sized_workload(
                make("cpu", start),
                policy,
                CounterWindow(CpuCounter()),
                plan.repeats,
                run_budget=plan.gpu_run_budget,
                probe_seconds=plan.gpu_sizing_budget / 8,
            )
            wall = time.perf_counter() - began
            rows.append(result.utilization * result.intensity)
            print(
                f"  {result.name} up to {max_work}: batch {outcome.chosen.work} "
                f"({outcome.reason}), E {result.intensity:.4g}, U {result.utilization:.2f}, "
                f"U*E {rows[-1]:.4g}, {wall:.2f} s"
            )
            for s in outcome.steps:
                util = "n/a" if s.utilization is None else f"{s.utilization:.2f}"
                print(f"    size {s.work:>6}: {s.rate:.4g} samples/s, U {util}")
        print(f"  {make.kind}: sized / first batch U*E = {rows[1] / max(rows[0], 1e-9):.2f}")
    return 0


def sweep(seconds: float, device_index: int, handle: object) -> list[dict[str, Any]]:
    """Run each gpu workload for ``seconds`` at every batch of its full ladder; print rate and U.

    A diagnostic beside the checks: where the sizing stops short of a loaded card, this shows
    which batch (and how long a window) would have loaded it.
    """
    from flower_edge.profiling import PLANS
    from flower_edge.profiling.sizing import ladder
    from flower_edge.profiling.window import NvmlWindow
    from flower_edge.profiling.workloads import ConvWorkload, DenseWorkload

    rows: list[dict[str, Any]] = []
    device = f"cuda:{device_index}"
    for index, make in enumerate((DenseWorkload, ConvWorkload)):
        sizes = ladder(PLANS["full"].gpu_policy(index))  # the full profile's own ladder
        workload = make(device, sizes[0])
        workload.prepare(sizes[0])
        workload.run(sizes[0])
        try:
            for batch in sizes:
                try:
                    workload.resize(batch)
                    workload.run(batch)
                except MemoryError as exc:
                    print(f"  sweep {workload.name} batch {batch}: {exc}")
                    break
                window = NvmlWindow(handle)
                window.begin()
                began = time.perf_counter()
                done = workload.run(batch * (1 << 20), began + seconds)
                wall = time.perf_counter() - began
                util = window.end()
                row = {
                    "workload": workload.name,
                    "batch": batch,
                    "rate": done / wall,
                    "utilization": util,
                    "source": window.last_source,
                }
                rows.append(row)
                print(
                    f"  sweep {workload.name} batch {batch:>7}: {done / wall:.4g} samples/s, "
                    f"U {util if util is None else round(util, 3)} ({window.last_source})"
                )
        finally:
            workload.close()
    return rows


def main() -> int:
    """Run the checks; return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the records to this file")
    parser.add_argument("--disk-dir", default=None, help="folder for the disk workloads")
    parser.add_argument(
        "--device", choices=("gpu", "cpu"), default="gpu", help="cpu: dry run of the sizing"
    )
    parser.add_argument(
        "--sweep",
        type=float,
        default=0.0,
        help="also run each gpu workload this many seconds at every batch of its ladder",
    )
    args = parser.parse_args()
    if args.device == "cpu":
        return cpu_dry_run()

    import logging

    import torch

    from flower_edge.profiling.gpu import detect_gpu, nvml_shutdown

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, load {os.getloadavg()}")
    print(f"torch.cuda.is_available(): {torch.cuda.is_available()}, cores {os.cpu_count()}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(
                f"  cuda[{i}] {p.name} {p.total_memory / 2**30:.1f} GiB, "
                f"{p.multi_processor_count} SMs"
            )
    print("\n".join(nvml_facts()))
    info = detect_gpu()
    if not info.available:
        nvml_shutdown()
        print(f"no GPU: {info.reason}")
        return 2
    print(f"detect_gpu: {info.name}, device {info.device_index}")
    swept = sweep(args.sweep, info.device_index, info.handle) if args.sweep > 0 else []
    nvml_shutdown()
    records: list[dict[str, Any]] = []
    missed: list[str] = []
    for mode in ("quick", "full"):
        record, misses = check_mode(mode, args.disk_dir)
        records.append(record)
        missed += misses
    if args.json:
        Path(args.json).write_text(
            json.dumps({"records": records, "sweep": swept, "missed": missed}, indent=2)
        )
    for line in missed:
        print(f"MISSED {line}")
    print("PASS: every target met" if not missed else f"FAIL: {len(missed)} target(s) missed")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
