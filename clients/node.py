"""The per-process runtime of a node: task, clocks, probe, cached data, model slots.

:class:`NodeRuntime` is what the ClientApp's handlers share; it pickles without its caches,
since Ray ships the ClientApp to its actors.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from flwr.app import Context
from torch import nn
from torch.utils.data import Dataset

from clients.optim import LocalOptimizer
from clients.settings import ClientSettings
from clients.slot import ModelSlot
from clients.task import Task, build_optimizer
from clients.user_code import call_load_data, call_loss_fn, call_model_fn
from flower_edge import validate, wire
from flower_edge.errors import ConfigError, InputError, TaskError
from flower_edge.profiling.report import ResourceProbe
from flower_edge.timing import DeviceTimer

__all__ = ["DATA_CACHE_SIZE", "NodeRuntime", "default_probe", "host_availability", "stream_node"]

#: nodes whose data one process keeps loaded (least recently used first out)
DATA_CACHE_SIZE = 256


#: seconds of CPU accounting that an availability reading needs at least
AVAILABILITY_WINDOW = 0.05
_last_sample: tuple[float, float, float, float] | None = None  # wall, total, idle, own


def _cpu_sample() -> tuple[float, float, float, float]:
    """Return (wall, host CPU seconds, host idle CPU seconds, this process's CPU seconds)."""
    import psutil

    times = psutil.cpu_times()
    idle = float(times.idle) + float(getattr(times, "iowait", 0.0))
    own = psutil.Process().cpu_times()
    return time.monotonic(), float(sum(times)), idle, float(own.user + own.system)


def host_availability() -> float:
    """Return the host's availability in [0, 1] for this node's work: CPU x memory.

    The CPU part is the fraction of the host's CPU time that *other* processes left idle
    since the previous reading in this process (at least :data:`AVAILABILITY_WINDOW`
    seconds; the first reading waits that long): this process's own training does not
    count, or a node would read itself as busy at every preemption point, where it has
    just been training (measured: 0.03, so the abandon rule never fired on a wall clock).
    Times the available memory fraction.
    """
    import psutil

    global _last_sample
    sample = _cpu_sample()
    previous = _last_sample
    if previous is None or sample[0] - previous[0] < AVAILABILITY_WINDOW:
        previous = sample
        time.sleep(AVAILABILITY_WINDOW)
        sample = _cpu_sample()
    _last_sample = sample
    total = sample[1] - previous[1]
    busy_others = (total - (sample[2] - previous[2])) - (sample[3] - previous[3])
    cpu = 1.0 - min(1.0, max(0.0, busy_others / total)) if total > 0 else 1.0
    mem = psutil.virtual_memory()
    free = float(mem.available) / float(mem.total) if mem.total else 0.0
    return min(1.0, max(0.0, cpu * free))


def default_probe(ctx: Context) -> ResourceProbe:
    """Return the host's resource probe (the default ``probe_fn``).

    Kept on disk when the node config names a ``profile-cache`` folder
    (:func:`clients.profile_cache.node_probe`).
    """
    from clients.profile_cache import node_probe

    return node_probe(ctx)


class NodeRuntime:
    """What a built ClientApp keeps per process: the task, its clocks, data and model slots."""

    def __init__(
        self,
        task: Task,
        timer_fn: Callable[[Context], DeviceTimer] | None,
        probe_fn: Callable[[Context], ResourceProbe] | None,
        availability_fn: Callable[[], float] | None,
    ) -> None:
        if not isinstance(task, Task):
            raise ConfigError(
                f"task must be a clients.Task (model_fn, load_data, ...), got {type(task).__name__}"
            )
        for name, fn in (
            ("timer_fn", timer_fn),
            ("probe_fn", probe_fn),
            ("availability_fn", availability_fn),
        ):
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name} must be callable or None, got {type(fn).__name__}")
        self.task = task
        self.timer_fn = timer_fn
        self.probe_fn = probe_fn or default_probe
        self.availability_fn = availability_fn
        self._data: OrderedDict[tuple[int, int], tuple[Dataset[Any], Dataset[Any]]] = OrderedDict()
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the per-process caches (Ray ships the ClientApp to its actors)."""
        state = dict(self.__dict__)
        del state["_data"], state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore a pickled builder with empty caches."""
        self.__dict__.update(state)
        self._data = OrderedDict()
        self._local = threading.local()

    # ------------------------------------------------------------ helpers

    def data(self, ctx: Context) -> tuple[Dataset[Any], Dataset[Any]]:
        """Return the node's ``(train, test)``, loading it once per node and process.

        Raises
        ------
        TaskError
            If ``load_data`` raised or did not return two map-style data sets.
        """
        key = (ctx.run_id, ctx.node_id)
        if key in self._data:
            self._data.move_to_end(key)
            return self._data[key]
        loaded = call_load_data(self.task.load_data, ctx)
        self._data[key] = loaded
        while len(self._data) > DATA_CACHE_SIZE:
            self._data.popitem(last=False)
        return loaded

    def slot(self) -> ModelSlot:
        """Return this thread's model slot (weights are always overwritten before use)."""
        slot: ModelSlot | None = getattr(self._local, "slot", None)
        if slot is None:
            slot = ModelSlot(call_model_fn(self.task.model_fn).to(self.task.torch_device()))
            self._local.slot = slot
        return slot

    def loss(self) -> nn.Module:
        """Return a new loss module from the task's ``loss_fn`` (TaskError if it fails)."""
        return call_loss_fn(self.task.loss_fn)

    def new_optimizer(self, slot: ModelSlot, s: ClientSettings) -> LocalOptimizer:
        """Return a fresh-state optimizer over the slot's model (the instance is reused)."""
        t = self.task
        if slot.optimizer is None:
            if not any(p.requires_grad for p in slot.model.parameters()):
                raise TaskError(
                    "model_fn's model has no trainable parameters (none with requires_grad): "
                    "there is nothing to train"
                )
            slot.optimizer = build_optimizer(
                t.optimizer, slot.model.parameters(), s.learning_rate, t.momentum, t.weight_decay
            )
            return slot.optimizer
        slot.optimizer.state.clear()  # no momentum or moments carried over between jobs
        for group in slot.optimizer.param_groups:
            group["lr"] = s.learning_rate
        return slot.optimizer

    def availability(self, virtual: bool) -> float:
        """Return the node's availability in [0, 1] (1.0 on a virtual clock by default)."""
        if self.availability_fn is not None:
            value = self.availability_fn()
        elif virtual:
            return 1.0
        else:
            value = host_availability()
        return validate.probability("availability_fn's result", value, error=InputError)


def stream_node(ctx: Context) -> int:
    """Return the identity that seeds a node's sample order: its partition id when set.

    Flower draws node ids at random for every run; the partition id (set by the simulation
    engine, or ``--node-config``) keeps runs reproducible. Without one, the node id.
    """
    pid = ctx.node_config.get(wire.PARTITION_ID)
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    return ctx.node_id
