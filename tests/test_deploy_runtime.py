"""EdgeStrategy on Flower's real deployment runtime, on loopback: TLS, node auth, K = 2.

A SuperLink and four SuperNodes on 127.0.0.1 (free ports chosen at run time, each node with
its own ``--node-config``), started with the repository's ``deploy/`` scripts, run the test app
(``tests/deploy_app``: EdgeStrategy on the server's wall clock, numpy clients that add
``partition-id + 1`` to the global model) for 3 aggregations with K = 2, over TLS with
SuperNode authentication. An unregistered SuperNode is refused. Every process started is
stopped by its pid at the end (``deploy_harness``), whatever happens.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_harness import deployment, result_of, wait_until

pytestmark = [pytest.mark.deployment, pytest.mark.timeout(180)]
APP = Path(__file__).parent / "deploy_app"
NODE_CONFIGS = [{"partition-id": i, "num-partitions": 4} for i in range(4)]


def test_edge_strategy_k2_over_tls_with_node_auth(tmp_path: Path) -> None:
    with deployment(tmp_path, tls=True, auth=True) as dep:
        dep.start_superlink()
        intruder = dep.start_supernode(5, NODE_CONFIGS[0], register=False)
        dep.start_supernodes(NODE_CONFIGS)
        log = dep.run_app(APP, {"num-server-rounds": 3, "threshold": 2}, timeout=150)
        # a SuperNode whose key was never registered was refused (Flower's exit code 305)
        wait_until(lambda: not intruder.alive(), 60, "the unregistered SuperNode to give up")
        assert intruder.popen.returncode != 0
        assert "Failed to activate SuperNode" in intruder.text()
        result = result_of(log)
        # 3 aggregations of K + 1 = 3 updates each (a node may send a stale and a fresh one)
        assert result["rounds"] == [1, 2, 3]
        assert all(len(p) == 3 for p in result["participants"]), result["participants"]
        nodes = {int(n) for n in result["partitions"]}
        assert {n for p in result["participants"] for n in p} <= nodes
        # every node replied with its own --node-config: partition ids 0..3, one per node
        assert sorted(result["partitions"].values()) == [0, 1, 2, 3]
        # each update is global + (partition-id + 1): the global grows by 1..4 per round
        w0 = result["w0"]
        assert w0["0"] == 0.0
        assert 1.0 <= w0["1"] <= 4.0
        assert w0["3"] > w0["1"]
        assert len(set(result["global"])) == 1
        # the logs: 4 nodes registered, three aggregations, no crash anywhere
        assert "edge: 4 nodes registered" in log
        assert len(re.findall(r"\[edge round \d\]", log)) == 3
        assert dep.activated_nodes() == 4
        assert all(dep.nodes[i].alive() for i in range(4))
        assert dep.superlink is not None
        assert "Traceback" not in dep.superlink.text()
