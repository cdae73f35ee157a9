"""``flower-edge simulate``: option validation, JSON on stdout, output folder."""

import json
import re
from pathlib import Path

import pytest

from flower_edge.cli import main


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["--scenario", "nope"],
            "unknown scenario 'nope'; valid scenarios: digits-20, mnist1d-100",
        ),
        (
            ["--strategy", "fedprox"],
            "valid strategies: edge, edge-seed, fedavg, fedbuff, fedasync, all",
        ),
        (["--clients", "5000"], r"clients must be <= 179 for scenario 'digits-20'"),
        (["--threshold", "20"], r"threshold K must be >= 1 and < clients \(20\), got 20"),
        (["--clients", "4", "--threshold", "4"], r"< clients \(4\), got 4"),
        (["--rounds", "0"], r"--rounds must be an integer in \[1, 1000000\]"),
        (["--heterogeneity", "0.5"], r"heterogeneity must be in \[1, 1000000\], got 0.5"),
        (["--seed", "-1"], r"--seed must be an integer in \[0, 18446744073709551615\]"),
    ],
)
def test_bad_input_exits_2_before_the_engine(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    code = main(["simulate", "--engine", "inprocess", "--out", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert not list(tmp_path.iterdir())  # nothing written, nothing run
    assert re.search(match, err), err


def test_unwritable_out(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["simulate", "--out", str(blocker)]) == 2
    assert "exists and is not a folder" in capsys.readouterr().err


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    out = capsys.readouterr().out
    assert "digits-20" in out
    assert "mnist1d-100" in out


@pytest.mark.parametrize("json_out", [False, True])
def test_list_with_a_scenario_shows_that_scenario(
    json_out: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--list --scenario mnist1d-100`` listed every scenario, the option unused."""
    from simulations.scenarios import SCENARIOS

    argv = ["simulate", "--list", "--scenario", "mnist1d-100"] + (["--json"] if json_out else [])
    assert main(argv) == 0
    out = capsys.readouterr().out
    description = SCENARIOS["mnist1d-100"].description
    if json_out:
        assert json.loads(out) == {"mnist1d-100": description}
    else:
        assert out.splitlines() == [f"mnist1d-100  {description}"]


def test_list_with_an_unknown_scenario_is_the_usual_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--list --scenario foo`` listed every scenario and exited 0."""
    assert main(["simulate", "--list", "--scenario", "foo"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        "flower-edge simulate: error: --scenario: unknown scenario 'foo'; valid scenarios: "
        "digits-20, mnist1d-100, mnist1d-200-skew"
    )


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--strategy", "all", "--seed", "3"], "--strategy, --seed cannot"),
        (["--seed", "0"], "--seed cannot"),  # the default value, given: still refused
        (["--json", "--out", "x"], "--out cannot"),
        (["--verbose"], "--verbose cannot"),
        (["--engine", "ray", "--cpus", "2", "--ray-address", "auto"], "--engine, --cpus, --ray"),
        (["--clients", "4", "--rounds", "2", "--heterogeneity", "3"], "--clients, --rounds, --h"),
        (["--threshold", "2", "--scenario", "digits-20"], "--threshold cannot"),
    ],
)
def test_list_refuses_the_options_it_would_ignore(
    extra: list[str],
    named: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--list --strategy all --seed 3`` listed the scenarios, the other options ignored."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--list", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith(f"flower-edge simulate: error: {named}"), captured.err
    assert "takes only --scenario and --json" in captured.err
    assert list(tmp_path.iterdir()) == []  # no --out folder


def test_given_options_counts_an_option_given_its_default_value() -> None:
    from flower_edge.cli import build_parser
    from simulations.cli_options import given_options

    args = build_parser().parse_args(["simulate", "--seed", "0", "--json", "--seed", "1"])
    assert given_options(args) == ["--seed", "--json"]
    assert (args.seed, args.json, args.strategy) == (1, True, "all")
    assert given_options(build_parser().parse_args(["simulate"])) == []


#: ``--option METAVAR`` in prose: a simulate option and an upper-case placeholder
_OPTION_WITH_METAVAR = re.compile(r"--([a-z][a-z-]*) ([A-Z][A-Z_]*)(?![\w:])")


def test_the_help_and_the_docs_name_the_same_placeholders() -> None:
    """``simulate --help`` showed ``--seed SEED``, ``--rounds ROUNDS`` and ``--cpus CPUS``
    where the docs and the module's usage write ``--seed S``, ``--rounds R``, ``--cpus N``."""
    import simulations.cli
    from flower_edge.cli import build_parser

    usage = build_parser().parse_args(["simulate"]).command_parser.format_usage()
    metavars = dict(_OPTION_WITH_METAVAR.findall(usage))
    assert metavars["seed"] == "S"
    root = Path(__file__).resolve().parent.parent
    module_usage = (simulations.cli.__doc__ or "").partition("Usage::\n\n")[2].split("\n\n")[0]
    texts = {
        "simulations/cli.py usage": module_usage,
        **{
            name: (root / name).read_text(encoding="utf-8")
            for name in ("README.md", "docs/simulations.md")
        },
    }
    checked = 0
    for name, text in texts.items():
        for option, metavar in _OPTION_WITH_METAVAR.findall(text):
            if option in metavars:
                assert metavar == metavars[option], f"{name}: --{option} {metavar}"
                checked += 1
    assert checked >= 15  # the usage names every option with a value, the docs several


def test_json_only_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--engine", "inprocess", "--strategy", "fedbuff", "--clients", "5"]
    assert main([*argv, "--rounds", "2", "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing but JSON
    assert data["strategy"] == "fedbuff"
    assert data["rounds"] == 2
    assert len(data["history"]) == 3
    assert "fedbuff" in captured.err  # progress on stderr


def test_all_strategies_write_a_list_and_plots(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    argv = ["simulate", "--engine", "inprocess", "--clients", "5", "--rounds", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "results and plots in" in stdout
    data = json.loads((out / "results.json").read_text())
    assert [r["strategy"] for r in data] == ["edge", "edge-seed", "fedavg", "fedbuff", "fedasync"]
    assert [r["threshold"] for r in data] == [1, 1, None, 1, 1]  # K lowered by --clients
    pngs = ("accuracy.png", "radar.png", "timeline-edge.png", "timeline-edge-seed.png")
    for name in (*pngs, "timeline-fedavg.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"
    summary = (out / "summary.txt").read_text()
    assert "fedasync" in summary
    # every row says what it is; edge names its departures from the seeds
    assert all(r["description"].startswith(r["strategy"] + ":") for r in data)
    assert "departures from the seed" in data[0]["description"]
    assert "the seeds exactly" in data[1]["description"]
    assert data[1]["description"] in summary


def test_a_reused_out_folder_loses_the_timelines_of_strategies_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: ``--out`` reused from an ``all`` run kept every old
    timeline beside the new results."""
    from simulations.outputs import remove_stale_timelines

    for name in ("edge", "fedbuff"):
        (tmp_path / f"timeline-{name}.png").write_bytes(b"png")
    mine = tmp_path / "timeline-mine.png"  # not a file name of this command: kept
    mine.write_bytes(b"png")
    remove_stale_timelines(tmp_path, {"edge"})
    assert (tmp_path / "timeline-edge.png").is_file()
    assert not (tmp_path / "timeline-fedbuff.png").exists()
    assert mine.is_file()
    assert "removed" in capsys.readouterr().err
