"""A stalled strategy run no longer ends ``benchmarks/real_deployment.py`` (runs 10 and 11).

Twice the second repeat's FedAvg waited on a message a SuperNode had lost, past the script's
limit, and the whole benchmark ended with a ``TimeoutError``. Now the run is stopped on the
SuperLink, recorded as stalled, and its repeat is left out of the medians.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deploy_harness import Deployment, Proc, RunTimeoutError, run_id_of  # noqa: E402

SCRIPT = load_benchmark("real_deployment")
TARGET = 0.8


def _res(curve: list[tuple[float, float]], wall: float, **extra: Any) -> dict[str, Any]:
    return {"curve": [list(p) for p in curve], "wall": wall, **extra}


def _runs() -> dict[str, list[dict[str, Any]]]:
    """Three repeats; the second one's FedAvg stalled."""
    return {
        "fedavg": [
            _res([(60, 0.6), (120, 0.82), (180, 0.9)], 180),
            _res([], 900, stalled=True),
            _res([(70, 0.6), (140, 0.85), (200, 0.91)], 200),
        ],
        "edge": [
            _res([(30, 0.5), (55, 0.81), (170, 0.93), (190, 0.95)], 230),
            _res([(20, 0.9)], 230),  # would pull every median down if it were counted
            _res([(35, 0.5), (66, 0.83), (199, 0.92)], 240),
        ],
        "fedbuff": [
            _res([(30, 0.5), (65, 0.8), (175, 0.91)], 200),
            _res([(30, 0.5), (90, 0.8)], 200),
            _res([(30, 0.5), (70, 0.8), (190, 0.94)], 200),
        ],
    }


def _first(curve: list[list[float]], target: float) -> float:
    return next(t for t, acc in curve if acc >= target)


def _last_within(curve: list[list[float]], budget: float) -> float:
    return [acc for t, acc in curve if t <= budget][-1]


def test_a_stalled_repeat_is_left_out_of_every_median() -> None:
    runs = _runs()
    lines = SCRIPT.median_verdicts(runs, TARGET)
    assert all(line.startswith("median over 2 repeats (1 stalled, left out): ") for line in lines)
    # brute force over the kept repeats 0 and 2
    t = {n: statistics.median(_first(runs[n][r]["curve"], TARGET) for r in (0, 2)) for n in runs}
    final = {
        n: statistics.median(
            _last_within(runs[n][r]["curve"], runs["fedavg"][r]["wall"]) for r in (0, 2)
        )
        for n in runs
    }
    text = "\n".join(lines)
    assert f"({t['edge'] / t['fedavg']:.2f}x)" in text
    assert f"({t['edge'] / t['fedbuff']:.2f}x)" in text
    assert f"({final['edge']:.4f} vs {final['fedavg']:.4f})" in text


def test_no_repeat_without_a_stall_says_so() -> None:
    runs = {k: [v[1]] for k, v in _runs().items()}
    assert SCRIPT.median_verdicts(runs, TARGET) == [
        "median over 0 repeats (1 stalled, left out): no repeat finished without a stall"
    ]


def test_the_verdicts_of_a_stalled_repeat_name_the_stalled_run() -> None:
    lines = SCRIPT.verdicts({k: v[1] for k, v in _runs().items()}, TARGET)
    assert lines[0] == "stalled (stopped at the run limit): fedavg"
    assert SCRIPT.verdicts({k: v[0] for k, v in _runs().items()}, TARGET)[0].startswith("edge")


def test_a_stalled_result_keeps_the_aggregations_its_log_shows() -> None:
    log = (
        "Successfully started run 77\n"
        "[edge round 1] t=31.5 v=1 metric=0.51\n"
        "[edge round 2] t=60.25 v=2 metric=0.83\n"
    )
    err = RunTimeoutError("late", run_id=77, log=log)
    res = SCRIPT.stalled_result("edge", err, 900.0, 54.0)
    assert res["stalled"] is True
    assert res["run_id"] == 77
    assert res["wall"] == 900.0
    assert res["curve"] == [[31.5, 0.51], [60.25, 0.83]]
    line = SCRIPT.summary_line("edge", res, TARGET)
    assert "STALLED" in line
    assert "time to 0.8: 60.2 s" in line or "time to 0.8: 60.3 s" in line


def test_run_id_of_reads_the_cli_line() -> None:
    assert run_id_of("Using SuperLink: x\nSuccessfully started run 1457375524515681747\n") == (
        1457375524515681747
    )
    assert run_id_of("Using SuperLink: x\n") is None


class _Clock:
    """A fake ``time`` module: ``sleep`` advances ``monotonic``."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _App:
    """A stand-in ClientApp process: ``cpu(now)`` is its CPU time, ``kill`` is recorded."""

    def __init__(self, pid: int, cpu: Any, killed: list[int]) -> None:
        self.pid, self._cpu, self._killed = pid, cpu, killed
        self.clock: _Clock | None = None

    def cpu_times(self) -> Any:
        assert self.clock is not None
        return type("T", (), {"user": self._cpu(self.clock.now), "system": 0.0})()

    def kill(self) -> None:
        self._killed.append(self.pid)


def test_wait_idle_needs_a_quiet_period_not_one_idle_glance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Training until 1 s, a queued message trains from 2 s to 3 s, idle for good from 3 s."""
    clock = _Clock()
    monkeypatch.setattr(SCRIPT, "time", clock)
    killed: list[int] = []
    app = _App(11, lambda now: now, killed)  # busy: its CPU time grows
    app.clock = clock

    def apps(dep: object) -> list[_App]:
        return [app] if clock.now < 1 or 2 <= clock.now < 3 else []

    monkeypatch.setattr(SCRIPT, "clientapp_procs", apps)
    waited, orphans = SCRIPT.wait_idle(object(), timeout=60.0, quiet=5.0)
    assert waited == pytest.approx(8.0)  # quiet since 3 s, for 5 s
    assert orphans == killed == []
    clock.now = 0.0
    monkeypatch.setattr(SCRIPT, "clientapp_procs", lambda dep: [app])
    assert SCRIPT.wait_idle(object(), timeout=4.0, quiet=5.0)[0] == pytest.approx(4.0)


def test_wait_idle_kills_a_clientapp_that_hangs_between_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run 12: a ClientApp retrying pull_objects for a finished run uses no CPU. It is killed
    after ``stuck_after`` s without CPU progress; a throttled one that still trains is not."""
    clock = _Clock()
    monkeypatch.setattr(SCRIPT, "time", clock)
    killed: list[int] = []
    hung = _App(21, lambda now: 0.4, killed)
    slow = _App(22, lambda now: 0.1 * min(now, 20.0), killed)  # trains at 10 % until 20 s
    for app in (hung, slow):
        app.clock = clock

    def apps(dep: object) -> list[_App]:
        alive = [a for a in (hung, slow) if a.pid not in killed]
        return [a for a in alive if a is hung or clock.now < 25.0]  # slow replies at 25 s

    monkeypatch.setattr(SCRIPT, "clientapp_procs", apps)
    waited, orphans = SCRIPT.wait_idle(object(), timeout=120.0, quiet=5.0, stuck_after=30.0)
    assert orphans == killed == [21]
    assert waited == pytest.approx(35.5)  # hung killed at 30 s; quiet from 30.5 s


def test_wait_idle_kills_an_orphan_that_polls_at_a_trickle_of_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run 27: a ClientApp left behind polled the SuperLink at about 0.1 % of a core; its CPU
    time kept moving, so every wait ran out its 180 s. It now counts as stuck."""
    clock = _Clock()
    monkeypatch.setattr(SCRIPT, "time", clock)
    killed: list[int] = []
    polling = _App(31, lambda now: 0.001 * now, killed)
    polling.clock = clock
    monkeypatch.setattr(
        SCRIPT, "clientapp_procs", lambda dep: [] if polling.pid in killed else [polling]
    )
    waited, orphans = SCRIPT.wait_idle(object(), timeout=180.0, quiet=5.0, stuck_after=30.0)
    assert orphans == [31]
    assert waited == pytest.approx(35.5)


def test_run_app_past_its_limit_stops_the_run_and_keeps_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CLI is stopped, the run it started is stopped with ``flwr stop``, and the
    exception carries the run id and what was streamed."""
    dep = Deployment.__new__(Deployment)  # no SuperLink: submit and stop_run are stand-ins
    dep.workdir, dep.procs = tmp_path, []
    stopped: list[int] = []

    def submit(app_dir: Path, run_config: object = None) -> Proc:
        script = (
            "echo 'Successfully started run 4242'; "
            "echo '[edge round 1] t=1.0 v=1 metric=0.5'; sleep 60"
        )
        return dep._spawn("flwr-run-0", ["sh", "-c", script], "cli")

    monkeypatch.setattr(dep, "env", lambda home: {"PATH": "/usr/bin:/bin"})
    monkeypatch.setattr(dep, "submit", submit)
    monkeypatch.setattr(dep, "stop_run", lambda run_id, timeout=60.0: stopped.append(run_id))
    with pytest.raises(RunTimeoutError) as late:
        dep.run_app(tmp_path, timeout=2.0)
    assert late.value.run_id == 4242
    assert "[edge round 1]" in late.value.log
    assert stopped == [4242]
    assert not dep.procs[0].alive()
    assert math.isfinite(SCRIPT.stalled_result("edge", late.value, 2.0, 0.0)["curve"][0][0])


def test_rhythm_reads_the_first_wave_and_the_gap_after_each_aggregation() -> None:
    # 3 nodes; jobs 1-3 from version 0; an aggregation at 12.0 (node 2's reply) and at 20.0
    # (node 1's second job); node 3's first reply comes later and triggers nothing
    timeline = [
        [1.0, 1, 1, "sent", 0, 0],
        [1.0, 2, 2, "sent", 0, 0],
        [1.0, 3, 3, "sent", 0, 0],
        [10.0, 1, 1, "finished", 0, 100],
        [10.5, 1, 4, "sent", 0, 0],  # not an aggregation's reply: no gap counted
        [12.0, 2, 2, "finished", 0, 100],
        [13.5, 2, 5, "sent", 1, 0],
        [15.0, 3, 3, "finished", 0, 100],
        [20.0, 1, 4, "finished", 0, 100],
        [20.5, 1, 6, "sent", 2, 0],
    ]
    curve = [[12.0, 0.5], [20.0, 0.7]]
    nth, gap = SCRIPT.rhythm(timeline, curve, 2)
    assert nth == 12.0  # first wave (base version 0): 10.0, 12.0, 15.0, 20.0
    assert gap == statistics.median([1.5, 0.5])
    assert SCRIPT.rhythm(timeline, curve, 9) == (None, 1.0)
    assert SCRIPT.rhythm([], curve, 1) == (None, None)
    line = SCRIPT.summary_line(
        "edge",
        {
            "curve": curve,
            "wall": 30.0,
            "overhead": 1.0,
            "slice_budget": None,
            "events": {},
            "timeline": timeline,
        },
        0.6,
        2,
    )
    assert "reply 2 of the first wave 12.0 s  gap to the next job 1.00 s" in line


def test_curve_from_log_reads_the_served_accuracy_not_edge_s_validation_loss() -> None:
    # edge's round lines carry its validation loss as metric=; the accuracy is on the
    # MetricRecord line that follows (a --reanalyze of run 19 read losses as accuracies)
    log = (
        "[edge round 1] t=35.624 participants=[1, 2] metric=1.8927\n"
        "Global evaluation\n"
        "\t└──> MetricRecord: {'accuracy': 0.6629, 'loss': 1.9, 'val-loss': 1.8927}\n"
        "[edge round 2] t=52.373 participants=[3, 4] metric=1.3528\n"
        "\t└──> MetricRecord: {'accuracy': 0.7938, 'loss': 1.3, 'val-loss': 1.3528}\n"
        "[fedbuff round 1] t=60.0 participants=[1] metric=0.81\n"
    )
    assert SCRIPT.curve_from_log(log) == [[35.624, 0.6629], [52.373, 0.7938], [60.0, 0.81]]
