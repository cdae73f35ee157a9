"""Checkpoints: atomic files, resume continues identically, the audit counts nothing twice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_strategy_toys import ToyEdge, accuracy_fn, as_numpy, model

from flower_edge.errors import ConfigError, InputError
from strategies import (
    CheckpointStore,
    EdgeStrategy,
    InProcessGrid,
    ManualClock,
    ShareConfig,
    VirtualClock,
)
from strategies.checkpoint import AUDIT_FILE, STATE_FILE

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="seed")


def _run(rounds: int, directory: Path | None = None, resume: bool = False):  # type: ignore[no-untyped-def]
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    strategy = EdgeStrategy(
        threshold=3,  # K = n - 1: every node takes part in every round
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        checkpoint_dir=directory,
        resume=resume,
    )
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return strategy, result


def _without_jobs(strategy: EdgeStrategy) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for record in strategy.history:
        data = record.to_json()
        del data["job_ids"]
        out.append(data)
    return out


def test_resume_after_round_two_continues_identically(tmp_path: Path) -> None:
    whole, whole_result = _run(4)
    first, _ = _run(2, tmp_path)
    assert len(first.history) == 2
    resumed, resumed_result = _run(4, tmp_path, resume=True)
    assert _without_jobs(resumed) == _without_jobs(whole)
    for a, b in zip(as_numpy(whole_result.arrays), as_numpy(resumed_result.arrays), strict=True):
        assert a.tobytes() == b.tobytes()
    assert resumed_result.evaluate_metrics_serverapp == whole_result.evaluate_metrics_serverapp
    assert set(resumed_result.train_metrics_clientapp) == {1, 2, 3, 4}
    # every accepted update is in the audit exactly once; job ids keep increasing
    audit = CheckpointStore(tmp_path).audit()
    assert [e["round"] for e in audit] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    pairs = [(e["node"], e["job"]) for e in audit]
    assert len(set(pairs)) == len(pairs)
    before = max(e["job"] for e in audit if e["round"] <= 2)
    assert min(e["job"] for e in audit if e["round"] > 2) > before
    # resumed jobs do not reuse an id that a killed run might have handed out
    assert min(e["job"] for e in audit if e["round"] > 2) > 1_000_000_000


def test_a_run_killed_between_audit_and_state_write_counts_nothing_twice(tmp_path: Path) -> None:
    _run(2, tmp_path)
    store = CheckpointStore(tmp_path)
    # the killed run had aggregated round 3 into the audit but not into state.json
    store.append_audit([{"round": 3, "node": 1001, "job": 9, "base_version": 2, "weight": 1.0}])
    _run(3, tmp_path, resume=True)
    audit = store.audit()
    assert [e["round"] for e in audit].count(3) == 4
    assert {"round": 3, "node": 1001, "job": 9, "base_version": 2, "weight": 1.0} not in audit


def test_checkpoint_files_are_plain_json_and_npz(tmp_path: Path) -> None:
    _run(1, tmp_path)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["round"] == 1
    assert state["keys"] == ["w", "steps"]
    with np.load(tmp_path / state["arrays_file"], allow_pickle=False) as data:
        assert sorted(data.files) == ["a0", "a1"]
    assert (tmp_path / AUDIT_FILE).is_file()
    assert not list(tmp_path.glob(".*.tmp"))
    _run(2, tmp_path, resume=True)
    assert sorted(p.name for p in tmp_path.glob("global-*.npz")) == ["global-000002.npz"]


def test_resume_without_a_checkpoint_starts_from_scratch(tmp_path: Path) -> None:
    strategy, _ = _run(1, tmp_path / "empty", resume=True)
    assert len(strategy.history) == 1


def test_resume_with_another_model_raises(tmp_path: Path) -> None:
    _run(1, tmp_path)
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = EdgeStrategy(
        threshold=3,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        checkpoint_dir=tmp_path,
        resume=True,
    )
    from flwr.app import Array, ArrayRecord

    other = ArrayRecord({"v": Array(np.zeros(2, np.float32))})
    with pytest.raises(ConfigError, match="holds a different model"):
        strategy.start(grid, other, num_rounds=2)
    assert grid.pushed == []


def test_an_unreadable_checkpoint_raises(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    with pytest.raises(InputError, match="cannot be read"):
        CheckpointStore(tmp_path).load()


def test_wall_clock_times_count_from_the_start_and_carry_on_after_a_resume(
    tmp_path: Path,
) -> None:
    def run(clock: ManualClock, rounds: int, resume: bool) -> EdgeStrategy:
        grid = InProcessGrid(ToyEdge(), 4, clock=clock, latency=lambda n, m: float(n % 100))
        strategy = EdgeStrategy(
            threshold=3, clock=clock, shares=SHARES, checkpoint_dir=tmp_path, resume=resume
        )
        strategy.start(grid, model(0.0), num_rounds=rounds)
        return strategy

    first = run(ManualClock(start=1000.0), 1, resume=False)
    assert first.history[0].time == pytest.approx(4.0, abs=0.1)  # slowest node: 4 s
    resumed = run(ManualClock(start=7.0), 2, resume=True)  # another host, another reading
    assert resumed.history[0].time == first.history[0].time
    assert resumed.history[1].time > first.history[0].time
    assert resumed.history[1].time < first.history[0].time + 10.0
