"""Single-resource-intensive workloads over synthetic training samples (seed 000 step 2).

Every workload processes a given number of samples (``Capacity_w``) and is bound by one
resource. Its life cycle is ``prepare(samples)`` (allocate, not timed), ``run(samples)`` (the
timed part, repeatable) and ``close()`` (free memory, delete files). The probe times ``run``;
workloads only do the work.

=================  ========  ==========================================================
workload           resource  what one sample costs
=================  ========  ==========================================================
``cpu-dense``      cpu       forward + backward + SGD step of a 784-512-512-10 MLP, batch 64
``cpu-conv``       cpu       forward + backward + SGD step of a 2-conv net on 3x32x32, batch 64
``gpu-dense``      gpu       as ``cpu-dense`` on CUDA, bf16 autocast, batch sized to the card
``gpu-conv``       gpu       as ``cpu-conv`` on CUDA (channels-last), batch sized likewise
``memory-copy``    memory    NCHW -> NHWC strided copy of a 3x32x32 float32 sample (12 KiB)
``memory-gather``  memory    gather of a 3x32x32 float32 sample in a fixed shuffled order
``disk-small``     disk      a 3x32x32 uint8 sample in 48 KiB shards: write, fsync, read back
``disk-large``     disk      the same in 768 KiB shards (16 and 256 samples per shard)
=================  ========  ==========================================================

The memory buffers are far beyond the last-level cache (the probe sizes them from the
available memory); the disk shards are dropped from the page cache after ``fsync``
(``posix_fadvise(DONTNEED)`` where the platform has it), so that reading them back goes to the
device. Tests use small sample counts; the probe's plan sets the real ones. The gpu workloads
start at batch 256 (dense) and 128 (conv) and the probe grows the batch until the card is
loaded (:mod:`flower_edge.profiling.sizing`): a sample costs the same FLOPs at any batch size,
so ``E`` stays a rate in samples per second comparable with the CPU's.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol, get_args

if TYPE_CHECKING:
    import torch

    from flower_edge.profiling.sampler import MemoryCounter

__all__ = [
    "IMAGE_SHAPE",
    "MEMORY_SAMPLE_BYTES",
    "DISK_SAMPLE_BYTES",
    "MEMORY_SHARE",
    "PRECISIONS",
    "Precision",
    "SizableWorkload",
    "ConvWorkload",
    "DenseWorkload",
    "GatherWorkload",
    "ShardWorkload",
    "StridedCopyWorkload",
    "Workload",
    "fits_memory",
    "peak_copy_bandwidth",
]

#: learning rate of the training workloads' SGD step
SGD_LR: Final = 1e-3
#: shape of one synthetic image sample (channels, height, width)
IMAGE_SHAPE: Final = (3, 32, 32)
#: bytes of one float32 sample in the memory workloads
MEMORY_SAMPLE_BYTES: Final = 4 * 3 * 32 * 32
#: bytes of one uint8 sample in the disk workloads
DISK_SAMPLE_BYTES: Final = 3 * 32 * 32


class Workload(Protocol):
    """A single-resource-intensive workload."""

    name: str
    resource: str

    def prepare(self, samples: int) -> None:
        """Allocate what ``run(samples)`` needs (not timed)."""
        ...

    def run(self, samples: int, deadline: float | None = None) -> int:
        """Process ``samples`` synthetic samples (timed); may be called repeatedly.

        Stops early, after the batch, chunk or shard in progress, once ``time.perf_counter()``
        passes ``deadline``; returns the samples processed (``samples`` unless stopped).
        """
        ...

    def close(self) -> None:
        """Free memory and delete any file the workload made; safe to call twice."""
        ...


class SizableWorkload(Workload, Protocol):
    """A workload whose work per step (its batch) can change between runs (:mod:`.sizing`)."""

    batch: int

    def resize(self, batch: int) -> None:
        """Make each step ``batch`` samples; raise :class:`MemoryError` when it does not fit."""
        ...


def _check_samples(samples: int) -> None:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be an integer >= 1, got {samples!r}")


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: on CUDA, aim for this many seconds of queued work between two host syncs of a timed run
_SYNC_SECONDS: Final = 0.02
#: most training steps queued between two host syncs
_MAX_STEPS_PER_SYNC: Final = 1024
#: largest share of the device's memory a gpu workload's batch may take (projected)
MEMORY_SHARE: Final = 0.5


def fits_memory(batch: int, bytes_per_sample: float, device_bytes: int, share: float) -> bool:
    """Whether ``batch`` samples at ``bytes_per_sample`` stay within ``share`` of the device."""
    return batch * bytes_per_sample <= share * device_bytes


Precision = Literal["auto", "fp32"]
#: allowed ``precision`` values of the training workloads
PRECISIONS: Final[tuple[str, ...]] = get_args(Precision)


@contextlib.contextmanager
def _precision(device: torch.device, precision: str) -> Iterator[None]:
    """On CUDA with ``"auto"``: bf16 autocast where the device supports it.

    The devices with TF32 (Ampere and later) all support bf16, which is faster still, so TF32
    is not set separately (and the process-wide TF32 flags of a client are left alone). On the
    CPU, on devices without bf16 and with ``"fp32"``, nothing changes.
    """
    import torch

    bf16 = device.type == "cuda" and precision == "auto" and torch.cuda.is_bf16_supported()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        yield


def _is_out_of_memory(exc: BaseException) -> bool:
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(exc, oom)


class _TrainWorkload(ABC):
    """Training steps of a small model over repeated synthetic batches.

    Subclasses set ``kind`` and build the model; the workload is named ``<resource>-<kind>``,
    the resource being ``gpu`` on a CUDA device and ``cpu`` otherwise. The batch is the work
    per step: :meth:`resize` changes it between runs (see :mod:`.sizing`). On CUDA a timed run
    syncs with the device only every ~20 ms of queued work (so that the host keeps the queue
    full and the deadline is still honoured), and ``precision="auto"`` trains in bf16
    autocast where the device supports it, as a training job on that device would. Running out
    of device memory raises :class:`MemoryError` (the cached blocks are released first).
    """

    kind = "train"

    def __init__(self, device: str = "cpu", batch: int = 64, precision: Precision = "auto") -> None:
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.resource = "gpu" if device.startswith("cuda") else "cpu"
        self.name = f"{self.resource}-{self.kind}"
        self.device_name = device
        self.batch = batch
        self.precision = precision
        self._model: torch.nn.Module | None = None
        self._params: list[torch.Tensor] = []
        self._shape: tuple[int, ...] = ()
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        #: peak device bytes per sample of the last run (CUDA only; params and workspace included)
        self.bytes_per_sample: float | None = None

    @abstractmethod
    def _build(self) -> tuple[torch.nn.Module, tuple[int, ...]]:
        """Return the model and the shape of one sample."""

    def prepare(self, samples: int) -> None:
        """Build the model and one synthetic batch of ``min(batch, samples)`` on the device."""
        import torch

        _check_samples(samples)
        device = torch.device(self.device_name)
        with torch.random.fork_rng(devices=[]):  # leave the caller's global RNG untouched
            torch.manual_seed(0)
            model, self._shape = self._build()
        model = model.to(device)
        if device.type == "cuda" and len(self._shape) == 3:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self._model = model
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._make_batch(min(self.batch, samples))

    def _make_batch(self, batch: int) -> None:
        import torch

        device = torch.device(self.device_name)
        self._x = self._y = None  # free the old batch before allocating the new one
        gen = torch.Generator(device=device).manual_seed(0)
        x = torch.randn((batch, *self._shape), generator=gen, device=device)
        if device.type == "cuda" and len(self._shape) == 3:
            x = x.contiguous(memory_format=torch.channels_last)
        self._x = x
        self._y = torch.randint(0, 10, (batch,), generator=gen, device=device)

    def resize(self, batch: int) -> None:
        """Make the synthetic batch ``batch`` samples (the model is kept).

        Raises
        ------
        MemoryError
            When the device has no room for the batch.
        """
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        if self._model is None:
            raise RuntimeError(f"{self.name}: prepare() before resize()")
        self._check_projected_memory(batch)
        try:
            self._make_batch(batch)
        except Exception as exc:
            self._raise_if_out_of_memory(exc, batch)
            raise
        self.batch = batch

    def _check_projected_memory(self, batch: int) -> None:
        """On CUDA, refuse a batch projected past :data:`MEMORY_SHARE` of the device memory.

        The projection uses the peak memory per sample of the last run: on a device whose
        memory is shared with the host (Jetson) running out of it is not a clean error.
        """
        import torch

        device = torch.device(self.device_name)
        if device.type != "cuda" or self.bytes_per_sample is None:
            return
        total = int(torch.cuda.get_device_properties(device).total_memory)
        if not fits_memory(batch, self.bytes_per_sample, total, MEMORY_SHARE):
            raise MemoryError(
                f"{self.name}: batch {batch} would take about "
                f"{batch * self.bytes_per_sample / 2**30:.1f} GiB, over {MEMORY_SHARE:.0%} "
                f"of the device's {total / 2**30:.1f} GiB"
            )

    def _raise_if_out_of_memory(self, exc: Exception, batch: int) -> None:
        if not _is_out_of_memory(exc):
            return
        import torch

        self._x = self._y = None
        self._zero_grad()
        torch.cuda.empty_cache()
        raise MemoryError(f"{self.name}: out of device memory at batch {batch}") from exc

    def run(self, samples: int, deadline: float | None = None) -> int:
        """Run forward, backward and an SGD step over ``samples`` samples; return the count."""
        _check_samples(samples)
        if self._model is None or self._x is None or self._y is None:
            raise RuntimeError(f"{self.name}: prepare() before run()")
        try:
            with _precision(self._x.device, self.precision):
                return self._steps(samples, deadline)
        except Exception as exc:
            self._raise_if_out_of_memory(exc, self.batch)
            raise

    def _steps(self, samples: int, deadline: float | None) -> int:
        import torch

        assert self._model is not None
        assert self._x is not None
        assert self._y is not None
        loss_fn = torch.nn.functional.cross_entropy
        device = self._x.device
        cuda = device.type == "cuda"
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        every, since, mark = 1, 0, time.perf_counter()
        done = 0
        while done < samples:
            n = min(self._x.shape[0], samples - done)
            self._zero_grad()
            loss = loss_fn(self._model(self._x[:n]), self._y[:n])
            loss.backward()  # type: ignore[no-untyped-call]
            self._sgd_step()
            done += n
            since += 1
            if deadline is None or done >= samples or since < every:
                continue
            _sync(device)  # on CUDA: wait for the queued steps, then read the clock
            now = time.perf_counter()
            if cuda:  # queue ~_SYNC_SECONDS of steps before the next sync
                rate = since / max(now - mark, 1e-9)
                every = max(1, min(_MAX_STEPS_PER_SYNC, int(rate * _SYNC_SECONDS)))
            since, mark = 0, now
            if now > deadline:
                break
        _sync(device)
        if cuda:
            peak = torch.cuda.max_memory_allocated(device)
            self.bytes_per_sample = peak / self._x.shape[0]
        return done

    def _zero_grad(self) -> None:
        for p in self._params:
            p.grad = None

    def _sgd_step(self) -> None:
        """``p <- p - lr * grad`` for every parameter: plain SGD, as ``torch.optim.SGD`` steps.

        Written out rather than through ``torch.optim``, whose first use in a process imports
        ``torch._dynamo`` (2-4 s, measured): a one-time cost that is not the host's speed and
        that would take most of a quick profile's budget. The arithmetic is the same, with the
        same multi-tensor kernel (``torch._foreach_add_``) that the optimizer uses.
        """
        import torch

        with torch.no_grad():
            pairs = [(p, p.grad) for p in self._params if p.grad is not None]
            foreach = getattr(torch, "_foreach_add_", None)  # private: absent in a future torch
            if pairs and foreach is not None:
                params, grads = zip(*pairs, strict=True)
                foreach(list(params), list(grads), alpha=-SGD_LR)
            else:
                for p, g in pairs:
                    p.add_(g, alpha=-SGD_LR)

    def close(self) -> None:
        """Drop the model and the batch."""
        self._model = self._x = self._y = None
        self._params = []


class DenseWorkload(_TrainWorkload):
    """Forward + backward + SGD step of a 784-512-512-10 MLP (``cpu-dense`` / ``gpu-dense``).

    Parameters
    ----------
    device : str (default: "cpu")
        Torch device, ``"cpu"`` or ``"cuda[:i]"``.
    batch : int (default: 64)
        Samples per step.
    """

    kind = "dense"

    def _build(self) -> tuple[torch.nn.Module, tuple[int, ...]]:
        from torch import nn

        model = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
        )
        return model, (784,)


class ConvWorkload(_TrainWorkload):
    """Forward + backward + SGD step of a two-conv net on 3x32x32 (``cpu-conv`` / ``gpu-conv``).

    Parameters
    ----------
    device : str (default: "cpu")
        Torch device, ``"cpu"`` or ``"cuda[:i]"``.
    batch : int (default: 64)
        Samples per step.
    """

    kind = "conv"

    def _build(self) -> tuple[torch.nn.Module, tuple[int, ...]]:
        from torch import nn

        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 8 * 8, 10),
        )
        return model, IMAGE_SHAPE


class _MemoryWorkload(ABC):
    """Moves float32 samples between two buffers of at most ``buffer_bytes`` each."""

    name = "memory"
    resource = "memory"

    def __init__(self, buffer_bytes: int, counter: MemoryCounter | None = None) -> None:
        if buffer_bytes < MEMORY_SAMPLE_BYTES:
            raise ValueError(f"buffer_bytes must be >= {MEMORY_SAMPLE_BYTES}, got {buffer_bytes}")
        self.buffer_bytes = buffer_bytes
        self.counter = counter
        self._src: torch.Tensor | None = None
        self._dst: torch.Tensor | None = None
        self._chunk = 1

    def prepare(self, samples: int) -> None:
        """Allocate and touch the source and destination buffers."""
        import torch

        _check_samples(samples)
        n = min(samples, self.buffer_bytes // MEMORY_SAMPLE_BYTES)
        # filled, so every page is touched before timing; the values do not matter
        self._src = torch.full((n, *IMAGE_SHAPE), 0.5)
        self._dst = torch.zeros_like(self._src)
        # chunks of ~4 MiB: progress for the sampler, well below the buffer size
        self._chunk = max(1, min(n, (4 << 20) // MEMORY_SAMPLE_BYTES))
        self._setup(n)

    def _setup(self, n: int) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Prepare workload-specific state for ``n`` buffered samples (none by default)."""

    @abstractmethod
    def _move(self, start: int, stop: int) -> None:
        """Move the samples ``start:stop`` of the buffer."""

    def run(self, samples: int, deadline: float | None = None) -> int:
        """Move ``samples`` samples, cycling through the buffer; return the count."""
        _check_samples(samples)
        if self._src is None:
            raise RuntimeError(f"{self.name}: prepare() before run()")
        n = self._src.shape[0]
        done = 0
        while done < samples:
            start = done % n
            stop = min(n, start + self._chunk, start + samples - done)
            self._move(start, stop)
            done += stop - start
            if self.counter is not None:
                self.counter.add(2 * (stop - start) * MEMORY_SAMPLE_BYTES)
            if deadline is not None and done < samples and time.perf_counter() > deadline:
                break
        return done

    def close(self) -> None:
        """Free the buffers."""
        self._src = self._dst = None


class StridedCopyWorkload(_MemoryWorkload):
    """NCHW -> NHWC strided copy of float32 samples (``memory-copy``).

    Parameters
    ----------
    buffer_bytes : int
        Size of each of the two buffers; make it far larger than the last-level cache.
    counter : MemoryCounter | None (default: None)
        Receives the bytes moved, for the bandwidth-proxy utilisation.
    """

    name = "memory-copy"

    def _move(self, start: int, stop: int) -> None:
        assert self._src is not None
        assert self._dst is not None
        c, h, w = IMAGE_SHAPE
        dst = self._dst[start:stop].view(stop - start, h, w, c)
        dst.copy_(self._src[start:stop].permute(0, 2, 3, 1))


class GatherWorkload(_MemoryWorkload):
    """Gather of float32 samples in a fixed shuffled order (``memory-gather``).

    Parameters
    ----------
    buffer_bytes : int
        Size of each of the two buffers; make it far larger than the last-level cache.
    counter : MemoryCounter | None (default: None)
        Receives the bytes moved, for the bandwidth-proxy utilisation.
    """

    name = "memory-gather"

    def _setup(self, n: int) -> None:
        import torch

        self._perm = torch.randperm(n, generator=torch.Generator().manual_seed(1))

    def _move(self, start: int, stop: int) -> None:
        import torch

        assert self._src is not None
        assert self._dst is not None
        torch.index_select(self._src, 0, self._perm[start:stop], out=self._dst[start:stop])


def peak_copy_bandwidth(buffer_bytes: int, repeats: int = 3) -> float:
    """Return the best contiguous copy rate in bytes/s (read + write) of a large buffer.

    The reference of the memory bandwidth proxy (:class:`~.sampler.MemoryCounter`).

    Parameters
    ----------
    buffer_bytes : int
        Bytes of each of the two buffers (make it far larger than the last-level cache).
    repeats : int (default: 3)
        Copies timed; the fastest counts.
    """
    import torch

    n = max(1, buffer_bytes // 4)
    src = torch.ones(n, dtype=torch.float32)
    dst = torch.zeros_like(src)
    dst.copy_(src)
    best = math.inf
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2.0 * 4 * n / max(best, 1e-9)


class ShardWorkload:
    """Write sample shards with fsync, read them back from the device, delete them.

    Parameters
    ----------
    directory : str | Path
        An existing, writable folder for the shards (the probe's temporary folder).
    shard_samples : int
        Samples per shard file (3 KiB each).
    name : str (default: derived from the shard size)
        Workload name.
    """

    resource = "disk"

    def __init__(self, directory: str | Path, shard_samples: int, name: str | None = None) -> None:
        if shard_samples < 1:
            raise ValueError(f"shard_samples must be >= 1, got {shard_samples}")
        self.directory = Path(directory)
        self.shard_samples = shard_samples
        self.name = name or f"disk-{shard_samples * DISK_SAMPLE_BYTES // 1024}k"
        self._data = b""
        self._paths: list[Path] = []

    def prepare(self, samples: int) -> None:
        """Make one shard's worth of pseudo-random bytes."""
        _check_samples(samples)
        import random

        size = min(samples, self.shard_samples) * DISK_SAMPLE_BYTES
        self._data = random.Random(0).randbytes(size)

    def run(self, samples: int, deadline: float | None = None) -> int:
        """Write ``samples`` samples in shards (fsync each), read them back, delete them.

        Past ``deadline`` no further shard is written; those written are read back.
        """
        _check_samples(samples)
        if not self._data:
            raise RuntimeError(f"{self.name}: prepare() before run()")
        per_shard = len(self._data) // DISK_SAMPLE_BYTES
        shards = math.ceil(samples / per_shard)
        sizes = [per_shard] * (shards - 1) + [samples - per_shard * (shards - 1)]
        view = memoryview(self._data)
        written: list[int] = []
        try:
            for i, count in enumerate(sizes):
                path = self.directory / f"shard-{i:06d}.bin"
                self._paths.append(path)
                self._write(path, view[: count * DISK_SAMPLE_BYTES])
                written.append(count)
                if deadline is not None and time.perf_counter() > deadline:
                    break
            for path, count in zip(self._paths, written, strict=True):
                self._read(path, count * DISK_SAMPLE_BYTES)
        finally:
            self._remove()
        return sum(written)

    @staticmethod
    def _write(path: Path, data: memoryview) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
            if hasattr(os, "posix_fadvise"):
                with contextlib.suppress(OSError):  # a file system without page-cache advice
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    @staticmethod
    def _read(path: Path, size: int) -> None:
        with open(path, "rb", buffering=0) as fh:
            got = len(fh.read(size))
        if got != size:
            raise OSError(f"short read from {path}: {got} of {size} bytes")

    def _remove(self) -> None:
        paths, self._paths = self._paths, []
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def close(self) -> None:
        """Delete any shard still on disk and drop the data."""
        self._remove()
        self._data = b""
