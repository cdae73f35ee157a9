"""Drop-in: a plain quickstart-shaped Flower app runs EdgeStrategy through ``flwr run``.

The app in ``tests/apps/quickstart`` is shaped like Flower's ``examples/quickstart-pytorch``
(torch model, ``@app.train`` and ``@app.evaluate`` handlers, sklearn digits instead of
CIFAR-10 so that it runs offline). Its ClientApp imports nothing from flower-edge, and its
ServerApp differs from the FedAvg original (``server_app_fedavg.py``) by exactly two lines:
the import and the strategy. ``docs/dropin.md`` shows that diff and the log a user sees.

The end-to-end test runs ``flwr run APP --stream`` offline on Flower's simulation engine
(``FLWR_HOME`` and ``RAY_TMPDIR`` in a temporary folder), then stops the local SuperLink that
``flwr run`` leaves behind, by its process id.
"""

from __future__ import annotations

import ast
import difflib
import re
from pathlib import Path

import pytest
from flwr_run_harness import flwr_run

APP = Path(__file__).parent / "apps" / "quickstart"
PACKAGE = APP / "digitsexample"
#: top-level packages of flower-edge; a plain ClientApp imports none of them
FLOWER_EDGE_PACKAGES = {"flower_edge", "clients", "strategies", "simulations"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_serverapp_differs_from_the_fedavg_quickstart_by_two_lines() -> None:
    fedavg = (PACKAGE / "server_app_fedavg.py").read_text(encoding="utf-8").splitlines()
    edge = (PACKAGE / "server_app.py").read_text(encoding="utf-8").splitlines()
    changed = [
        line
        for line in difflib.unified_diff(fedavg, edge, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == [
        "-from flwr.serverapp.strategy import FedAvg",
        "+from strategies import EdgeStrategy",
        "-    strategy = FedAvg(fraction_evaluate=fraction_evaluate)",
        "+    strategy = EdgeStrategy(threshold=2, fraction_evaluate=fraction_evaluate)",
    ]


def test_the_diff_in_the_guide_is_the_apps_diff() -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "dropin.md").read_text()
    for line in (
        "-from flwr.serverapp.strategy import FedAvg",
        "+from strategies import EdgeStrategy",
        "-    strategy = FedAvg(fraction_evaluate=fraction_evaluate)",
        "+    strategy = EdgeStrategy(threshold=2, fraction_evaluate=fraction_evaluate)",
    ):
        assert line in guide.splitlines()


def _evaluate_block(text: str) -> str:
    """Return the lines of a log's "Aggregated ClientApp-side Evaluate Metrics" block."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "ClientApp-side Evaluate Metrics" in line)
    end = next(i for i in range(start, len(lines)) if "ServerApp-side Evaluate" in lines[i])
    return "\n".join(lines[start:end])


def test_the_guides_sample_log_has_fedavgs_evaluate_metrics() -> None:
    # the guide says the aggregated evaluate metrics leave the weighting key out, as FedAvg's
    # do (strategies.client_eval.aggregate_evaluate_replies): its sample log must show that
    guide = (Path(__file__).resolve().parents[1] / "docs" / "dropin.md").read_text()
    block = _evaluate_block(guide)
    assert "eval_acc" in block
    assert "num-examples" not in block, block


def test_clientapp_imports_nothing_from_flower_edge() -> None:
    for path in (PACKAGE / "client_app.py", PACKAGE / "task.py"):
        assert _imports(path) & FLOWER_EDGE_PACKAGES == set(), path
    assert "strategies" in _imports(PACKAGE / "server_app.py")  # the check can see an import


@pytest.mark.simulation
@pytest.mark.timeout(300)
def test_quickstart_app_runs_edge_through_flwr_run(tmp_path: Path) -> None:
    # EdgeStrategy(threshold=2) needs K + 1 = 3 nodes; Flower's default federation has 2
    log = flwr_run(APP, tmp_path, ["--federation-config", "num-supernodes=4"], timeout=280)
    assert "Traceback" not in log, log[-6000:]
    errors = [line for line in log.splitlines() if re.search(r"\bERROR\b", line)]
    assert errors == [], log[-6000:]
    # all three aggregations ran and the ServerApp reached its last line
    assert re.search(r"final accuracy 0\.\d{4}", log), log[-4000:]
    # client-side evaluation ran: only the ClientApp's evaluate handler reports eval_acc
    assert "eval_acc" in log, log[-4000:]
    assert "num-examples" not in _evaluate_block(log), log[-4000:]
    # FedAvg's centralised evaluation lines: once at the start, a pair per aggregation
    assert log.count("Initial global evaluation results: {'accuracy'") == 1, log[-4000:]
    assert log.count("└──> MetricRecord: {'accuracy'") == 3, log[-4000:]
    assert not (tmp_path / "final_model.pt").exists()
