"""Check the GPU paths of the profiler (CUDA through torch, NVML through pynvml).

On a machine with an NVIDIA GPU: prints what torch and NVML see, runs the gpu workloads
through the real probe (quick, then full unless ``--quick-only``) and prints the gpu resource
report as JSON. Without a GPU: prints ``no GPU: <reason>`` and exits 0.

Usage::

    .venv/bin/python benchmarks/gpu_check.py [--quick-only] [--disk-dir PATH]

Exit codes: 0 checks passed or no GPU, 1 a GPU was found but a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def nvml_facts() -> list[str]:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick-only", action="store_true")
    parser.add_argument("--disk-dir", default=None)
    args = parser.parse_args()

    import torch

    from flower_edge.profiling import HostProbe
    from flower_edge.profiling.gpu import detect_gpu, nvml_shutdown

    print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, load {os.getloadavg()}")
    print(f"torch.cuda.is_available(): {torch.cuda.is_available()}")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            bus = getattr(p, "pci_bus_id", "?")
            print(f"  cuda[{i}] {p.name} {p.total_memory / 2**30:.1f} GiB pci bus {bus}")
    print("\n".join(nvml_facts()))
    info = detect_gpu()
    nvml_shutdown()
    if not info.available:
        print(f"no GPU: {info.reason}")
        return 0
    print(f"detect_gpu: {info.name}, device {info.device_index}, handle {info.handle!r}")
    ok = True
    for mode in ("quick",) if args.quick_only else ("quick", "full"):
        start = time.perf_counter()
        report = HostProbe(args.disk_dir).profile(mode)  # type: ignore[arg-type]
        wall = time.perf_counter() - start
        gpu = report.resources["gpu"]
        print(f"--- {mode}: profile {report.elapsed_seconds:.2f} s (call {wall:.2f} s)")
        print(json.dumps(gpu.to_dict(), indent=2))
        print("evaluations:", {k: round(v, 1) for k, v in report.evaluations.items()})
        if not gpu.available or gpu.evaluation <= 0 or report.host.gpu_name is None:
            print(f"FAIL: gpu resource not rated in {mode} mode: {gpu.reason}")
            ok = False
        elif any(w.utilization == 0 for w in gpu.workloads):
            print("WARN: NVML reported 0 utilisation for a gpu workload (short run?)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
