"""GPU detection: a CUDA device for the workloads and its NVML handle for utilisation.

Both are needed: CUDA (through torch) runs the gpu workloads, NVML (``import pynvml`` from the
``nvidia-ml-py`` distribution) samples the GPU's utilisation. When either is missing or
fails, the GPU is reported absent with the reason, and nothing else happens. The NVML handle
is matched to the CUDA device by PCI bus id, so that ``CUDA_VISIBLE_DEVICES`` renumbering
does not pair the workload with another GPU's counter; the index is the fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["GpuInfo", "detect_gpu", "nvml_shutdown"]


@dataclass(frozen=True)
class GpuInfo:
    """Outcome of GPU detection.

    Parameters
    ----------
    available : bool
        Whether a CUDA device and its NVML handle were found.
    name : str | None
        Device name when available.
    reason : str | None
        Why the GPU is unavailable; ``None`` when available.
    device_index : int
        CUDA device index used by the workloads.
    memory_bytes : int
        Total device memory in bytes (0 when unavailable).
    handle : Any
        The NVML device handle (``None`` when unavailable).
    """

    available: bool
    name: str | None
    reason: str | None
    device_index: int = 0
    memory_bytes: int = 0
    handle: Any = None


def _bus_id(props: Any) -> str | None:
    domain = getattr(props, "pci_domain_id", None)
    bus = getattr(props, "pci_bus_id", None)
    device = getattr(props, "pci_device_id", None)
    if bus is None or device is None:
        return None
    return f"{int(domain or 0):08X}:{int(bus):02X}:{int(device):02X}.0"


def detect_gpu(device_index: int | None = None) -> GpuInfo:
    """Find a CUDA device and its NVML handle; never raise.

    Parameters
    ----------
    device_index : int | None (default: None)
        CUDA device to use; ``None`` for the current device.

    Returns
    -------
    GpuInfo
        ``available=False`` with a reason when there is no CUDA device, no NVML library, or
        NVML fails.
    """
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - torch is a dependency
        return GpuInfo(False, None, f"torch is not importable: {exc}")
    try:
        if not torch.cuda.is_available():
            return GpuInfo(False, None, "no CUDA device (torch.cuda.is_available() is False)")
        index = torch.cuda.current_device() if device_index is None else device_index
        props = torch.cuda.get_device_properties(index)
    except Exception as exc:  # CUDA driver errors come in many classes
        return GpuInfo(False, None, f"CUDA error: {exc}")
    try:
        import pynvml
    except ImportError as exc:
        return GpuInfo(False, None, f"NVML unavailable (install nvidia-ml-py): {exc}")
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and OSError from the loader
        return GpuInfo(False, None, f"NVML error: {exc!r}")
    try:
        bus_id = _bus_id(props)
        handle = None
        if bus_id is not None:
            try:
                handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
            except Exception:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetUtilizationRates(handle)  # fails early on unsupported devices
    except Exception as exc:
        nvml_shutdown()
        return GpuInfo(False, None, f"NVML error: {exc!r}")
    return GpuInfo(True, str(props.name), None, index, int(props.total_memory), handle)


def nvml_shutdown() -> None:
    """Release NVML if it was initialised; never raise."""
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception:  # not initialised, or no library
        return
