"""The benchmark's duty-cycle throttle (benchmarks/duty_cycle.py) stops and resumes a tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from types import ModuleType

import psutil
import pytest
from conftest import load_benchmark


def test_the_throttle_measures_its_run_windows_and_resumes_the_tree() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with duty_cycle.DutyCycle(child.pid, 4.0, period=0.05) as duty:
            time.sleep(0.6)
            stopped = False
            for _ in range(40):  # the tree is stopped for 3/4 of each period
                stopped |= psutil.Process(child.pid).status() == psutil.STATUS_STOPPED
                time.sleep(0.005)
        assert stopped
        windows = duty.windows()
        assert windows["count"] >= 5
        assert windows["target"] == pytest.approx(0.0125)
        assert windows["target"] <= windows["median"] <= windows["max"]
        assert isinstance(windows["boosted"], bool)
        time.sleep(0.05)
        assert psutil.Process(child.pid).status() != psutil.STATUS_STOPPED
    finally:
        child.kill()
        child.wait()


def test_the_throttle_rejects_a_speed_up_and_an_empty_period() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    with pytest.raises(ValueError, match="slow factor"):
        duty_cycle.DutyCycle(1, 0.5)
    with pytest.raises(ValueError, match="period"):
        duty_cycle.DutyCycle(1, 2.0, period=0.0)
    assert duty_cycle.DutyCycle(1, 2.0).windows() == {"count": 0, "boosted": False}


def test_the_reference_is_the_median_busy_sample_and_held_while_none_works() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    assert duty_cycle.reference_rate([0.2, 0.3, 0.01, 0.25], busy=0.05, held=1.0) == 0.25
    assert duty_cycle.reference_rate([0.0, 0.01], busy=0.05, held=0.3) == 0.3
    assert duty_cycle.reference_rate([], busy=0.05, held=0.3) == 0.3


def test_process_cpu_reads_a_process_clock_and_none_once_it_is_gone() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 0.4: pass"]
    )
    time.sleep(0.2)
    first = duty_cycle.process_cpu(child.pid)
    child.wait()
    assert first is not None
    assert 0.0 < first < 5.0
    assert duty_cycle.process_cpu(child.pid) is None


MARK = "paced-me"


def _spinner(tag: str = MARK) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"while True: pass  # {tag}"])


def test_the_paced_throttle_holds_matching_processes_at_a_fraction_of_a_busy_peer() -> None:
    # twice as many busy peers as cores: each gets about half a core, and the plain duty
    # cycle (1/4 of the time, close to a whole core in each window) would give the paced
    # process about half a peer's rate; the paced throttle gives it a quarter. The tree's
    # root does not match and keeps a peer's speed (the SuperNode's runtime, in the benchmark)
    duty_cycle = load_benchmark("duty_cycle")
    peers = [_spinner() for _ in range(min(8, 2 * (os.cpu_count() or 1)))]
    root = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            # the child's mark is put together here, so the root's own command line lacks it
            f"mark = {MARK[:3]!r} + {MARK[3:]!r}\n"
            "time.sleep(0.5)\n"  # the child starts under the throttle, as a ClientApp does
            "subprocess.Popen([sys.executable, '-c', 'while True: pass  # ' + mark])\n"
            "while True: pass",
        ]
    )
    try:
        pids = [peer.pid for peer in peers]
        with duty_cycle.PacedThrottle(root.pid, pids, 4.0, match=MARK, sample=0.25) as paced:
            time.sleep(1.2)  # the child starts and the first references come in
            (child,) = psutil.Process(root.pid).children()
            p0, c0, r0 = (
                _cpu(duty_cycle, pids),
                _cpu(duty_cycle, [child.pid]),
                _cpu(duty_cycle, [root.pid]),
            )
            time.sleep(2.0)
            p1, c1, r1 = (
                _cpu(duty_cycle, pids),
                _cpu(duty_cycle, [child.pid]),
                _cpu(duty_cycle, [root.pid]),
            )
            for peer in peers:
                peer.kill()
                peer.wait()
            time.sleep(1.0)  # no peer busy: the reference is held, the process stays slow
            c2 = _cpu(duty_cycle, [child.pid])
        peer_rate = (p1 - p0) / len(peers)
        ratio = (c1 - c0) / peer_rate
        assert 0.15 <= ratio <= 0.38, ratio  # 1/4 of a peer's rate, whatever the host's load
        assert r1 - r0 >= 0.6 * peer_rate  # the root does not match: not paced
        assert c2 - c1 <= 0.6 * paced.reference  # not a whole core once alone
        found = paced.windows()
        assert found["mode"] == "paced"
        assert found["match"] == MARK
        assert found["busy_samples"] > 0
        assert found["cpu_used"] == pytest.approx(found["cpu_earned"], abs=0.05)
        time.sleep(0.05)
        assert child.status() != psutil.STATUS_STOPPED
    finally:
        for proc in psutil.Process(root.pid).children():
            proc.kill()
        for proc in (*peers, root):
            proc.kill()
            proc.wait()


def _cpu(duty_cycle: ModuleType, pids: list[int]) -> float:
    return sum(duty_cycle.process_cpu(pid) or 0.0 for pid in pids)


def test_the_paced_throttle_rejects_a_bad_reference() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    with pytest.raises(ValueError, match="initial reference rate"):
        duty_cycle.PacedThrottle(1, [2], 4.0, initial=0.0)
    with pytest.raises(ValueError, match="slow factor"):
        duty_cycle.PacedThrottle(1, [2], 0.5)


def test_a_process_is_matched_once_it_has_called_exec() -> None:
    # a SuperExec forks and then execs flwr-clientapp: a look-up between the two sees the
    # parent's command line, and a later one must still find the ClientApp
    duty_cycle = load_benchmark("duty_cycle")
    script = (
        "import os, sys, time\n"
        "time.sleep(0.6)\n"
        f"mark = {MARK[:3]!r} + {MARK[3:]!r}\n"
        "os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)  # ' + mark])"
    )
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        clock = duty_cycle._TreeClock(root.pid, MARK)
        time.sleep(0.2)
        clock.refresh()
        assert clock.procs == []  # before exec: the command line lacks the mark
        time.sleep(1.0)
        clock.refresh()
        assert [proc.pid for proc in clock.procs] == [root.pid]
    finally:
        root.kill()
        root.wait()


def test_a_process_is_counted_and_paced_only_past_its_grace() -> None:
    duty_cycle = load_benchmark("duty_cycle")
    script = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    root = subprocess.Popen([sys.executable, "-c", script + f"time.sleep(30)  # {MARK}"])
    try:
        time.sleep(1.0)  # it has used its 0.3 s of CPU (and its start-up) and sleeps
        clock = duty_cycle._TreeClock(root.pid, MARK)
        clock.refresh()  # after its exec: right after Popen its command line may lack the mark
        cpu = duty_cycle.process_cpu(root.pid)
        assert cpu is not None
        assert cpu >= 0.3
        assert clock.total(grace=0.1) == pytest.approx(cpu - 0.1, abs=0.01)
        assert [proc.pid for proc in clock.past_grace()] == [root.pid]
        fresh = duty_cycle._TreeClock(root.pid, MARK)
        fresh.refresh()
        assert fresh.total(grace=10.0) == 0.0  # within its grace: not counted, not paced
        assert fresh.past_grace() == []
    finally:
        root.kill()
        root.wait()
    with pytest.raises(ValueError, match="grace"):
        duty_cycle.PacedThrottle(1, [2], 4.0, grace=-1.0)
