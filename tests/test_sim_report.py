import json
from pathlib import Path

import pytest
from flwr.app import MetricRecord

from flower_edge import wire
from simulations.plots import plot_accuracy, plot_timeline
from simulations.recorder import WorkLedger
from simulations.report import (
    HistoryPoint,
    RunResult,
    TimelineSpan,
    results_to_json,
    summary_table,
    time_to_target,
)

CONTRACT_KEYS = {
    "scenario",
    "strategy",
    "seed",
    "clients",
    "heterogeneity",
    "threshold",
    "engine",
    "target_accuracy",
    "time_to_target",
    "final_accuracy",
    "rounds",
    "rounds_requested",
    "stopped",
    "stop_reason",
    "abandoned_jobs",
    "wasted_compute_fraction",
    "wall_seconds",
    "description",
    "abandon",
    "dropped_updates",
    "served_global",
    "history",
}
HISTORY_KEYS = {"virtual_time", "round", "accuracy", "participants", "mean_staleness"}


def _result(strategy: str, accs: list[float], step: float) -> RunResult:
    history = tuple(
        HistoryPoint(i * step, i, a, 0 if i == 0 else 5, 0.5) for i, a in enumerate(accs)
    )
    return RunResult(
        scenario="digits-20",
        strategy=strategy,
        seed=0,
        clients=20,
        target_accuracy=0.8,
        final_accuracy=accs[-1],
        rounds=len(accs) - 1,
        abandoned_jobs=2,
        wasted_compute_fraction=0.1,
        wall_seconds=3.0,
        history=history,
        timeline=(TimelineSpan(0, 0.0, 2.0, "training"), TimelineSpan(1, 1.0, 4.0, "offline")),
    )


def test_time_to_target_is_the_first_crossing() -> None:
    h = [HistoryPoint(float(t), t, a, 1, 0.0) for t, a in enumerate([0.1, 0.85, 0.7, 0.9])]
    assert time_to_target(h, 0.8) == 1.0
    assert time_to_target(h, 0.95) is None


def test_json_contract() -> None:
    a, b = _result("edge", [0.1, 0.5, 0.9], 10.0), _result("fedavg", [0.1, 0.6], 50.0)
    one = json.loads(results_to_json([a], as_list=False))
    assert set(one) == CONTRACT_KEYS
    assert one["time_to_target"] == 20.0
    assert all(set(h) == HISTORY_KEYS for h in one["history"])
    many = json.loads(results_to_json([a, b], as_list=True))
    assert [r["strategy"] for r in many] == ["edge", "fedavg"]
    assert many[1]["time_to_target"] is None


def test_summary_table_has_a_row_per_run_and_ratio() -> None:
    a, b = _result("edge", [0.1, 0.9], 10.0), _result("fedavg", [0.1, 0.9], 40.0)
    table = summary_table([a, b])
    edge_row = next(line for line in table.splitlines() if line.startswith("edge"))
    assert "0.25" in edge_row  # 10 s / 40 s
    assert "digits-20" in table


def test_short_virtual_times_do_not_read_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a new-user probe: with ``--heterogeneity 1000000`` edge-seed reached its
    target at 0.015 virtual s against FedAvg's 7001 s; the table read ``0.0`` and ``0.00``,
    the accuracy chart ``target at 0 s`` (and 0.92 s and 1.31 s both ``1 s``)."""
    import simulations.plots as plots

    fast, slow = _result("edge-seed", [0.1, 0.9], 0.0146), _result("fedavg", [0.1, 0.9], 7001.0)
    row = next(line for line in summary_table([fast, slow]).splitlines() if "edge-seed" in line)
    assert row.split()[4:7] == ["0.015", "2.1e-06", "0.015"]  # t->target, vs fedavg, virtual s
    labels: list[str] = []

    class Axes:
        def plot(self, *args: object, label: str = "", **kwargs: object) -> None:
            labels.append(label)

        def __getattr__(self, name: str) -> object:
            return lambda *args, **kwargs: None

    class Pyplot:
        def subplots(self, **kwargs: object) -> tuple[Axes, Axes]:
            return Axes(), Axes()

        def close(self, fig: object) -> None:
            pass

    monkeypatch.setattr(plots, "_pyplot", Pyplot)
    runs = [fast, _result("edge", [0.1, 0.9], 0.918), _result("fedbuff", [0.1, 0.9], 1.31)]
    plots.plot_accuracy(runs, "unused.png")
    assert labels == [
        "edge-seed: target at 0.015 s",
        "edge: target at 0.9 s",
        "fedbuff: target at 1.3 s",
    ]


def test_the_plots_name_the_nodes_as_the_strategy_logs_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Found by a new-user probe: the edge strategy warned "node 48 share capped at 195
    samples" (its node ids are partition id + 1 in the simulations), and radar.png called
    that device "best: 47", the timelines row 47."""
    import simulations.plots as plots
    from simulations.app import SimSettings
    from simulations.outputs import write_outputs

    seen: dict[str, object] = {}

    def radar(evaluations: object, share: float, labels: list[str], path: Path) -> Path:
        seen["radar"] = list(labels)
        return Path(path)

    def timeline(*args: object, first_id: int = 0, **kwargs: object) -> Path:
        seen["timeline"] = first_id
        return Path(str(args[2]))

    monkeypatch.setattr(plots, "plot_radar", radar)
    monkeypatch.setattr(plots, "plot_timeline", timeline)
    monkeypatch.setattr(plots, "plot_accuracy", lambda results, path: Path(path))
    settings = SimSettings.create("digits-20", "edge", clients=3, rounds=1)
    write_outputs([_result("edge", [0.1, 0.9], 1.0)], [settings], tmp_path, as_list=False)
    assert seen == {"radar": ["1", "2", "3"], "timeline": 1}


def test_plots_write_pngs(tmp_path: Path) -> None:
    runs = [_result("edge", [0.1, 0.5, 0.9], 10.0), _result("fedavg", [0.1, 0.6], 50.0)]
    acc = plot_accuracy(runs, tmp_path / "accuracy.png")
    tl = plot_timeline(runs[0].timeline, 2, tmp_path / "timeline.png")
    for path in (acc, tl):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _reply(**metrics: float) -> MetricRecord:
    return MetricRecord(metrics)  # type: ignore[arg-type]


def test_ledger_counts_abandoned_work() -> None:
    ledger = WorkLedger()
    v, s, d, a = wire.VIRTUAL_SECONDS, wire.SAMPLES_PROCESSED, wire.DONE, wire.ABANDONED
    ledger.add(1, 0.0, _reply(**{v: 2.0, s: 30, d: 0, a: 0}))  # progress, 30 samples
    ledger.add(1, 2.0, _reply(**{v: 2.0, s: 60, d: 0, a: 0}))  # progress, +30
    ledger.add(1, 4.0, _reply(**{v: 3.0, s: 40, d: 1, a: 1}))  # abandoned, new job of 40
    ledger.add(2, 0.0, _reply(**{v: 5.0, s: 100, d: 1, a: 0}))  # one-slice job
    assert ledger.abandoned_jobs == 1
    assert ledger.samples() == 30 + 30 + 40 + 100
    assert ledger.wasted_fraction() == pytest.approx(60 / 200)
    assert ledger.slices[2].end == 7.0
    assert ledger.delivered_slices == {2, 3}


def test_ledger_reads_plain_flower_replies() -> None:
    ledger = WorkLedger()
    ledger.add(5, 1.0, _reply(**{wire.NUM_EXAMPLES: 64}))
    assert ledger.samples() == 64
    assert ledger.delivered_slices == {0}
    assert ledger.wasted_fraction() == 0.0


def test_the_table_says_when_the_abandon_rule_had_nothing_to_decide() -> None:
    """Found by a new-user probe: the abandon line of an edge preset was left out when the
    rule had no preemption point (``--clients 2``), where the docs promise one per preset."""
    from dataclasses import replace

    from simulations.report import summary_table

    base = _result("edge", [0.5, 0.9], 1.0)
    quiet = replace(base, abandon={"offers": 0.0, "abandoned": 0.0})
    table = summary_table([quiet, replace(base, strategy="fedbuff", abandon={})])
    assert "edge: abandon rule never had to decide" in table
    assert "fedbuff: abandon" not in table


def test_the_table_stays_aligned_with_a_large_seed() -> None:
    """Found by a new-user probe: ``--seed 18446744073709551615`` pushed the columns out."""
    from dataclasses import replace

    from simulations.report import HistoryPoint, RunResult, summary_table

    history = tuple(HistoryPoint(float(i), i, 0.9, 5, 0.0) for i in range(3))
    base = RunResult("digits-20", "edge", 0, 20, 0.9, 0.9, 2, 0, 0.0, 1.0, history)
    table = summary_table([base, replace(base, strategy="fedbuff", seed=2**64 - 1)])
    header, _, first, second = table.splitlines()[:4]
    assert len(first) == len(second) == len(header)
    assert header.index("rounds") == first.index("      2") + 1


def test_summary_names_each_k_where_the_strategies_differ() -> None:
    """digits-20's edge preset takes K = 1, FedBuff and edge-seed 4: the table's rounds
    (100 against 50 and 40) alone did not say why."""
    from dataclasses import replace

    edge = replace(_result("edge", [0.1, 0.9], 10.0), threshold=1)
    seed = replace(_result("edge-seed", [0.1, 0.9], 10.0), threshold=4)
    fedbuff = replace(_result("fedbuff", [0.1, 0.9], 10.0), threshold=4)
    fedavg = _result("fedavg", [0.1, 0.9], 40.0)
    line = "updates per aggregation (K): edge more than 1, edge-seed more than 4, fedbuff 4"
    assert line in summary_table([edge, seed, fedavg, fedbuff]).splitlines()
    same = summary_table([replace(edge, threshold=4), seed, fedbuff, fedavg])
    assert "updates per aggregation" not in same  # one K for all: the line says nothing new
