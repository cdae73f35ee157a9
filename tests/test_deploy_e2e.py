"""The user-facing deployment app (``deploy/app``) on Flower's runtime: TLS, node auth, K = 2.

A SuperLink and four SuperNodes on 127.0.0.1 (free ports, each node with its own
``--node-config``), started with the repository's ``deploy/`` scripts, run the deployment app
(``deploy/app``: EdgeStrategy on the wall clock, the digits MLP client) for 3 aggregations with
K = 2. Every process is stopped by its pid at the end (``deploy_harness``). Each ClientApp
process imports torch and trains for real, so this takes minutes on a small machine: it is
marked ``slow`` and run by ``deploy/ci.sh``; ``test_deploy_runtime.py`` covers the same runtime
path in the default test command with numpy clients.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_harness import DEPLOY, deployment, result_of

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.timeout(600)]
APP = DEPLOY / "app"
NODE_CONFIGS = [{"partition-id": i, "num-partitions": 4} for i in range(4)]


def test_edge_strategy_over_tls_with_node_auth(tmp_path: Path) -> None:
    with deployment(tmp_path, tls=True, auth=True) as dep:
        dep.start_superlink()
        dep.start_supernodes(NODE_CONFIGS)
        log = dep.run_app(
            APP,
            {"num-server-rounds": 3, "threshold": 2, "min-nodes": 4, "deadline": 120.0},
            timeout=540,
        )
        result = result_of(log)
        assert result["rounds"] == [1, 2, 3]
        participants = result["participants"]
        assert isinstance(participants, list)
        assert all(len(p) == 3 for p in participants), participants  # K + 1 updates each
        assert len(result["nodes"]) >= 3  # type: ignore[arg-type]
        accuracy = result["accuracy"]
        assert isinstance(accuracy, dict)
        assert sorted(accuracy) == ["0", "1", "2", "3"]
        assert accuracy["3"] > accuracy["0"]  # the digits MLP learns from the first rounds
        assert result["rejected"] == 0
        # the logs: 4 nodes registered, three aggregations, each node trained its own partition
        assert "edge: 4 nodes registered" in log
        assert len(re.findall(r"\[edge round \d\]", log)) == 3
        assert dep.activated_nodes() == 4
        for index in range(4):
            assert dep.nodes[index].alive()
        assert "Traceback" not in dep.superlink.text()  # type: ignore[union-attr]
