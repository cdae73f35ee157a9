"""The slice budget: fixed, or chosen from the overhead measured on the run."""

from __future__ import annotations

import pytest

from flower_edge.slicing import slice_budget_for_overhead
from strategies.config import LoopConfig
from strategies.slices import INITIAL_BUDGET, MIN_SAMPLES, SliceBudget


def test_slices_are_on_by_default() -> None:
    assert LoopConfig().slice_budget == "auto"
    assert SliceBudget(LoopConfig(), virtual=True).current() == INITIAL_BUDGET > 0
    assert SliceBudget(LoopConfig(), virtual=False).current() == INITIAL_BUDGET


def test_a_number_is_sent_as_is() -> None:
    budget = SliceBudget(LoopConfig(slice_budget=2.5), virtual=False)
    for job in range(5):
        budget.observe(job, 100.0, 1.0, restarted=True)
    assert budget.current() == 2.5
    assert SliceBudget(LoopConfig(slice_budget=0.0), virtual=False).current() == 0.0


def test_wall_clock_budget_follows_the_measured_overhead() -> None:
    budget = SliceBudget(LoopConfig(), virtual=False)
    # job 1: three slices, cumulative train seconds 2, 4, 6; round trips 2.5 each -> 0.5 s
    budget.observe(1, 2.5, 2.0, restarted=True)
    budget.observe(1, 2.5, 4.0, restarted=False)
    assert budget.current() == INITIAL_BUDGET  # fewer than MIN_SAMPLES replies yet
    budget.observe(1, 2.5, 6.0, restarted=False)
    assert MIN_SAMPLES == 3
    assert budget.overhead() == pytest.approx(0.5)
    assert budget.current() == pytest.approx(slice_budget_for_overhead(0.5))  # 10 x 0.5 = 5
    # an abandon restarts the job's seconds: 1.0 s of training in a 4.0 s round trip -> 3.0
    budget.observe(1, 4.0, 1.0, restarted=True)
    budget.observe(2, 4.0, 1.0, restarted=True)
    budget.observe(2, 4.0, 2.0, restarted=False)
    budget.finished(2)
    # gaps 0.5, 0.5, 0.5, 3, 3, 3 -> median 1.75 -> 17.5 s
    assert budget.overhead() == pytest.approx(1.75)
    assert budget.current() == pytest.approx(17.5)


def test_virtual_clock_budget_never_adapts() -> None:
    budget = SliceBudget(LoopConfig(), virtual=True)
    for job in range(10):
        budget.observe(job, 50.0, 1.0, restarted=True)
    assert budget.current() == INITIAL_BUDGET


def test_auto_or_a_number_only() -> None:
    from flower_edge.errors import ConfigError

    with pytest.raises(ConfigError, match="slice_budget"):
        LoopConfig(slice_budget="often")  # type: ignore[arg-type]


def test_an_automatic_budget_fits_in_half_the_deadline() -> None:
    budget = SliceBudget(LoopConfig(deadline=12.0), virtual=False)
    assert budget.current() == 6.0  # min(10, 12 / 2)
    for job in range(4):
        budget.observe(job, 2.1, 0.1, restarted=True)  # 2 s overhead -> 20 s wanted
    assert budget.current() == 6.0
    fixed = SliceBudget(LoopConfig(deadline=12.0, slice_budget=30.0), virtual=False)
    assert fixed.current() == 30.0  # a number is the user's: sent as is
