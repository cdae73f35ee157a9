"""Flower's deployment runtime on loopback with the tiny app: insecure, TLS and node auth."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_harness import deployment, wait_until

pytestmark = pytest.mark.deployment
APP = Path(__file__).parent / "deploy_app"


def _final(log: str) -> list[float]:
    found = re.findall(r"DEPLOYAPP-FINAL ([-0-9.,]+)", log)
    assert found, log[-4000:]
    return [float(v) for v in found[-1].split(",")]


def test_tls_and_node_auth_run_the_app_and_refuse_unknown_nodes(tmp_path: Path) -> None:
    with deployment(tmp_path, tls=True, auth=True) as dep:
        dep.start_superlink()
        dep.start_supernodes([{"partition-id": i, "num-partitions": 4} for i in range(4)])
        # a node whose key was never registered is refused by the SuperLink
        intruder = dep.start_supernode(5, {"partition-id": 0, "num-partitions": 4}, register=False)
        wait_until(lambda: not intruder.alive(), 60, "the unregistered SuperNode to give up")
        assert intruder.popen.returncode != 0
        assert "Failed to activate SuperNode" in intruder.text()
        log = dep.run_app(APP, {"num-server-rounds": 2}, timeout=120)
        # each round adds the mean of (partition-id + 1) over the 4 nodes = 2.5
        assert _final(log) == [5.0, 5.0, 5.0]
        assert dep.activated_nodes() == 4
