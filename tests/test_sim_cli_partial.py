"""``flower-edge simulate --strategy all``: a later strategy that fails or is interrupted.

Found by a new-user probe: the rows of the strategies that had already finished were lost
(no ``results.json``, no table, no plots). They are now written and printed, marked as
partial, and the exit code stays that of the failure (1) or the interrupt (130).
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flower_edge.cli import main
from flower_edge.errors import FlowerEdgeError

ARGV = ["simulate", "--engine", "inprocess", "--clients", "3", "--rounds", "2"]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def _fail_at(monkeypatch: pytest.MonkeyPatch, strategy: str, error: BaseException) -> list[str]:
    """Make ``run_experiment`` raise ``error`` for ``strategy``; return the strategies run."""
    import simulations.runner as runner

    real: Callable[..., Any] = runner.run_experiment
    started: list[str] = []

    def run_experiment(settings: Any, **kwargs: Any) -> Any:
        started.append(settings.strategy)
        if settings.strategy == strategy:
            raise error
        return real(settings, **kwargs)

    monkeypatch.setattr(runner, "run_experiment", run_experiment)
    return started


def test_a_failed_later_strategy_keeps_the_finished_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    started = _fail_at(monkeypatch, "fedavg", RuntimeError("engine lost\nsecond line"))
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="engine lost"):  # console_main: traceback, exit 1
        main([*ARGV, "--strategy", "all", "--out", str(out)])
    assert started == ["edge", "edge-seed", "fedavg"]  # nothing runs after the failure
    stdout = capsys.readouterr().out
    data = json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in data] == ["edge", "edge-seed"]
    why = {"fedavg": "RuntimeError: engine lost", "fedbuff": "not started"}
    why["fedasync"] = "not started"
    assert all(r["unfinished"] == why for r in data)
    for name in ("accuracy.png", "radar.png", "timeline-edge.png", "timeline-edge-seed.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    assert not (out / "timeline-fedavg.png").exists()
    partial = "did not finish: fedavg (RuntimeError: engine lost), fedbuff (not started)"
    summary = (out / "summary.txt").read_text()
    assert "edge-seed" in summary
    assert partial in summary
    assert partial in stdout  # the table of the finished rows, on stdout
    assert stdout.splitlines()[0].startswith("strategy")
    assert "results and plots in" in stdout


def test_an_error_message_keeps_exit_code_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fail_at(monkeypatch, "edge-seed", FlowerEdgeError("no reply"))
    out = tmp_path / "run"
    argv = [*ARGV, "--strategy", "all", "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "error: no reply" in err
    assert "partial run: the results of edge were kept" in err
    data = json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in data] == ["edge"]
    assert data[0]["unfinished"]["edge-seed"] == "FlowerEdgeError: no reply"


def test_an_interrupt_keeps_the_finished_rows_and_json_stays_valid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    started = _fail_at(monkeypatch, "edge-seed", KeyboardInterrupt())
    out = tmp_path / "run"
    assert main([*ARGV, "--strategy", "all", "--json", "--out", str(out)]) == 130
    assert started == ["edge", "edge-seed"]
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # stdout is nothing but JSON
    assert printed == json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in printed] == ["edge"]
    assert printed[0]["unfinished"] == {
        "edge-seed": "interrupted",
        "fedavg": "not started",
        "fedbuff": "not started",
        "fedasync": "not started",
    }
    assert "interrupted" in captured.err
    assert (out / "timeline-edge.png").is_file()


def test_a_failure_of_the_first_strategy_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _fail_at(monkeypatch, "edge", KeyboardInterrupt())
    out = tmp_path / "run"
    assert main([*ARGV, "--strategy", "all", "--out", str(out)]) == 130
    assert not out.exists()  # its empty folder removed, as before
    assert capsys.readouterr().out == ""


def test_a_complete_run_has_no_unfinished_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from simulations.outputs import unfinished_runs
    from simulations.report import partial_line

    assert unfinished_runs(["edge", "fedavg"], 2, None) == {}
    assert partial_line({}) == ""
    assert main([*ARGV, "--strategy", "fedasync", "--json"]) == 0
    assert "unfinished" not in json.loads(capsys.readouterr().out)
