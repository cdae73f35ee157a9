"""Drop-in: EdgeStrategy's plateau stop can end a run before ``num_rounds``; the guide says so.

Found by a new-user probe: a Flower app that swaps FedAvg for ``EdgeStrategy(threshold=K)``
and asks for ``num_rounds=200`` got 22 rounds (``evaluate_fn``'s accuracy on a plateau), where
FedAvg always runs every round; docs/dropin.md did not mention it nor how to turn it off.
"""

from __future__ import annotations

from pathlib import Path

from conftest import make_dropin_app, model
from flwr.app import ArrayRecord, MetricRecord

from strategies import EdgeStrategy, InProcessGrid, StopConfig

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "dropin.md"


def _flat(_: int, __: ArrayRecord) -> MetricRecord:
    return MetricRecord({"accuracy": 0.5})


def test_the_default_plateau_stop_ends_before_num_rounds() -> None:
    strategy = EdgeStrategy(threshold=2)
    result = strategy.start(InProcessGrid(make_dropin_app(), 4), model(0.0), 60, evaluate_fn=_flat)
    assert strategy.stop_kind == "convergence"
    assert strategy.stop_reason.startswith("plateau")
    assert max(result.evaluate_metrics_serverapp) < 60


def test_stopconfig_without_criteria_runs_every_round_as_fedavg() -> None:
    strategy = EdgeStrategy(threshold=2, stop=StopConfig())
    result = strategy.start(InProcessGrid(make_dropin_app(), 4), model(0.0), 60, evaluate_fn=_flat)
    assert strategy.stop_kind == "rounds"
    assert max(result.evaluate_metrics_serverapp) == 60


def test_the_guide_says_the_run_can_end_early_and_how_to_run_every_round() -> None:
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    assert "The run can end before `num_rounds`." in text
    assert "`stop=StopConfig()`" in text
