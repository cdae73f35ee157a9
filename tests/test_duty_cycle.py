"""The benchmark's duty-cycle throttle (benchmarks/duty_cycle.py) stops and resumes a tree."""

from __future__ import annotations

import subprocess
import sys
import time

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
