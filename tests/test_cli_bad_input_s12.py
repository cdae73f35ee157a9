"""Defects found by the twelfth session's new-user probe of the command line and its files."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import PLAN_NODES, fails, plan_argv

from flower_edge.cli import main


# ---------------------------------------------------------------- stray arguments
@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["simulate", "--list", "--bogus"], "usage: flower-edge simulate"),
        (["analyze", "mlp", "--input-shape", "8,64", "extra"], "usage: flower-edge analyze"),
        (["profile", "--quick", "--bogus"], "usage: flower-edge profile"),
    ],
)
def test_a_stray_argument_shows_the_sub_commands_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate --bogus`` printed the top-level usage (``COMMAND ...``), no option of its own."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert f"flower-edge {argv[0]}: error: unrecognized arguments: {argv[-1]}" in err


# ---------------------------------------------------------------- plan: node keys
def _profiles(tmp_path: Path, nodes: Sequence[Mapping[str, object]]) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"nodes": nodes}), encoding="utf-8")
    return str(path)


def test_plan_rejects_a_misspelt_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``"capcity": 5`` was ignored: the node was planned with no cap, 80 of 100 samples."""
    first, second = PLAN_NODES["nodes"]
    path = _profiles(tmp_path, [{**first, "capcity": 5}, second])
    fails(plan_argv(path), capsys, "nodes[0] has unknown keys ['capcity']", "'capacity'?")
    # spelt right, the cap holds
    path = _profiles(tmp_path, [{**first, "capacity": 5}, second])
    assert main([*plan_argv(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nodes"][0]["samples"] == 5


def test_plan_still_reads_profile_reports_with_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The keys of a ``profile --json`` report stay allowed beside ``id`` and ``capacity``."""
    report = {
        "host": {},
        "resources": {
            r: {"available": True, "evaluation": 10.0, "workloads": [], "reason": None}
            for r in ("cpu", "gpu", "memory", "disk")
        },
        "mode": "quick",
        "elapsed_seconds": 1.0,
    }
    path = tmp_path / "reports.json"
    path.write_text(
        json.dumps([{"id": "a", **report}, {"id": "b", "capacity": 7, "profile": report}]),
        encoding="utf-8",
    )
    assert main(plan_argv(str(path), "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [n["samples"] for n in doc["nodes"]] == [93, 7]


# ---------------------------------------------------------------- docs: the stop lines
DOCS = Path(__file__).resolve().parents[1] / "docs" / "simulations.md"


def _docs_text() -> str:
    return " ".join(DOCS.read_text(encoding="utf-8").split())  # lines joined


def test_the_docs_quote_only_stop_lines_that_the_table_prints() -> None:
    """The docs quoted ``stopped by its round budget after 40 of 40`` as a line of the table,
    which prints a stop line only for a run that ended before its budget."""
    from simulations.report import HistoryPoint, RunResult, summary_table

    history = tuple(HistoryPoint(float(i), i, 0.5, 5, 0.0) for i in range(41))
    full = RunResult("digits-20", "edge", 0, 20, 0.9, 0.5, 40, 0, 0.0, 1.0, history)
    assert full.rounds_requested == 0  # the default: set it to the budget it used
    assert "stopped by" not in summary_table([replace(full, rounds_requested=40)])
    quoted = re.findall(r"stopped by ([a-z ]+?) after \d+ of \d+", _docs_text())
    assert quoted, "the docs quote no stop line"
    assert "its round budget" not in quoted


@pytest.mark.slow
def test_the_docs_say_when_edge_stops_on_its_plateau() -> None:
    """The docs said ``--strategy edge --rounds 1000`` ends after 119 aggregations; at this
    code it ends after 202 (in process; the same history as on Ray). About 25 s of CPU."""
    from simulations.app import SimSettings
    from simulations.runner import run_experiment

    settings = SimSettings.create("digits-20", "edge", seed=0, rounds=1000)
    result = run_experiment(settings, engine="inprocess")
    assert result.stopped == "convergence"
    text = _docs_text()
    assert f"--rounds 1000` on digits-20 ends after {result.rounds} aggregations" in text
    assert f"stopped by the convergence stop after {result.rounds} of 1000 aggregations" in text


# ---------------------------------------------------------------- exit codes
def test_the_readme_lists_every_exit_code_of_the_command() -> None:
    """The README listed 0, 1, 2 and 130; a closed stdout (``... | head``) exits with 141."""
    import flower_edge.cli

    readme = " ".join((DOCS.parents[1] / "README.md").read_text(encoding="utf-8").split())
    (sentence,) = re.findall(r"Exit codes: ([^.]*)\.", readme)
    listed = {int(code) for code in re.findall(r"\b(\d+) [a-z]", sentence)}
    assert listed == {0, 1, 2, 130, 141}, sentence
    assert flower_edge.cli._quiet_broken_pipe.__doc__ is not None
    assert "return 141" in flower_edge.cli._quiet_broken_pipe.__doc__
    doc = flower_edge.cli.__doc__ or ""
    assert all(f"{code} " in doc for code in listed)


# ---------------------------------------------------------------- the table's accuracy
@pytest.mark.parametrize(
    ("final", "shown"), [(0.8997214484679665, "0.899"), (0.123, "0.123"), (0.9, "0.900")]
)
def test_the_table_never_shows_an_unreached_target_as_reached(final: float, shown: str) -> None:
    """digits-20 on 5 clients, FedAvg, 3 rounds: final accuracy 0.8997 was shown as
    ``0.900`` beside the target 0.90 and a ``t->target`` of ``-`` (never reached)."""
    from simulations.report import HistoryPoint, RunResult, summary_table

    history = (HistoryPoint(0.0, 0, 0.1, 0, 0.0), HistoryPoint(25.1, 3, final, 5, 0.0))
    run = RunResult("digits-20", "fedavg", 0, 5, 0.9, final, 3, 0, 0.0, 0.3, history)
    row = summary_table([replace(run, rounds_requested=3)]).splitlines()[2].split()
    assert row[:4] == ["fedavg", "0", "3", shown]
    assert row[4] == ("25.1" if final >= 0.9 else "-")


# ---------------------------------------------------------------- plan: conflicting options
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--input-shape", "3,4"], "--input-shape describes"),
        (["--model-kwargs", '{"hidden": 3}'], "--model-kwargs describes"),
        (["--input-dtype", "int64"], "--input-dtype describes"),
        (["--execute", "--share", "flops"], "--share, --execute describe"),
        (["--forward-only"], "--forward-only describes"),
    ],
)
def test_plan_rejects_the_models_options_beside_a_compute_share(
    profiles: str, extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--compute-share 0.5 --input-shape 3,4`` planned without a word, the shape unused."""
    fails(plan_argv(profiles, *extra), capsys, named, "with --compute-share")


def test_plan_takes_the_models_options_with_a_model(
    profiles: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--profiles", profiles, "--total-samples", "100", "--model", "mlp"]
    extra = ["--input-shape", "4,64", "--model-kwargs", '{"hidden": 8}', "--share", "flops"]
    assert main([*argv, *extra, "--forward-only", "--json"]) == 0
    assert 0.0 < json.loads(capsys.readouterr().out)["compute_share"] < 1.0


def test_the_simulate_usage_names_every_strategy() -> None:
    """The module's usage listed ``edge|fedavg|fedbuff|fedasync|all``, without ``edge-seed``."""
    import simulations.cli
    from simulations.scenarios import STRATEGIES

    usage = re.search(r"--strategy ([a-z|-]+)\]", simulations.cli.__doc__ or "")
    assert usage is not None
    assert usage.group(1).split("|") == [*STRATEGIES, "all"]


# ---------------------------------------------------------------- simulate: Flower's notices
def test_a_ray_run_drops_only_the_run_simulation_deprecation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every Ray run opened with Flower's coloured WARNING ``DEPRECATED FEATURE: The
    `run_simulation` function is deprecated ... Please use `flwr run` in the CLI instead``,
    which a user of ``flower-edge simulate`` can do nothing about."""
    import logging

    import flwr.simulation
    from flwr.supercore.logger import warn_deprecated_feature

    from flower_edge.errors import FlowerEdgeError
    from simulations.app import SimSettings
    from simulations.runner import run_experiment

    def fake_run_simulation(**_: object) -> None:  # Flower's first line, then no result
        warn_deprecated_feature("The `run_simulation` function is deprecated and will go.")
        warn_deprecated_feature("something else")

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    monkeypatch.setattr(flwr.simulation, "run_simulation", fake_run_simulation)
    flwr_logger = logging.getLogger("flwr")
    level = flwr_logger.level
    handler = Keep(logging.DEBUG)
    flwr_logger.addHandler(handler)
    try:
        settings = SimSettings.create("digits-20", "fedbuff", seed=0, rounds=1, clients=3)
        with pytest.raises(FlowerEdgeError, match="ended without a result"):
            run_experiment(settings, engine="ray", cpus=1)
        warn_deprecated_feature("The `run_simulation` function is deprecated and will go.")
    finally:
        flwr_logger.removeHandler(handler)
    # the run quietened Flower's logger and then gave it back its level (it stayed at
    # WARNING: a later test's capture of INFO records found none)
    assert flwr_logger.level == level
    shown = [r.getMessage() for r in records if r.getMessage().startswith("DEPRECATED")]
    assert len(shown) == 2, shown  # "something else", and the notice outside a run
    assert "something else" in shown[0]
    assert "`run_simulation`" in shown[1]


# ---------------------------------------------------------------- simulate: FedAvg has no K
@pytest.mark.parametrize(
    ("extra", "note"),
    [
        (["--strategy", "fedavg", "--threshold", "2"], "--threshold 2 is ignored by fedavg"),
        (["--strategy", "fedavg"], None),  # no "K lowered" note: FedAvg has no K
        # found by a code review: FedAsync has no K either (it aggregates every update)
        (["--strategy", "fedasync", "--threshold", "2"], "--threshold 2 is ignored by fedasync"),
        (["--strategy", "fedasync"], None),
        (["--strategy", "fedbuff"], "K lowered from 4 to 1"),
        (["--strategy", "all", "--threshold", "2"], None),  # the others use it
    ],
)
def test_simulate_notes_a_threshold_that_fedavg_ignores(
    extra: list[str], note: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--strategy fedavg --threshold 2`` ran without a word about the ignored K, and
    ``--strategy fedavg --clients 4`` told the user that K was lowered and how to set it."""
    from flower_edge.cli import build_parser
    from simulations.cli import _settings

    args = build_parser().parse_args(["simulate", "--clients", "4", *extra])
    _settings(args)
    notes = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    if note is None:
        assert notes == []
    else:
        assert len(notes) == 1, notes
        assert note in notes[0]


# ---------------------------------------------------------------- plan: empty observations
def test_plan_notes_a_node_whose_observation_list_is_empty(
    profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{"pi4": []}`` gave the node the prior without the note that one observation gets
    (the README: a node whose observations give no time model gets a note)."""
    for given in ([], [[10, 1.0]]):
        path = tmp_path / "obs.json"
        path.write_text(json.dumps({"pi4": given}), encoding="utf-8")
        assert main(plan_argv(profiles, "--observations", str(path))) == 0
        err = capsys.readouterr().err
        assert "note: node pi4: its observations give no time model" in err, given
        assert f"({len(given)} distinct loads < min_points=2)" in err


# ---------------------------------------------------------------- analyze: MODEL specs
@pytest.mark.parametrize(
    ("spec", "source", "message"),
    [
        (":make", None, "expected pkg.mod:factory"),
        (".models:make", None, "expected pkg.mod:factory"),
        ("os:", None, "expected pkg.mod:factory"),
        ("s12_broken:make", "def make(:\n", "importing 's12_broken' raised SyntaxError"),
        ("s12_raises:make", "raise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    ],
)
def test_analyze_names_a_model_spec_that_cannot_be_imported(
    spec: str,
    source: str | None,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``analyze :make`` ended in a traceback (``ValueError: Empty module name``, exit 1), as
    did a user module that raises while it is imported."""
    if source is not None:
        (tmp_path / f"{spec.partition(':')[0]}.py").write_text(source, encoding="utf-8")
        monkeypatch.syspath_prepend(str(tmp_path))
    fails(["analyze", spec, "--input-shape", "2,3"], capsys, f"MODEL {spec!r}", message)


# ---------------------------------------------------------------- simulate: SIGTERM
def test_sigterm_ends_a_simulation_as_ctrl_c_does(tmp_path: Path) -> None:
    """``kill PID`` (or ``timeout``) on ``simulate --engine inprocess`` killed the process at
    once: exit -15 and the empty ``--out`` folder left behind, where Ctrl-C removes it and
    exits with 130 (``profile`` already turned SIGTERM into an interrupt)."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time
    from typing import IO

    out = tmp_path / "run"
    # FedBuff has no plateau stop: it runs until the signal
    argv = ["simulate", "--engine", "inprocess", "--strategy", "fedbuff", "--clients", "4"]
    argv += ["--rounds", "100000", "--out", str(out)]
    code = f"import sys; sys.argv = ['flower-edge', *{argv!r}]\n"
    code += "from flower_edge.cli import console_main\nconsole_main()\n"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, env=env
    )
    assert proc.stderr is not None
    lines: list[str] = []
    started = threading.Event()

    def read(stream: IO[str]) -> None:  # a reader thread: every wait below has a deadline
        for line in stream:
            lines.append(line)
            if "starting the engine" in line:
                started.set()

    reader = threading.Thread(target=read, args=(proc.stderr,), daemon=True)
    reader.start()
    try:
        assert started.wait(timeout=120), "no 'starting the engine':\n" + "".join(lines)
        time.sleep(2.0)
        assert proc.poll() is None, "".join(lines)
        assert out.is_dir()
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        try:
            code_: int | None = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code_ = None  # still running 60 s after SIGTERM
        reader.join(timeout=30)
    finally:
        if proc.poll() is None:  # a hang: the test fails with the output so far
            proc.kill()
            proc.wait(timeout=30)
    rest = "".join(lines)
    assert code_ == 130, rest
    assert time.monotonic() - t0 < 30
    assert "flower-edge: interrupted" in rest
    assert "Traceback" not in rest
    assert not out.exists()


@pytest.mark.parametrize("option", ["--seconds-per-sample", "--max-share-fraction"])
def test_plan_reports_a_number_option_as_typed(
    profiles: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--seconds-per-sample abc`` was reported as ``got nan``."""
    fails(plan_argv(profiles, option, "abc"), capsys, f"{option} must be", "got 'abc'")


def test_the_docs_quote_the_main_jobs_latest_measured_time() -> None:
    """docs/simulations.md said the main job takes about 2 min 40 s, citing
    docs/benchmarks.md, whose latest measurement is 1 min 44.6 s."""
    bench = " ".join((DOCS.parent / "benchmarks.md").read_text(encoding="utf-8").split())
    row = bench.split("| Simulations | digits-20 main job")[1].split(" | ")[2]  # the figures
    latest = re.search(r"\*\*(\d+ min [\d.]+ s)\*\*", row)  # the first bold: the latest
    assert latest is not None
    assert f"`docs/benchmarks.md`: {latest.group(1)}" in _docs_text()


def test_simulate_help_gives_every_range_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    """``--threshold K  K (default: scenario's)`` and ``--out DIR  output folder`` told a new
    user neither what K is nor where the files go; ``--clients`` and ``--seed`` gave no
    range."""
    from simulations.scenarios import MAX_HETEROGENEITY, MAX_SEED

    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "more than K updates are in, FedBuff at K (FedAvg and FedAsync have none)" in text
    assert "one K for all three; 1 <= K < clients" in text
    assert "digits-20: 1 for edge, 4 for edge-seed and FedBuff" in text  # edge_threshold
    assert "(default: runs/<scenario>-<UTC time>; with --json, no files unless given)" in text
    assert "virtual clients, >= 2" in text
    assert MAX_SEED == 2**64 - 1
    assert "seed, 0 to 2**64 - 1" in text
    assert f"1 to {MAX_HETEROGENEITY:,.0f}" in text


def test_plan_help_gives_the_profiles_format(capsys: pytest.CaptureFixture[str]) -> None:
    """``--profiles FILE  node profiles (JSON)`` gave a new user no format to write."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert '{"nodes": [{"id": ..., "resources": {"cpu": N, "gpu": N, "memory": N' in text
    assert '`flower-edge profile --json` reports each with an added "id"' in text
    assert "(default: 50; --json lists every node)" in text


# ---------------------------------------------------------------- simulate: a failing ClientApp
def test_a_client_app_that_fails_the_partition_query_says_why() -> None:
    """``simulate`` ended with ``node N did not report its partition id`` and nothing more
    when the ClientApp could not run on its worker; its error reply says why."""
    from flwr.app import Context, Message

    from flower_edge.errors import FlowerEdgeError
    from simulations.recorder import RecordingGrid
    from strategies.inprocess import InProcessGrid

    def broken(msg: Message, context: Context) -> Message:
        raise ModuleNotFoundError("No module named 'simulations'")

    grid = RecordingGrid(InProcessGrid(broken, 2), stable_ids=True, num_nodes=2)  # type: ignore[arg-type]
    with pytest.raises(FlowerEdgeError, match="did not report its partition id") as failed:
        grid.get_node_ids()
    assert "its ClientApp failed: ModuleNotFoundError: No module named 'simulations'" in str(
        failed.value
    )
