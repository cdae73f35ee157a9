"""What survives what on Flower's real deployment runtime, with the ``deploy/`` scripts' defaults.

- SuperLink restart: with its state in a database (``start-superlink.sh``'s default) the
  SuperNodes stay connected; the run that was going is ended, and the same ``flwr run`` with
  ``resume=true`` continues from the last checkpoint. With ``--in-memory`` every SuperNode ends.
- SuperNode restart with node authentication: a node killed with SIGKILL stays online on the
  SuperLink for up to 60 s, so restarting it at once fails with Flower's exit code 305;
  ``start-supernode.sh`` retries until the old registration has gone offline.

Slow (each starts a SuperLink and several SuperNodes): run by ``deploy/ci.sh``.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
from deploy_harness import deployment, kill_tree, result_of, wait_until

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.timeout(900)]
APP = Path(__file__).parent / "deploy_app"
NODE_CONFIGS = [{"partition-id": i, "num-partitions": 4} for i in range(4)]


def test_superlink_restart_keeps_supernodes_and_the_run_resumes(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    config = {
        "num-server-rounds": 5,
        "threshold": 2,
        "train-seconds": 1.0,
        "checkpoint-dir": str(ckpt),
    }
    with deployment(tmp_path) as dep:
        link = dep.start_superlink()  # the script's default: state in superlink-PORT.db
        assert list(tmp_path.glob("superlink-*.db")), link.text()[-2000:]
        dep.start_supernodes(NODE_CONFIGS)
        node_pids = {i: p.pid for i, p in dep.nodes.items()}
        run = dep.submit(APP, config)
        wait_until(lambda: "[edge round 2]" in run.text() or not run.alive(), 300, "round 2")
        assert run.alive(), run.text()[-3000:]
        kill_tree(link)  # SuperLink, SuperExec and ServerApp
        wait_until(lambda: not run.alive(), 60, "flwr run to end with its SuperLink")
        dep.start_superlink()  # same port, same database
        # the same SuperNode processes serve the resumed run: nothing restarted them
        log = dep.run_app(APP, {**config, "resume": True}, timeout=600)
        assert all(p.alive() for p in dep.nodes.values()), dep.logs()
        assert {i: p.pid for i, p in dep.nodes.items()} == node_pids
    result = result_of(log)
    assert re.search(r"resumed from .* at round [12]\b", log), log[-3000:]
    assert result["rounds"] == list(range(1, 6))
    audit = [json.loads(line) for line in (ckpt / "audit.jsonl").read_text().splitlines()]
    pairs = [(int(e["node"]), int(e["job"])) for e in audit]
    assert len(pairs) == len(set(pairs)), "an accepted update was counted twice"


def test_in_memory_superlink_restart_ends_the_supernodes(tmp_path: Path) -> None:
    with deployment(tmp_path) as dep:
        link = dep.start_superlink(in_memory=True)
        dep.start_supernodes(NODE_CONFIGS[:2])
        kill_tree(link)
        dep.start_superlink(in_memory=True)
        # the new SuperLink does not know them: each SuperNode ends at its next heartbeat
        wait_until(
            lambda: not any(p.alive() for p in dep.nodes.values()),
            120,
            "the SuperNodes to end after an in-memory SuperLink restart",
        )


def test_authenticated_supernode_restarted_at_once_outlasts_exit_code_305(tmp_path: Path) -> None:
    with deployment(tmp_path, tls=True, auth=True) as dep:
        dep.start_superlink()
        dep.start_supernodes(NODE_CONFIGS[:2])
        kill_tree(dep.nodes[0], signal.SIGKILL)  # no clean deactivation: still online
        before = dep.activated_nodes()
        restarted = dep.start_supernode(0, NODE_CONFIGS[0], register=False)
        retry = r"start-supernode: exit code 305 .* retrying in 5 s"
        wait_until(
            lambda: restarted.count(retry) >= 1 or not restarted.alive(),
            120,
            "the first attempt to fail with 305 and the script to retry",
        )
        assert restarted.alive(), restarted.text()[-3000:]
        assert restarted.count("Exit Code: 305") >= 1
        dep.wait_activated(before + 1, 150)
        assert restarted.alive(), restarted.text()[-3000:]
