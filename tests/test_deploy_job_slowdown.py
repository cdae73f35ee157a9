"""The real-deployment benchmark measures how much slower the slowed node's jobs were."""

from __future__ import annotations

import pytest
from conftest import load_benchmark


def test_job_slowdown_compares_median_job_times_from_the_timeline() -> None:
    curves = load_benchmark("deploy_curves")
    timeline = [
        [0.0, 1, 1, "sent", 0, 0],
        [0.0, 2, 2, "sent", 0, 0],
        [0.0, 9, 3, "sent", 0, 0],
        [0.5, 1, 1, "profiled", 0, 0],
        [2.0, 1, 1, "finished", 0, 10],
        [4.0, 2, 2, "finished", 0, 10],
        [4.0, 1, 4, "sent", 1, 0],
        [7.0, 1, 4, "finished", 1, 10],
        [30.0, 9, 3, "finished", 0, 10],
    ]
    found = curves.job_slowdown(timeline, slow_node=9)
    assert found == {
        "slow_job": 30.0,
        "other_job": 3.0,
        "ratio": pytest.approx(10.0),
        "slow_jobs": 1,
    }
    assert curves.job_slowdown(timeline[:8], slow_node=9) is None  # the slowed node never finished
    assert curves.job_slowdown([], slow_node=9) is None
