"""The virtual device's answer to the resource benchmark (seed 000 step 2).

:class:`VirtualProbe` implements :class:`flower_edge.profiling.ResourceProbe` for a
:class:`~simulations.devices.VirtualDevice`: it "runs" the same single-resource-intensive
workloads as the host benchmark, but their times come from the device's numbers, not from the
host. So the server's radar chart, match ratios and sample shares see the simulated devices.

Workloads (per resource, two sizes in ``full`` mode, the small one in ``quick`` mode): ``cpu``
and ``gpu`` process samples of the model's compute-intensive FLOPs at the CPU / GPU FLOP rate,
``memory`` moves the model's memory-intensive bytes per sample at the memory bandwidth,
``disk`` writes and reads a shard of samples at the disk bandwidth. Utilisation is 1 (a
virtual workload saturates its resource), so ``N_r`` is the workload's samples per second
(seed formulas 3 and 4). A device without a GPU reports it absent.
"""

from __future__ import annotations

from flower_edge import validate
from flower_edge.errors import InputError
from flower_edge.profiling.report import (
    MODES,
    HostFacts,
    Mode,
    ProfileReport,
    ResourceReport,
    WorkloadResult,
)
from simulations.devices import VirtualDevice

__all__ = ["WORKLOAD_SAMPLES", "VirtualProbe"]

#: samples of the small and the large workload of each resource
WORKLOAD_SAMPLES: tuple[int, int] = (256, 2048)
_GIB = 2**30


class VirtualProbe:
    """Resource probe of one virtual device.

    Parameters
    ----------
    device : VirtualDevice
        The device to rate.
    """

    def __init__(self, device: VirtualDevice) -> None:
        self.device = device

    def __repr__(self) -> str:
        return f"VirtualProbe({self.device!r})"

    def profile(self, mode: Mode) -> ProfileReport:
        """Return the device's profile report in ``mode`` ("quick" or "full")."""
        validate.choice("mode", mode, MODES, error=InputError)
        sizes = WORKLOAD_SAMPLES[:1] if mode == "quick" else WORKLOAD_SAMPLES
        rates = self.device.resource_evaluations()  # samples per second, per resource
        resources: dict[str, ResourceReport] = {}
        elapsed = 0.0
        for resource, rate in rates.items():
            if rate <= 0:
                resources[resource] = ResourceReport.absent(f"virtual device has no {resource}")
                continue
            workloads = []
            for samples in sizes:
                seconds = samples / rate
                elapsed += seconds
                workloads.append(
                    WorkloadResult.measured(f"virtual-{resource}-{samples}", samples, seconds, 1.0)
                )
            resources[resource] = ResourceReport.from_workloads(workloads, reason="virtual device")
        spec = self.device.spec
        host = HostFacts(
            cores=1,
            cpu_model=f"virtual device {spec.node} ({spec.cpu_flops:.3g} FLOP/s)",
            memory_bytes=_GIB,
            gpu_name=f"virtual GPU ({spec.gpu_flops:.3g} FLOP/s)" if spec.has_gpu else None,
            load_average=(0.0, 0.0, 0.0),
            platform="virtual",
        )
        return ProfileReport(host, resources, mode, elapsed)
