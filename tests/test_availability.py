"""The abandon rule's availability on a wall clock (seed 001's client decision).

Found by a new-user probe: a node read its own training as load (host availability 0.028 at
a preemption point), while the server derived theta from scores with availability taken as
1, so on a wall clock no node ever abandoned (92 offers, 0 abandons in a 4-node run). Now the
node's own CPU time does not count against it, each reply reports the availability, and the
server derives theta from the scores as the clients compute them.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

import clients.node as node_module
from flower_edge import wire
from flower_edge.decision import derive_theta, linear_resources
from strategies.abandon import AbandonPolicy
from strategies.config import AbandonConfig
from strategies.records import parse_train_reply


def _fake_samples(monkeypatch: pytest.MonkeyPatch, samples: list[tuple[float, ...]]) -> None:
    it = iter(samples)
    monkeypatch.setattr(node_module, "_cpu_sample", lambda: next(it))
    monkeypatch.setattr(node_module, "_last_sample", None)
    monkeypatch.setattr(node_module.time, "sleep", lambda s: None)

    class Mem:
        available, total = 8.0, 8.0

    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: Mem())


def test_the_nodes_own_training_does_not_count_as_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # (wall, host cpu s, host idle s, own cpu s): 2 cores for 1 s = 2 cpu s
    _fake_samples(
        monkeypatch,
        [
            (0.0, 0.0, 0.0, 0.0),
            (1.0, 2.0, 1.0, 1.0),  # busy 1 s, all of it this process: fully available
            (2.0, 4.0, 1.5, 1.5),  # busy 1.5 s, 0.5 s ours: others used 1 of 2
        ],
    )
    assert node_module.host_availability() == pytest.approx(1.0)
    assert node_module.host_availability() == pytest.approx(0.5)


def test_the_first_reading_waits_for_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    _fake_samples(monkeypatch, [(5.0, 10.0, 9.0, 0.0), (5.05, 10.1, 9.05, 0.0)])
    monkeypatch.setattr(node_module.time, "sleep", slept.append)
    assert node_module.host_availability() == pytest.approx(0.5)  # others busy 0.05 of 0.1
    assert slept == [node_module.AVAILABILITY_WINDOW]


def test_the_server_derives_theta_from_the_scores_the_clients_compute() -> None:
    policy = AbandonPolicy(AbandonConfig(), enabled=True)
    ratios = {1: 0.9, 2: 0.4, 3: 0.1, 4: 0.05}
    values = {1: 0.1, 2: 0.4, 3: 0.3, 4: 0.2}
    available = {1: 0.2, 2: 1.0, 3: 0.5}  # node 4 never reported: 1
    policy.refresh(ratios, values, list(values.values()), available)
    r = linear_resources(list(ratios.values()))
    scaled = [float(x) * available.get(i, 1.0) for i, x in zip(ratios, r, strict=True)]
    expected = derive_theta(scaled, list(values.values()), 0.5, 0.5)
    assert policy.theta == pytest.approx(expected)
    scores = [0.5 * s + 0.5 * v for s, v in zip(scaled, values.values(), strict=True)]
    brute = statistics.median(scores)
    assert policy.theta == pytest.approx(brute)
    # R sent to the clients stays before availability (they scale it themselves)
    assert policy.fields(1)[wire.RESOURCE] == pytest.approx(float(r[0]))


@pytest.mark.parametrize(("sent", "read"), [(0.25, 0.25), (1.5, None), (float("nan"), None)])
def test_a_reply_reports_its_availability(sent: float, read: float | None) -> None:
    query = Message(RecordDict({}), 1001, "train")
    metrics = MetricRecord({wire.NUM_EXAMPLES: 10, wire.AVAILABILITY: sent})
    arrays = ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))})
    reply = Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=query)
    parsed = parse_train_reply(reply, ("w",))
    assert parsed.availability == read
    assert wire.AVAILABILITY not in dict(parsed.app_metrics)
