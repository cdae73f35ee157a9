"""``benchmarks/real_deployment.py`` unwinds its deployment on SIGTERM (found in run 10)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from conftest import load_benchmark


def test_a_sigterm_runs_the_cleanup_of_the_deployment() -> None:
    """A SIGTERM used to end the script without leaving its ``with`` blocks: the SuperLink
    and SuperNodes stayed up, the throttled node's processes stopped."""
    script = load_benchmark("real_deployment")
    previous = signal.getsignal(signal.SIGTERM)
    cleaned: list[str] = []

    def deployment_run() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5.0)  # the handler raises during the sleep
        finally:
            cleaned.append("deployment stopped")

    try:
        script.exit_on_sigterm()
        with pytest.raises(SystemExit) as stopped:
            deployment_run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 143
    assert cleaned == ["deployment stopped"]
