"""Bad input found by the seventh session's new-user probe: out-of-range seeds, spreads and
sample totals, an empty ``--out``, ``--plot`` names, degenerate bundled models; the empty
output folder a failed run used to leave; ``simulate --list --json``; and the share-cap log
level."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from conftest import fails, flwr_logs, plan_argv

from flower_edge.allocation import MAX_SAMPLES, initial_shares
from flower_edge.cli import main
from flower_edge.errors import InputError
from flower_edge.models import build_model
from simulations.scenarios import MAX_HETEROGENEITY, MAX_SEED, resolve_scenario

SIMULATE = ["simulate", "--engine", "inprocess", "--strategy", "edge", "--rounds", "1"]


# ---------------------------------------------------------------- simulate: ranges
@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--seed", str(MAX_SEED + 1)], "--seed"),
        (["--seed", "99999999999999999999"], "--seed"),
        (["--heterogeneity", "1e7"], "--heterogeneity"),
        (["--heterogeneity", "1e100"], "--heterogeneity"),
    ],
)
def test_simulate_out_of_range_fails_before_the_engine_and_leaves_no_folder(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o"
    fails([*SIMULATE, "--out", str(out), *argv], capsys, needle)
    assert not out.exists()


def test_the_largest_seed_and_spread_are_accepted() -> None:
    from simulations.app import SimSettings

    s = SimSettings.create("digits-20", "edge", seed=MAX_SEED, heterogeneity=MAX_HETEROGENEITY)
    assert s.seed == MAX_SEED
    assert s.scenario.heterogeneity == MAX_HETEROGENEITY


def test_scenario_and_run_config_bound_the_spread_and_the_seed() -> None:
    from simulations.app import SimSettings
    from simulations.settings import RUN_CONFIG_DEFAULTS

    with pytest.raises(InputError, match="heterogeneity"):
        resolve_scenario("digits-20", heterogeneity=2 * MAX_HETEROGENEITY)
    with pytest.raises(InputError, match="seed"):
        SimSettings.create("digits-20", "edge", seed=MAX_SEED + 1)
    cfg: dict[str, Any] = {**RUN_CONFIG_DEFAULTS, "heterogeneity": 1e12}
    with pytest.raises(InputError, match="heterogeneity"):
        SimSettings.from_run_config(cfg)


def test_simulate_empty_out_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([*SIMULATE, "--out", ""])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err
    assert "folder name" in err
    assert list(tmp_path.iterdir()) == []


def test_a_failed_run_removes_the_folder_it_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import simulations.cli as sim_cli

    def broken(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_cli, "_run", broken)
    out = tmp_path / "new"
    assert main([*SIMULATE, "--out", str(out)]) == 130
    assert not out.exists()
    kept = tmp_path / "kept"  # a folder the user made stays, empty or not
    kept.mkdir()
    assert main([*SIMULATE, "--out", str(kept)]) == 130
    assert kept.is_dir()


def test_simulate_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.scenarios import SCENARIOS

    assert main(["simulate", "--list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {name: sc.description for name, sc in SCENARIOS.items()}


# ---------------------------------------------------------------- plan
@pytest.mark.parametrize("total", [str(MAX_SAMPLES + 1), "100000000000000000000000"])
def test_plan_total_samples_beyond_exact_arithmetic(
    profiles: str,
    total: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = plan_argv(profiles)
    argv[argv.index("--total-samples") + 1] = total
    fails(argv, capsys, "--total-samples", str(MAX_SAMPLES))


def test_initial_shares_bound_the_total() -> None:
    assert sum(initial_shares(MAX_SAMPLES, [0.25, 0.75])) == MAX_SAMPLES
    with pytest.raises(InputError, match="total"):
        initial_shares(MAX_SAMPLES + 1, [0.25, 0.75])


def test_plan_plot_must_be_a_png(
    profiles: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fails(plan_argv(profiles, "--plot", str(tmp_path / "r.pdf")), capsys, "--plot", ".png")
    assert not (tmp_path / "r.pdf").exists()


def test_plan_plot_under_a_file_says_so(
    profiles: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x", encoding="utf-8")
    fails(plan_argv(profiles, "--plot", str(blocker / "x.png")), capsys, "is a file, not a folder")


# ---------------------------------------------------------------- models
@pytest.mark.parametrize(
    ("name", "kwargs", "field"),
    [
        ("mlp", {"hidden": 0}, "hidden"),
        ("cnn", {"width": 0}, "width"),
        ("mlp", {"num_classes": -1}, "num_classes"),
    ],
)
def test_bundled_models_refuse_empty_sizes(name: str, kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(InputError, match=field):
        build_model(name, **kwargs)


def test_analyze_refuses_a_zero_width_model(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["analyze", "mlp", "--input-shape", "4,64", "--model-kwargs", '{"hidden": 0}']
    fails(argv, capsys, "hidden")


# ---------------------------------------------------------------- the share cap's log level
def test_a_capped_share_is_info_and_an_absurd_claim_a_warning() -> None:
    """Found by a new-user probe: every mnist1d run warned ``node 48 share capped at 195
    samples (max_share_fraction 0.03); its profile claims 811``, the edge preset's cap (3x
    the mean share) doing its designed work; only a claim over 10x the cap warns."""
    from strategies.shares import SUSPECT_OVER_CAP, log_capped

    with flwr_logs(logging.INFO) as logs:
        # the probe's node: 811 claimed, cap 195 (4.2x): INFO; the other claims 5689 > 10x
        log_capped("edge", [48, 49], [811.0, 5689.0], 6500, 195, 0.03)
    capped = [r for r in logs.records if "share capped" in r.getMessage()]
    assert [(r.levelno, "node 48" in r.getMessage()) for r in capped] == [
        (logging.INFO, True),
        (logging.WARNING, False),
    ]
    with flwr_logs(logging.INFO) as logs:
        # ratios 1 : 1 : 2 of 400 samples, cap 150: the third claims 200 (< 10x the cap)
        log_capped("edge", [1, 2, 3], [1.0, 1.0, 2.0], 400, 150, 0.5)
        # the third claims 2000 / 2002 * 400 = 399.6, within 10x the cap of 40, but its ratio
        # is 2000x the best other node's: a boast (a claim is bounded by the total): WARNING
        log_capped("edge", [1, 2, 3], [1.0, 1.0, 2000.0], 400, 40, 0.5)
        # 20000 / 20002 * 4000 = 3999.6 > 10x the cap of 300: WARNING
        log_capped("edge", [1, 2, 3], [1.0, 1.0, 20000.0], 4000, 300, 0.5)
    capped = [r for r in logs.records if "share capped" in r.getMessage()]
    assert [r.levelno for r in capped] == [logging.INFO, logging.WARNING, logging.WARNING]
    assert "2e+03x the best other node's match ratio" in capped[1].getMessage()
    assert SUSPECT_OVER_CAP == 10.0


def test_plan_names_the_radar_when_no_node_has_a_match_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CPU-only ratings give every node a zero four-axis radar area: say so, not --total."""
    nodes = {
        "nodes": [
            {"id": n, "resources": {"cpu": c, "gpu": 0.0, "memory": m, "disk": 0.0}}
            for n, c, m in (("a", 1.0, 0.0), ("b", 2.0, 3.0))
        ]
    }
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(nodes), encoding="utf-8")
    fails(plan_argv(str(path)), capsys, "every node's match ratio is 0", "--drop-empty-axes")
    assert main(plan_argv(str(path), "--drop-empty-axes")) == 0
