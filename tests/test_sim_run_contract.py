"""What a simulation run reports about itself: wasted compute, why it stopped, what it was.

Checked on a toy federation against the toy client's own account of its jobs, and on one
short in-process run of digits-20 (edge, 3 aggregations).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import pytest
from conftest import EQUAL, ToyEdge, accuracy_fn, model, virtual

if TYPE_CHECKING:
    from simulations.report import RunResult


@pytest.fixture(scope="module")
def edge_run() -> RunResult:
    """digits-20, edge, seed 0, 3 aggregations, in process (about 5 s of CPU)."""
    import torch

    from simulations.app import SimSettings
    from simulations.runner import run_experiment

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        settings = SimSettings.create("digits-20", "edge", seed=0, rounds=3)
        return run_experiment(settings, engine="inprocess")
    finally:
        torch.set_num_threads(threads)


def test_an_update_left_out_by_drop_worst_is_wasted_compute() -> None:
    """Found by a new-user probe: ``wasted_compute_fraction`` counted only abandoned jobs,
    where the docs say it also counts finished updates the server did not aggregate (here
    the one ``drop_worst`` left out)."""
    from simulations.recorder import RecordingGrid
    from simulations.server import unused_updates
    from strategies import EdgeStrategy, ValuationConfig
    from strategies.inprocess import InProcessGrid

    toy = ToyEdge()
    clock = virtual()
    grid = RecordingGrid(InProcessGrid(toy, 4), clock=clock)
    strategy = EdgeStrategy(
        threshold=2,
        clock=clock,
        shares=EQUAL,
        decay="constant",
        valuation=ValuationConfig(drop_worst=True),
    )
    result = strategy.start(grid, model(0.0), num_rounds=1, evaluate_fn=accuracy_fn(1.0))
    record = strategy.history[0]
    assert result.train_metrics_clientapp[1]["dropped-updates"] == 1
    (left_out,) = [i for i, w in enumerate(record.weights) if w == 0.0]
    dropped = (record.participants[left_out], record.job_ids[left_out])
    assert unused_updates(strategy, result) == {dropped}
    # the toy client's own account: its step counter (0 in the initial model) = samples trained
    share = int(toy.returned[dropped][1][0])
    assert share > 0
    ledger = grid.ledger
    expected = (share + ledger.samples(ledger.abandoned_slices)) / ledger.samples()
    unused = ledger.slices_of(unused_updates(strategy, result))
    assert ledger.samples(unused) == share
    assert ledger.wasted_fraction(unused) == pytest.approx(expected)


def test_the_run_counts_and_draws_the_updates_it_left_out(edge_run: RunResult) -> None:
    """Found by a new-user probe: the edge preset's dropped updates were not wasted compute,
    and the timeline's "wasted" legend entry had nothing that could be drawn in it."""
    kinds = Counter(span.kind for span in edge_run.timeline)
    dropped = edge_run.extras["dropped_updates"]
    assert dropped >= 1
    assert kinds["wasted"] >= dropped  # each left-out update has one slice or more
    assert edge_run.wasted_compute_fraction > 0.0
