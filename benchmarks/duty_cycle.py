"""A duty-cycle throttle: a process tree runs for ``1 / factor`` of every period.

The real-deployment benchmark (``benchmarks/real_deployment.py``) slows one SuperNode in fact,
not by a sleep the profiler cannot see: this throttle stops the node's whole process tree
(the SuperNode, every ``flwr-clientapp`` process it starts, so its training loop and its
profiling probe alike) with SIGSTOP and lets it run with SIGCONT for ``period / factor``
seconds of every ``period``. That is what a CPU quota (cgroup ``cpu.max``) does, relative to
the other nodes whatever the host's load; on this host cgroup v2 is not mounted for the cpu
controller.

A period of 100 ms (10 ms running, 90 ms stopped) is not a slow CPU at the time scale of the
profiler. A quick profile sizes its timed run from the (throttled) rate it measured while
sizing, so under a 10x throttle a timed run is a few milliseconds of CPU; when it fits in
one 10 ms run window it goes at full speed, and the node is rated as if unthrottled. In the
twenty-first session the slowed node read CPU N 7,500-9,600 (about half the others': one of
the two CPU workloads escaped) in 7 of 28 quick profiles under that throttle, and 11-290 in
the rest. The period is now 10 ms (1 ms running): a timed run always spans several cycles,
and 6 of 6 profiles read 21-489. The controlling thread asks for a higher scheduling
priority (``nice -10``; it needs ``CAP_SYS_NICE``, else it runs at the process's own and
says so in :meth:`DutyCycle.windows`), measures every run window and keeps the duty ratio
at ``1 / factor`` on average: a window that ran long (``time.sleep`` of 1 ms takes about
1.2 ms) is paid for with a longer stop. It costs about 6 % of one core.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import statistics
import threading
import time

import psutil

__all__ = ["DutyCycle"]

#: the controlling thread's nice value when the process may raise its priority
BOOSTED_NICE = -10
#: seconds per cycle: 1 ms of running and 9 ms stopped for a 10x slow-down, so that a timed
#: run of the profiler (a few ms of CPU under the throttle) always spans several cycles
PERIOD = 0.01


class DutyCycle:
    """Let a process tree run for ``1 / factor`` of every ``period`` seconds (SIGSTOP/SIGCONT).

    Parameters
    ----------
    pid : int
        Root of the tree; its descendants are looked up every period, so ClientApp
        processes started later are throttled too.
    factor : float
        Slow-down, ``>= 1``.
    period : float (default: :data:`PERIOD`)
        Seconds per cycle.
    boost : bool (default: True)
        Run the controlling thread at nice :data:`BOOSTED_NICE` when permitted.
    refresh : float (default: 0.1)
        Seconds between two look-ups of the tree's processes (a process started in between
        runs unthrottled until the next look-up).
    """

    def __init__(
        self,
        pid: int,
        factor: float,
        period: float = PERIOD,
        boost: bool = True,
        refresh: float = 0.1,
    ) -> None:
        if not factor >= 1:
            raise ValueError(f"slow factor must be >= 1, got {factor!r}")
        if not period > 0:
            raise ValueError(f"period must be > 0 seconds, got {period!r}")
        self.pid, self.factor, self.period, self.boost = pid, factor, period, boost
        self.refresh = refresh
        self.boosted = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopped: list[psutil.Process] = []
        self._windows: list[float] = []
        self._span: tuple[float, float] | None = None  # first SIGCONT, last SIGSTOP

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _signal(self, procs: list[psutil.Process], sig: int) -> None:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)

    def _raise_priority(self) -> None:
        if not self.boost:
            return
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BOOSTED_NICE)
        except OSError:  # no CAP_SYS_NICE: the windows may run long under load (windows())
            return
        self.boosted = True

    def _run(self) -> None:
        self._raise_priority()
        run = self.period / self.factor
        tree: list[psutil.Process] = []
        refreshed = -math.inf
        owed = 0.0  # seconds the tree still has to stay stopped for the windows it ran
        stop_began: float | None = None
        while not self._stop.is_set():
            now = time.monotonic()
            if now - refreshed >= self.refresh:
                tree, refreshed = self._tree(), now
            self._signal(tree, signal.SIGCONT)
            opened = time.monotonic()
            if stop_began is not None:
                owed -= opened - stop_began  # an overslept stop shortens the next one
            time.sleep(run)
            if self._stop.is_set():
                break
            self._signal(tree, signal.SIGSTOP)
            stop_began = time.monotonic()
            window = stop_began - opened
            self._windows.append(window)
            self._span = (opened if self._span is None else self._span[0], stop_began)
            self._stopped = tree
            # the duty ratio stays 1 / factor on average: each window is paid for with
            # (factor - 1) times its length stopped, a window that ran long with a longer stop
            owed += window * (self.factor - 1)
            self._stop.wait(max(0.0, owed))
        self._signal(self._tree(), signal.SIGCONT)
        self._signal(self._stopped, signal.SIGCONT)

    def windows(self) -> dict[str, float | int | bool]:
        """Return the run windows so far: count, median, 95th percentile and longest (s).

        A window is the time from SIGCONT to the SIGSTOP after it, as the controlling thread
        saw it; the target is ``period / factor``. ``duty`` is the fraction of the time from
        the first SIGCONT to the last SIGSTOP that the tree could run (``1 / factor`` asked).
        """
        seen = sorted(self._windows)
        if not seen:
            return {"count": 0, "boosted": self.boosted}
        return {
            "count": len(seen),
            "target": self.period / self.factor,
            "median": statistics.median(seen),
            "p95": seen[min(len(seen) - 1, int(0.95 * len(seen)))],
            "max": seen[-1],
            "duty": math.fsum(seen) / max(self._span[1] - self._span[0], 1e-9)
            if self._span is not None
            else 0.0,
            "boosted": self.boosted,
        }

    def __enter__(self) -> DutyCycle:
        if self.factor > 1:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._signal(self._tree(), signal.SIGCONT)
