"""Checkpoints: atomic files, resume continues identically, the audit counts nothing twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, as_numpy, model

import strategies.loop
from flower_edge.errors import ConfigError, InputError
from strategies import (
    CheckpointStore,
    EdgeStrategy,
    FedBuff,
    InProcessGrid,
    ManualClock,
    ShareConfig,
    StopConfig,
    VirtualClock,
)
from strategies.checkpoint import AUDIT_FILE, BUFFER_FILE, STATE_FILE, audit_entries

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="seed")


def _run(  # type: ignore[no-untyped-def]
    rounds: int,
    directory: Path | None = None,
    resume: bool = False,
    stop: StopConfig | None = None,
    evaluate_fn=None,  # default: accuracy_fn()
):
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    strategy = EdgeStrategy(
        threshold=3,  # K = n - 1: every node takes part in every round
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        stop=stop,
        checkpoint_dir=directory,
        resume=resume,
    )
    evaluate = accuracy_fn() if evaluate_fn is None else evaluate_fn
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=evaluate)
    return strategy, result


def _without_jobs(strategy: EdgeStrategy) -> list[dict]:  # type: ignore[type-arg]
    out = []
    for record in strategy.history:
        data = record.to_json()
        del data["job_ids"]
        out.append(data)
    return out


def _resumable(directory: Path, *, resume: bool) -> EdgeStrategy:
    """K = 2 on a manual virtual clock, fixed equal shares, checkpointed in ``directory``."""
    return EdgeStrategy(
        threshold=2,
        clock=VirtualClock(wall=ManualClock()),
        shares=ShareConfig(profile=False, total_samples=400, rebalance="off"),
        checkpoint_dir=directory,
        resume=resume,
    )


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


class _KilledError(Exception):
    """Stands for a kill of the server process."""


def test_a_run_killed_between_state_and_buffer_write_counts_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the kill comes after round 2's state is written, before its emptied buffer is: the
    # buffer file still lists round 2's updates, which the audit holds already
    whole, whole_result = _run(4)
    save_run = CheckpointStore.save_run

    def killed_after_state(self: CheckpointStore, record: Any, *rest: Any) -> None:
        if record.round < 2:
            return save_run(self, record, *rest)
        keys, arrays, state, _, *average = rest
        self.append_audit(audit_entries(record))
        self.save(record.round, keys, arrays, state.to_json(), *average)
        raise _KilledError

    with monkeypatch.context() as patch:
        patch.setattr(CheckpointStore, "save_run", killed_after_state)
        with pytest.raises(_KilledError):
            _run(4, tmp_path)
    assert len(json.loads((tmp_path / BUFFER_FILE).read_text())) == 4  # round 2's updates
    resumed, resumed_result = _run(4, tmp_path, resume=True)
    assert _without_jobs(resumed) == _without_jobs(whole)
    for a, b in zip(as_numpy(whole_result.arrays), as_numpy(resumed_result.arrays), strict=True):
        assert a.tobytes() == b.tobytes()
    pairs = [(e["node"], e["job"]) for e in CheckpointStore(tmp_path).audit()]
    assert len(pairs) == 16
    assert len(set(pairs)) == len(pairs)


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


class ServerKilledError(RuntimeError):
    pass


def test_updates_accepted_between_aggregations_survive_a_kill(tmp_path: Path) -> None:
    toy = ToyEdge()  # durations 10.5, 5.5, 3.0, 1.75 s
    evaluate = accuracy_fn()

    def dies_in_round_2(rnd: int, arrays):  # type: ignore[no-untyped-def]
        if rnd == 2:
            raise ServerKilledError("server killed while aggregating round 2")
        return evaluate(rnd, arrays)

    killed = _resumable(tmp_path, resume=False)
    with pytest.raises(ServerKilledError):
        killed.start(InProcessGrid(toy, 4), model(0.0), num_rounds=3, evaluate_fn=dies_in_round_2)
    finished = [e for e in killed.events if e.kind == "finished"]
    after_round_1 = [(e.node_id, e.job_id) for e in finished if e.version == 1]
    # accepted after round 1 (base version 1), then a stale update (base 0) triggered round 2,
    # whose evaluation died
    assert [n for n, _ in after_round_1[:2]] == [1004, 1003]
    buffered = [*after_round_1[:2], (finished[-1].node_id, finished[-1].job_id)]
    assert finished[-1].version == 0
    store = CheckpointStore(tmp_path)
    saved = store.buffered(2)
    # the trigger is persisted before aggregating, so the kill loses none of the three
    assert [(e["node"], e["job"]) for e, _ in saved] == buffered[:3]
    for (entry, arrays), key, base in zip(saved, buffered, (1, 1, 0), strict=True):
        for a, b in zip(arrays, toy.returned[key], strict=True):
            np.testing.assert_array_equal(a, b)  # exactly what the client sent
        assert entry["base_version"] == base

    resumed = _resumable(tmp_path, resume=True)
    fresh = ToyEdge()
    resumed.start(InProcessGrid(fresh, 4), model(0.0), num_rounds=3, evaluate_fn=evaluate)
    second = resumed.history[1]
    assert second.round == 2
    # round 2 is redone at once on resume, from exactly the three persisted updates
    assert list(zip(second.participants, second.job_ids, strict=True)) == buffered[:3]
    assert second.delays[:2] == pytest.approx((1.75, 3.0))
    assert store.buffered(2) == []  # emptied by the aggregation of round 3
    assert not list(tmp_path.glob("update-*.npz"))
    audit = [(e["node"], e["job"]) for e in store.audit()]
    assert len(audit) == len(set(audit))
    assert [e["round"] for e in store.audit()] == [1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_a_node_with_a_restored_update_waits_for_the_next_global(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # killed right after the second update on global 1 is persisted (K = 2: no trigger yet);
    # on resume those two nodes already did their job for version 1 and must not get another
    persist = strategies.loop.save_buffered_update

    def killed_after_two(loop: Any, update: Any) -> None:
        persist(loop, update)
        if loop.version == 1 and len(loop.buffer) == 2:
            raise ServerKilledError("server killed after persisting an update")

    with monkeypatch.context() as patch:
        patch.setattr(strategies.loop, "save_buffered_update", killed_after_two)
        with pytest.raises(ServerKilledError):
            _resumable(tmp_path, resume=False).start(
                InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3
            )
    restored = [(e["node"], e["base_version"]) for e, _ in CheckpointStore(tmp_path).buffered(2)]
    assert restored == [(1004, 1), (1003, 1)]
    resumed = _resumable(tmp_path, resume=True)
    resumed.start(InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3)
    second = resumed.history[1]
    assert second.participants == (1004, 1003, 1002)  # each node once: 1004 not retrained
    assert second.job_ids[:2] == (7, 6)  # the two restored updates


def test_time_model_observations_stay_bounded(tmp_path: Path) -> None:
    from strategies.shares import MAX_OBSERVATIONS

    rounds = MAX_OBSERVATIONS + 8  # every node finishes one job per round (K = n - 1)
    _run(rounds, tmp_path, stop=StopConfig())  # no plateau stop: every round runs
    state = json.loads((tmp_path / STATE_FILE).read_text())
    kept = [len(node["observations"]) for node in state["nodes"].values()]
    assert len(kept) == 4
    assert max(kept) == MAX_OBSERVATIONS


def test_checkpoint_options_read_the_run_config_or_the_environment(tmp_path: Path) -> None:
    from strategies import checkpoint_options

    assert checkpoint_options({}, {}) == {}
    folder = str(tmp_path / "ckpt")
    assert checkpoint_options({}, {"FLOWER_EDGE_CHECKPOINT_DIR": folder}) == {
        "checkpoint_dir": folder,
        "resume": True,
    }
    run_config = {"flower-edge-checkpoint-dir": folder, "flower-edge-resume": False}
    assert checkpoint_options(run_config, {"FLOWER_EDGE_CHECKPOINT_DIR": "other"}) == {
        "checkpoint_dir": folder,
        "resume": False,
    }
    env = {"FLOWER_EDGE_CHECKPOINT_DIR": folder, "FLOWER_EDGE_RESUME": "0"}
    assert checkpoint_options({}, env)["resume"] is False
    with pytest.raises(
        ConfigError,
        match=r"flower-edge-resume \(FLOWER_EDGE_RESUME\) must be true or false, got 'maybe'",
    ):
        checkpoint_options(
            {}, {"FLOWER_EDGE_CHECKPOINT_DIR": folder, "FLOWER_EDGE_RESUME": "maybe"}
        )
    with pytest.raises(ConfigError, match="flower-edge-checkpoint-dir must be a folder name"):
        checkpoint_options({"flower-edge-checkpoint-dir": 3}, {})
    # declared empty in the app's schema: off, unless the environment names a folder
    assert checkpoint_options({"flower-edge-checkpoint-dir": ""}, {}) == {}
    assert checkpoint_options({"flower-edge-checkpoint-dir": " "}, {}) == {}
    assert (
        checkpoint_options({"flower-edge-checkpoint-dir": ""}, {"FLOWER_EDGE_CHECKPOINT_DIR": ""})
        == {}
    )
    assert checkpoint_options(
        {"flower-edge-checkpoint-dir": ""}, {"FLOWER_EDGE_CHECKPOINT_DIR": folder}
    ) == {
        "checkpoint_dir": folder,
        "resume": True,
    }


def test_the_two_line_change_checkpoints_and_a_restart_resumes(tmp_path: Path) -> None:
    from strategies import checkpoint_options

    env = {"FLOWER_EDGE_CHECKPOINT_DIR": str(tmp_path)}

    def run(rounds: int) -> EdgeStrategy:
        grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
        strategy = EdgeStrategy(
            threshold=3,
            clock=VirtualClock(wall=ManualClock()),
            shares=SHARES,
            **checkpoint_options({}, env),
        )
        strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
        return strategy

    full = run(4)
    assert (tmp_path / STATE_FILE).is_file()
    rerun = run(6)  # the "restarted" ServerApp continues at round 5
    assert [h.round for h in rerun.history] == [1, 2, 3, 4, 5, 6]
    assert [h.to_json() for h in rerun.history[:4]] == [h.to_json() for h in full.history]


def test_the_environment_switch_needs_no_third_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With only the two-line change (no checkpoint_options), FLOWER_EDGE_CHECKPOINT_DIR of the
    ServerApp's process still turns checkpoints on, and the settings block says where from."""
    from conftest import flwr_logs

    monkeypatch.setenv("FLOWER_EDGE_CHECKPOINT_DIR", str(tmp_path))

    def run(rounds: int) -> EdgeStrategy:
        grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
        strategy = EdgeStrategy(threshold=3, clock=VirtualClock(wall=ManualClock()), shares=SHARES)
        strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
        return strategy

    with flwr_logs() as caplog:
        full = run(2)
    assert f"checkpoint: {tmp_path} (resume: True) from FLOWER_EDGE_CHECKPOINT_DIR" in caplog.text
    assert (tmp_path / STATE_FILE).is_file()
    with flwr_logs() as caplog:
        assert [h.round for h in run(3).history] == [1, 2, 3]  # resumed after round 2
    assert "s after the start of the first run (this one resumed at round 2)" in caplog.text
    assert len(full.history) == 2
    # an explicit folder wins over the variable; without either there are none
    other = tmp_path / "other"
    assert EdgeStrategy(threshold=3, checkpoint_dir=other).checkpoint_dir == other
    monkeypatch.setenv("FLOWER_EDGE_RESUME", "0")
    assert EdgeStrategy(threshold=3).resume is False
    assert EdgeStrategy(threshold=3, checkpoint_dir="").checkpoint_dir is None  # explicitly off
    with pytest.raises(ConfigError, match="resume=True needs checkpoint_dir"):
        EdgeStrategy(threshold=3, checkpoint_dir="", resume=True)
    # a simulation's strategies never checkpoint: its runs would share the folder
    from simulations.app import SimSettings
    from simulations.server import build_strategy

    for name in ("edge", "edge-seed", "fedbuff", "fedasync"):
        built = build_strategy(SimSettings.create("digits-20", name), VirtualClock())
        assert built.checkpoint_dir is None
    monkeypatch.delenv("FLOWER_EDGE_CHECKPOINT_DIR")
    assert EdgeStrategy(threshold=3).checkpoint_dir is None


def test_the_final_line_gives_seconds_since_the_start() -> None:
    from conftest import flwr_logs

    clock = VirtualClock(wall=ManualClock())
    clock.advance_to(4000.0)  # a clock that does not start at 0
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    strategy = EdgeStrategy(threshold=3, clock=clock, shares=SHARES)
    with flwr_logs() as caplog:
        strategy.start(grid, model(0.0), num_rounds=1)
    # K = 3 of 4 nodes: the slowest job (100 samples at 10/s + 0.5 s) closes round 1
    assert "edge finished after 1 aggregations (round budget), 10.500 s after the start" in (
        caplog.text
    )
    assert "at clock" not in caplog.text


def test_the_plateau_window_survives_a_resume(tmp_path: Path) -> None:
    from flwr.app import ArrayRecord, MetricRecord

    sequence = [0.1, 0.4, 0.2, 0.3, 0.35, 0.3, 0.32, 0.31, 0.3, 0.33, 0.3, 0.31, 0.3, 0.3]

    def scripted(server_round: int, _: ArrayRecord) -> MetricRecord:
        return MetricRecord({"accuracy": sequence[min(server_round, len(sequence) - 1)]})

    stop = StopConfig(patience=3, window_passes=3.0)  # 4 nodes, 4 per aggregation: 3 metrics

    def run(rounds: int, directory: Path | None, resume: bool = False) -> EdgeStrategy:
        strategy, _ = _run(rounds, directory, resume, stop, evaluate_fn=scripted)
        return strategy  # type: ignore[no-any-return]

    whole = run(14, None)
    assert 4 < len(whole.history) < 14  # the windowed plateau stopped it
    run(4, tmp_path)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["recent"] == sequence[2:5]
    resumed = run(14, tmp_path, resume=True)
    assert len(resumed.history) == len(whole.history)


def test_a_finished_run_is_not_resumed_a_new_run_starts_and_the_old_one_is_kept(
    tmp_path: Path,
) -> None:
    from conftest import flwr_logs

    first, _ = _run(2, tmp_path, resume=True)
    finished = json.loads((tmp_path / "finished.json").read_text())
    assert finished == {"num_rounds": 2, "reason": "round budget", "version": 2}
    with flwr_logs() as caplog:
        again, _ = _run(2, tmp_path, resume=True)  # the same command run a second time
    assert [h.round for h in again.history] == [1, 2]  # it trained: not the old result
    assert "holds a finished run (2 aggregations, round budget)" in caplog.text
    previous = sorted(tmp_path.glob("previous-*"))
    assert len(previous) == 1
    old_audit = CheckpointStore(previous[0]).audit()
    new_audit = CheckpointStore(tmp_path).audit()
    assert [e["round"] for e in old_audit] == [1] * 4 + [2] * 4
    assert [e["round"] for e in new_audit] == [1] * 4 + [2] * 4  # not mixed with the old
    assert first.history[0].to_json() == again.history[0].to_json()


def test_a_run_at_its_budget_without_the_finished_mark_is_not_resumed(tmp_path: Path) -> None:
    # killed after its last checkpoint, before finished.json: version == budget is finished
    _run(2, tmp_path)
    (tmp_path / "finished.json").unlink()
    again, _ = _run(2, tmp_path, resume=True)
    assert [h.round for h in again.history] == [1, 2]
    assert len(list(tmp_path.glob("previous-*"))) == 1  # a new run; the old one kept aside
    assert [e["round"] for e in CheckpointStore(tmp_path).audit()] == [1] * 4 + [2] * 4


def test_a_run_stopped_early_by_its_rule_is_finished_under_the_same_budget(tmp_path: Path) -> None:
    stop = StopConfig(target=0.0)  # met by the first aggregation
    first, _ = _run(5, tmp_path, resume=True, stop=stop)
    assert len(first.history) == 1
    again, _ = _run(5, tmp_path, resume=True, stop=stop)
    assert [h.round for h in again.history] == [1]
    assert len(list(tmp_path.glob("previous-*"))) == 1


def test_a_finished_run_continues_when_the_budget_is_raised(tmp_path: Path) -> None:
    _run(2, tmp_path, resume=True)
    more, _ = _run(4, tmp_path, resume=True)
    assert [h.round for h in more.history] == [1, 2, 3, 4]
    assert not list(tmp_path.glob("previous-*"))
    assert json.loads((tmp_path / "finished.json").read_text())["version"] == 4


def test_resume_off_keeps_the_old_checkpoint_aside(tmp_path: Path) -> None:
    _run(3, tmp_path)
    fresh, _ = _run(1, tmp_path, resume=False)
    assert len(fresh.history) == 1
    (previous,) = tmp_path.glob("previous-*")
    assert [e["round"] for e in CheckpointStore(previous).audit()][-1] == 3
    assert [e["round"] for e in CheckpointStore(tmp_path).audit()] == [1] * 4


def test_a_stalled_run_is_not_marked_finished_and_resumes(tmp_path: Path) -> None:
    calls: dict[int, int] = {}
    toy = ToyEdge()

    def first_job_only(msg, ctx):  # type: ignore[no-untyped-def]
        calls[ctx.node_id] = calls.get(ctx.node_id, 0) + 1
        if calls[ctx.node_id] > 1:
            raise RuntimeError("device lost")
        return toy(msg, ctx)

    grid = InProcessGrid(first_job_only, 4)
    strategy = EdgeStrategy(
        threshold=1,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        checkpoint_dir=tmp_path,
        resume=True,
    )
    strategy.start(grid, model(0.0), num_rounds=10, evaluate_fn=accuracy_fn())
    assert 1 <= len(strategy.history) < 10  # stalled: every node fails after its first job
    assert not (tmp_path / "finished.json").exists()
    again, _ = _run(10, tmp_path, resume=True)
    assert again.history[0].round == 1
    assert len(again.history) == 10
    assert not list(tmp_path.glob("previous-*"))  # resumed, not a new run
    resumed_from = CheckpointStore(tmp_path).audit()
    assert resumed_from[0]["round"] == 1


def test_another_strategys_checkpoint_is_not_resumed(tmp_path: Path) -> None:
    """Found by a new-user probe: with one checkpoint folder (``FLOWER_EDGE_CHECKPOINT_DIR``)
    an EdgeStrategy run of 2 aggregations and then a FedBuff run of 4 made FedBuff "resume" at
    round 3, its Result holding EdgeStrategy's rounds 1 and 2."""
    from conftest import flwr_logs

    from strategies import FedBuff

    _run(2, tmp_path, resume=True)
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    fedbuff = FedBuff(
        threshold=3, clock=VirtualClock(wall=ManualClock()), checkpoint_dir=tmp_path, resume=True
    )
    with flwr_logs() as caplog:
        result = fedbuff.start(grid, model(0.0), num_rounds=4, evaluate_fn=accuracy_fn())
    assert [h.round for h in fedbuff.history] == [1, 2, 3, 4]  # all its own
    # FedBuff aggregates K = 3 updates, EdgeStrategy K + 1 = 4
    assert [len(h.participants) for h in fedbuff.history] == [3] * 4
    assert sorted(result.train_metrics_clientapp) == [1, 2, 3, 4]
    assert "was written by strategy 'edge', not 'fedbuff': nothing to resume" in caplog.text
    (previous,) = tmp_path.glob("previous-*")
    assert [e["round"] for e in CheckpointStore(previous).audit()][-1] == 2
    assert json.loads((tmp_path / STATE_FILE).read_text())["strategy"] == "fedbuff"


def test_an_edge_seed_preset_resumes_the_checkpoint_of_its_edgestrategy(tmp_path: Path) -> None:
    """``EdgeStrategy.preset("edge-seed")`` logs under its preset's name (fourteenth session),
    but it is the EdgeStrategy that wrote ``'edge'`` into its checkpoints before: it resumed
    none of them (a new run, the old checkpoint moved aside as another strategy's), nor the
    run of an ``EdgeStrategy(...)`` built with the seed's options."""
    from conftest import flwr_logs

    _run(2, tmp_path, resume=True)  # EdgeStrategy(...): model averaging, as edge-seed
    assert json.loads((tmp_path / STATE_FILE).read_text())["strategy"] == "edge"
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    seed = EdgeStrategy.preset(
        "edge-seed",
        threshold=3,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        checkpoint_dir=tmp_path,
        resume=True,
    )
    with flwr_logs() as caplog:
        seed.start(grid, model(0.0), num_rounds=4, evaluate_fn=accuracy_fn())
    assert "edge-seed: resumed from" in caplog.text
    assert "at round 2" in caplog.text
    assert "was written by strategy" not in caplog.text
    assert not list(tmp_path.glob("previous-*"))
    assert json.loads((tmp_path / STATE_FILE).read_text())["strategy"] == "edge"


@pytest.mark.parametrize("kind", ["edge-deltas", "fedbuff"])
def test_a_stale_buffered_update_survives_a_kill_when_deltas_are_aggregated(
    tmp_path: Path, kind: str
) -> None:
    """The 'edge' preset and FedBuff aggregate deltas: a buffered update based on an older
    version (whose model the checkpoint does not hold) used to be dropped on resume."""
    evaluate = accuracy_fn()

    def dies_in_round_2(rnd: int, arrays):  # type: ignore[no-untyped-def]
        if rnd == 2:
            raise ServerKilledError("server killed while aggregating round 2")
        return evaluate(rnd, arrays)

    def edge(directory: Path | None, resume: bool) -> EdgeStrategy | FedBuff:
        shares = ShareConfig(profile=False, total_samples=400, rebalance="off")
        clock = VirtualClock(wall=ManualClock())
        if kind == "fedbuff":  # aggregates at >= K: the same 3 updates as K = 2 above
            return FedBuff(3, clock=clock, shares=shares, checkpoint_dir=directory, resume=resume)
        return EdgeStrategy(
            threshold=2,
            aggregate="deltas",
            clock=clock,
            shares=shares,
            checkpoint_dir=directory,
            resume=resume,
        )

    whole = edge(None, resume=False)
    expected = whole.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3, evaluate_fn=evaluate
    )
    killed = edge(tmp_path, resume=False)
    with pytest.raises(ServerKilledError):
        killed.start(
            InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3, evaluate_fn=dies_in_round_2
        )
    store = CheckpointStore(tmp_path)
    assert sorted(e["base_version"] for e, _ in store.buffered(2)) == [0, 1, 1]
    resumed = edge(tmp_path, resume=True)
    result = resumed.start(
        InProcessGrid(ToyEdge(), 4), model(0.0), num_rounds=3, evaluate_fn=evaluate
    )
    second, reference = resumed.history[1], whole.history[1]
    assert second.participants == reference.participants  # the stale update (base 0) too
    assert second.base_versions == reference.base_versions == (1, 1, 0)
    assert second.weights == pytest.approx(reference.weights)
    # the same global model 2 as without the kill (its delta formed from the stored base 0)
    assert dict(result.evaluate_metrics_serverapp[2]) == pytest.approx(
        dict(expected.evaluate_metrics_serverapp[2])
    )
    audit = [(e["node"], e["job"]) for e in store.audit()]
    assert len(audit) == len(set(audit)) == 9
