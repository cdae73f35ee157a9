"""Faults on Flower's real deployment runtime: a SuperNode and the ServerApp killed with SIGKILL.

Same test app as ``test_deploy_runtime.py`` (EdgeStrategy on the wall clock, numpy clients that
"train" for ``train-seconds``). These take minutes on a small shared machine, so they are
marked ``slow`` and run by ``deploy/ci.sh``; the same faults are covered at exact clock times
by ``test_faults_inprocess.py`` in the default test command.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import psutil
import pytest
from deploy_harness import Deployment, Proc, deployment, kill_tree, result_of, wait_until

pytestmark = [pytest.mark.deployment, pytest.mark.slow, pytest.mark.timeout(900)]
APP = Path(__file__).parent / "deploy_app"
NODE_CONFIGS = [{"partition-id": i, "num-partitions": 4} for i in range(4)]


def node_id(proc: Proc) -> int:
    found = re.findall(r"SuperNode ID: (\d+)", proc.text())
    assert found, proc.text()[-2000:]
    return int(found[-1])


def descendants(proc: Proc, name: str) -> list[psutil.Process]:
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if name in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_run(dep: Deployment, run: Proc, timeout: float) -> str:
    wait_until(lambda: not run.alive(), timeout, "flwr run to finish")
    assert run.popen.returncode == 0, run.text()[-4000:]
    return run.text()


def test_supernode_killed_mid_training_then_restarted(tmp_path: Path) -> None:
    with deployment(tmp_path) as dep:
        dep.start_superlink()
        dep.start_supernodes(NODE_CONFIGS)
        run = dep.submit(
            APP,
            {
                "num-server-rounds": 8,
                "threshold": 2,
                "train-seconds": 3.0,
                "deadline": 10.0,
                "timeout": 25.0,
            },
        )
        # after the first aggregation, kill (SIGKILL, whole tree) a SuperNode that is training
        wait_until(lambda: "[edge round 1]" in run.text() or not run.alive(), 300, "round 1")
        training: list[int] = []

        def someone_training() -> bool:
            training[:] = [i for i, p in dep.nodes.items() if descendants(p, "flwr-clientapp")]
            return bool(training) or not run.alive()

        wait_until(someone_training, 120, "a SuperNode to be training")
        assert run.alive(), run.text()[-3000:]
        index = training[0]
        victim = dep.nodes[index]
        old_id = node_id(victim)
        kill_tree(victim, signal.SIGKILL)
        rounds_at_kill = run.count(r"\[edge round \d+\]")
        # the server goes on without it ...
        wait_until(
            lambda: run.count(r"\[edge round \d+\]") >= rounds_at_kill + 2 or not run.alive(),
            300,
            "two aggregations after the kill",
        )
        # ... and the restarted node (a new node id without node auth) rejoins
        before = dep.activated_nodes()
        restarted = dep.start_supernode(index, NODE_CONFIGS[index])
        dep.wait_activated(before + 1, 120)
        wait_until(lambda: restarted.count(r"SuperNode ID: \d+") >= 2, 60, "the new node id")
        new_id = node_id(restarted)
        log = wait_run(dep, run, 600)
    result = result_of(log)
    assert result["rounds"] == list(range(1, 9))
    events = result["events"]
    # its last job was never answered: late (deadline), forgotten (timeout), or the
    # SuperLink's own "node unavailable" error reply (rejected)
    missed = ("late", "forgotten", "rejected")
    killed = [t for n, kind, t, _ in events if n == old_id and kind in missed]
    assert killed, "the killed node was never noticed"
    # with a default deadline an earlier job may have been late and still accepted, and the
    # end of the run may still forget its last message: the kill is its first miss after its
    # last contribution, and the server aggregated without it after noticing it
    rounds = list(zip(result["participants"], result["times"], strict=True))
    last_part = max((t for p, t in rounds if old_id in p), default=float("-inf"))
    noticed = [t for t in killed if t > last_part]
    assert noticed, "the kill was never noticed after the node's last contribution"
    after_kill = [p for p, t in rounds if t > noticed[0]]
    assert after_kill, "no aggregation after the dead node was noticed"
    assert all(old_id not in p for p in after_kill)
    # the restarted node got a job carrying the current global, and took part again
    sent = [(t, v) for n, kind, t, v in events if n == new_id and kind == "sent"]
    assert sent, "the restarted node never got a message"
    t_sent, version = sent[0]
    done = [r for r, t in zip(result["rounds"], result["times"], strict=True) if t <= t_sent]
    assert version == max([0, *done])
    assert any(new_id in p for p in result["participants"])


def test_serverapp_killed_after_round_r_resumes_from_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    config = {
        "num-server-rounds": 6,
        "threshold": 2,
        "train-seconds": 1.0,
        "checkpoint-dir": str(ckpt),
    }
    with deployment(tmp_path) as dep:
        superlink = dep.start_superlink()
        dep.start_supernodes(NODE_CONFIGS)
        run = dep.submit(APP, config)
        state = ckpt / "state.json"

        def checkpointed_round() -> int:
            try:
                return int(json.loads(state.read_text())["round"])
            except (OSError, ValueError, KeyError):
                return 0

        wait_until(lambda: checkpointed_round() >= 2 or not run.alive(), 300, "round 2")
        assert run.alive(), run.text()[-3000:]
        servers = descendants(superlink, "flwr-serverapp")
        assert servers, "no ServerApp process found"
        for proc in servers:
            proc.kill()  # SIGKILL: no cleanup, no final checkpoint
        r = checkpointed_round()
        kill_tree(run)
        # the server comes back: a new run resumes from the checkpoint at r + 1
        log = dep.run_app(APP, {**config, "resume": True}, timeout=600)
    result = result_of(log)
    assert re.search(rf"resumed from .* at round {r}\b", log), log[-3000:]
    assert result["rounds"] == list(range(1, 7))
    audit = [json.loads(line) for line in (ckpt / "audit.jsonl").read_text().splitlines()]
    rounds = sorted({int(e["round"]) for e in audit})
    assert rounds == list(range(1, 7))
    pairs = [(int(e["node"]), int(e["job"])) for e in audit]
    assert len(pairs) == len(set(pairs)), "an accepted update was counted twice"
    # K + 1 = 3 updates per aggregation, fewer only where the nodes left out were past their
    # soft deadline (after the kill a SuperNode may hold a reply of the killed run) and the
    # strategy aggregated what it had instead of waiting (said in the log)
    per_round = [sum(1 for e in audit if int(e["round"]) == rnd) for rnd in range(1, 7)]
    assert all(1 <= n <= 3 for n in per_round), per_round
    if any(n < 3 for n in per_round):
        assert "fewer than the rule wants" in run.text() + log, per_round
    assert [len(p) for p in result["participants"]] == per_round  # the Result agrees
