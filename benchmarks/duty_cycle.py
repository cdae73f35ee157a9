"""A duty-cycle throttle: a process tree runs for ``1 / factor`` of every period.

The real-deployment benchmark (``benchmarks/real_deployment.py``) slows one SuperNode in fact,
not by a sleep the profiler cannot see: this throttle stops the node's whole process tree
(the SuperNode, every ``flwr-clientapp`` process it starts, so its training loop and its
profiling probe alike) with SIGSTOP and lets it run with SIGCONT for ``period / factor``
seconds of every ``period``. On this host cgroup v2 is not mounted for the cpu controller.

**Relative to what?** Running for ``1 / factor`` of the wall time is a CPU 10x slower than a
whole core, not 10x slower than the other nodes. On one host the other nodes share the same
cores: 8 ClientApps on 2 cores get about a quarter of a core each, and the scheduler serves a
tree that was stopped first when it resumes, so the throttled tree gets close to a full core
in each of its windows. Measured over runs 25-27 (``docs/benchmarks/deployment.md``), the
node "slowed 10x" took 35-53 s per job against the others' 19-22 s: about 2x in fact.
:class:`PacedThrottle` (twenty-third session) holds the CPU rate of the node's ClientApp
processes at ``1 / factor`` of a busy peer ClientApp's steady rate. Flower's runtime sets
the limit of how far that can go on one host: a ClientApp must send its first task heartbeat
within 30 s, so each one's start-up runs unpaced (``grace``), and the node's jobs came out
3.8-4.9x as long as the others' (runs 29-30: FedAvg's rounds 109-121 s against waves of
20-25 s).

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
from collections import deque

import psutil

__all__ = ["DutyCycle", "PacedThrottle", "process_cpu", "process_tree", "reference_rate"]

#: the controlling thread's nice value when the process may raise its priority
BOOSTED_NICE = -10
#: seconds per cycle: 1 ms of running and 9 ms stopped for a 10x slow-down, so that a timed
#: run of the profiler (a few ms of CPU under the throttle) always spans several cycles
PERIOD = 0.01
#: busy peer rates the paced throttle keeps (one per busy peer and sample): about 40 minutes
#: of 7 busy peers sampled every 0.5 s
SAMPLES = 35_000


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
        return process_tree(self.pid)

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

    def windows(self) -> dict[str, float | int | bool | str]:
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


def process_tree(pid: int) -> list[psutil.Process]:
    """Return process ``pid`` and its descendants (empty once it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def process_cpu(pid: int) -> float | None:
    """Return the CPU seconds of process ``pid`` (all its threads), or None once it is gone.

    Reads the process's CPU-time clock (``clock_getcpuclockid``: ``((~pid) << 3) | 2``),
    nanosecond-exact and about a microsecond per call, where ``/proc/<pid>/stat`` counts in
    ticks of 10 ms.
    """
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return None


def reference_rate(samples: list[float], busy: float, held: float) -> float:
    """Return the CPU rate (cores) of a busy peer: the median of the samples ``>= busy``.

    The samples are every busy peer's rate so far (one per peer and sampling period), so the
    reference is a device's steady speed on this host, not the moment's: while FedAvg waits
    for the slowed node the others are idle, and it does not speed up because of that. With
    no sample at or above ``busy`` it is ``held``.
    """
    working = [rate for rate in samples if rate >= busy]
    return statistics.median(working) if working else held


class _TreeClock:
    """Cumulative CPU seconds of a process tree's processes (all, or those matching)."""

    def __init__(self, pid: int, match: str | None = None) -> None:
        self.pid, self.match = pid, match
        self._seen: dict[int, float] = {}
        self._matched: set[int] = set()
        self.procs: list[psutil.Process] = []

    def _matching(self, proc: psutil.Process) -> bool:
        # only a match is remembered: a process just forked (a SuperExec starting a
        # ClientApp) still shows its parent's command line until it calls exec
        if self.match is None or proc.pid in self._matched:
            return True
        try:
            found = any(self.match in part for part in proc.cmdline())
        except psutil.Error:
            return False
        if found:
            self._matched.add(proc.pid)
        return found

    def refresh(self) -> None:
        """Look the tree's processes up again (a ClientApp started since is counted)."""
        self.procs = [proc for proc in process_tree(self.pid) if self._matching(proc)]

    def total(self, grace: float = 0.0) -> float:
        """Return the CPU seconds of every (matching) process seen in the tree so far.

        A process's first ``grace`` CPU seconds are not counted (:meth:`past_grace`).
        """
        for proc in self.procs:
            pid = proc.pid
            cpu = process_cpu(pid)
            if cpu is not None and cpu - grace > self._seen.get(pid, 0.0):
                self._seen[pid] = cpu - grace
        return math.fsum(self._seen.values())

    def past_grace(self) -> list[psutil.Process]:
        """The processes that have used more than their grace (seen by :meth:`total`)."""
        return [proc for proc in self.procs if self._seen.get(proc.pid, 0.0) > 0.0]


class PacedThrottle(DutyCycle):
    """Hold a node's CPU rate at ``1 / factor`` of a busy peer's, by SIGSTOP and SIGCONT.

    Every ``sample`` seconds the CPU rate of each peer (another SuperNode's tree, or its
    processes whose command line holds ``match``) is measured over the last ``sample``
    seconds; the reference is the median of every busy rate seen so far
    (:func:`reference_rate`), a peer device's steady speed on this host. The throttled
    processes earn CPU time at ``reference / factor`` and run in windows of at least
    ``period / factor`` seconds while they have some; when their CPU time
    (:func:`process_cpu`) runs ahead of what they earned, they stay stopped until it is paid
    back. Unused credit is capped at ``burst`` CPU seconds, so an idle node cannot save up
    for a fast start.

    With ``match="flwr-clientapp"`` only the ClientApp processes are paced: the training,
    the profile's probe and the ClientApp's own start-up, while the SuperNode's runtime
    (its heartbeats to the SuperLink, the runtime API its ClientApps call) keeps a peer's
    speed. Pacing the whole tree at a tenth of a peer that shares 2 cores with 7 others
    (about 0.025 core) broke Flower's liveness rules in the twenty-third session: the
    ClientApp's task token was revoked and the SuperLink reported the node unavailable.
    Pacing the ClientApps from their first instruction broke them too: Flower's runtime
    revokes a ClientApp's task token unless its first task heartbeat comes within 30 s
    (``HEARTBEAT_DEFAULT_INTERVAL``), and at a fortieth of a core a ClientApp's start-up
    (Python and flwr imports) takes longer than that. ``grace`` CPU seconds of each process
    therefore run at the host's speed and are not counted; pacing starts after them.

    Parameters
    ----------
    pid : int
        Root of the throttled tree.
    peers : list[int]
        Roots of the other nodes' trees.
    factor : float
        Slow-down relative to a busy peer, ``>= 1``.
    period : float (default: :data:`PERIOD`)
        The shortest window is ``period / factor``; the longest ``period``.
    match : str or None (default: None)
        Pace (and measure on the peers) only the processes whose command line holds it;
        None: whole trees.
    initial : float or None (default: None)
        Reference rate (cores) until a peer is seen busy; None: the host's cores shared by
        every node, ``cpu_count / (len(peers) + 1)``.
    busy : float (default: 0.05)
        Cores a peer must use to count as working.
    sample : float (default: 0.5)
        Seconds between two measurements of the peers.
    burst : float (default: 0.005)
        Most CPU seconds of credit the throttled processes may hold.
    grace : float (default: 0.0)
        CPU seconds each paced process runs unpaced and uncounted before pacing starts.
    """

    def __init__(
        self,
        pid: int,
        peers: list[int],
        factor: float,
        period: float = PERIOD,
        match: str | None = None,
        initial: float | None = None,
        busy: float = 0.05,
        sample: float = 0.5,
        burst: float = 0.005,
        grace: float = 0.0,
    ) -> None:
        super().__init__(pid, factor, period=period)
        if not grace >= 0:
            raise ValueError(f"grace must be >= 0 CPU seconds, got {grace!r}")
        self.grace = grace
        if initial is None:
            initial = (os.cpu_count() or 1) / (len(peers) + 1)
        if not initial > 0:
            raise ValueError(f"initial reference rate must be > 0 cores, got {initial!r}")
        self.match = match
        self.peers = [_TreeClock(peer, match) for peer in peers]
        self.reference, self.busy, self.sample, self.burst = initial, busy, sample, burst
        self._samples: deque[float] = deque(maxlen=SAMPLES)
        #: (monotonic time, reference, paced processes, CPU used, CPU earned) per sample
        self.trace: deque[tuple[float, float, int, float, float]] = deque(maxlen=SAMPLES)
        self._used = 0.0
        self._earned = 0.0

    def _measure_peers(self, last: list[float], elapsed: float) -> list[float]:
        totals = []
        for clock in self.peers:
            clock.refresh()
            totals.append(clock.total())
        if last and elapsed > 0:
            rates = [(now - before) / elapsed for now, before in zip(totals, last, strict=True)]
            self._samples.extend(rate for rate in rates if rate >= self.busy)
            self.reference = reference_rate(list(self._samples), self.busy, self.reference)
        return totals

    def _run(self) -> None:
        self._raise_priority()
        own = _TreeClock(self.pid, self.match)
        shortest = self.period / self.factor
        refreshed = sampled = last = time.monotonic()
        own.refresh()
        peer_totals = self._measure_peers([], 0.0)
        started = earned = used = own.total(self.grace)
        while not self._stop.is_set():
            now = time.monotonic()
            if now - refreshed >= self.refresh:
                own.refresh()
                refreshed = now
            if now - sampled >= self.sample:
                peer_totals = self._measure_peers(peer_totals, now - sampled)
                sampled = now
                self.trace.append(
                    (now, self.reference, len(own.past_grace()), used - started, earned - started)
                )
            pace = self.reference / self.factor
            used = own.total(self.grace)
            earned = min(earned + pace * (now - last), used + self.burst)
            last = now
            credit = earned - used
            if credit <= 0:
                # a ClientApp started while the node owes CPU time has never been stopped
                self._stopped = own.past_grace()
                self._signal(self._stopped, signal.SIGSTOP)
                self._stop.wait(min(self.period, -credit / pace))
                continue
            tree = own.past_grace()
            self._signal(tree, signal.SIGCONT)
            opened = time.monotonic()
            time.sleep(min(self.period, max(shortest, credit)))
            self._signal(tree, signal.SIGSTOP)
            closed = time.monotonic()
            self._stopped = tree
            self._windows.append(closed - opened)
            self._span = (opened if self._span is None else self._span[0], closed)
            self._used, self._earned = own.total(self.grace) - started, earned - started
        self._signal(self._tree(), signal.SIGCONT)
        self._signal(self._stopped, signal.SIGCONT)

    def windows(self) -> dict[str, float | int | bool | str]:
        """Return :meth:`DutyCycle.windows` and the pacing: the reference (cores), CPU used.

        ``reference`` is a busy peer's steady rate at the end (the median of the busy
        samples), ``busy_samples`` how many there were, ``cpu_used`` the throttled
        processes' CPU seconds and ``cpu_earned`` what they were allowed.
        """
        found = super().windows()
        found.pop("target", None)
        found.update(
            {
                "mode": "paced",
                "match": self.match or "",
                "factor": self.factor,
                "reference": self.reference,
                "busy_samples": len(self._samples),
                "cpu_used": self._used,
                "cpu_earned": self._earned,
            }
        )
        return found
