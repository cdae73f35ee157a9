"""``flwr run .`` in this repository with 2, 6 or 20 simulated SuperNodes finishes or fails clearly.

Flower's default federation has 2 SuperNodes; the scenario ``digits-20`` has 20 clients. With
the run config's ``clients = 0`` (the default) the run takes the federation's size; a set
``clients`` that differs, or a federation too small for the scenario, is an error at once whose
message names the setting to change. Each case runs the real ``flwr run . --stream`` offline
(``FLWR_HOME`` and ``RAY_TMPDIR`` in a temporary folder) and stops the local SuperLink it leaves
behind by its pid. Slow (a Ray start per case): run by ``deploy/ci.sh``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flwr_run_harness import flwr_run

pytestmark = [pytest.mark.simulation, pytest.mark.slow, pytest.mark.timeout(400)]
REPO = Path(__file__).resolve().parents[1]


def _result(log: str) -> dict[str, object]:
    """Return the JSON result the simulation ServerApp logs last (``result: {...}``)."""
    start = log.rfind("result: {")
    assert start >= 0, log[-5000:]
    data, _ = json.JSONDecoder().raw_decode(log[start + len("result: ") :])
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("nodes", [2, 6, 20])
def test_flwr_run_finishes_with_the_federations_size(tmp_path: Path, nodes: int) -> None:
    log = flwr_run(
        REPO,
        tmp_path,
        [
            "--federation-config",
            f"num-supernodes={nodes}",
            "--run-config",
            "num-server-rounds=2",
        ],
        timeout=300,
    )
    assert "Traceback" not in log, log[-5000:]
    result = _result(log)
    assert result["clients"] == nodes
    assert result["rounds"] == 2


@pytest.mark.parametrize(
    ("nodes", "run_config", "message"),
    [
        (6, "clients=20", r"'clients' = 20 but the federation has 6 SuperNodes"),
        (1, "num-server-rounds=2", r"cannot run on 1 SuperNodes"),
    ],
)
def test_flwr_run_fails_at_once_naming_the_setting(
    tmp_path: Path, nodes: int, run_config: str, message: str
) -> None:
    log = flwr_run(
        REPO,
        tmp_path,
        ["--federation-config", f"num-supernodes={nodes}", "--run-config", run_config],
        timeout=300,
    )
    assert re.search(message, log), log[-5000:]
    assert "num-supernodes" in log
    assert "result: {" not in log
