"""The radar plot (``simulations.plots.plot_radar``) and ``flower-edge plan --plot`` without it."""

from __future__ import annotations

import json
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from flower_edge import cli_plan
from flower_edge.cli import main
from flower_edge.errors import InputError
from simulations.plots import plot_radar

NODES = [
    {"id": "a", "resources": {"cpu": 10, "gpu": 0, "memory": 40, "disk": 5}},
    {"id": "b", "resources": {"cpu": 20, "gpu": 80, "memory": 60, "disk": 10}},
]


@pytest.mark.parametrize("n", [2, 50])
def test_plot_radar_writes_png(tmp_path: Path, n: int) -> None:
    rng = np.random.default_rng(n)
    ev = rng.uniform(0.1, 5.0, size=(n, 4))
    out = plot_radar(ev, 0.6, [f"node-{i}" for i in range(n)], tmp_path / "radar.png")
    assert out == tmp_path / "radar.png"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.stat().st_size > 10_000


def test_plot_radar_label_count(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"labels must have one entry per node \(2\), got 1"):
        plot_radar(np.ones((2, 4)), 0.5, ["a"], tmp_path / "x.png")


def test_plan_finds_the_radar_plot_through_its_entry_point() -> None:
    assert cli_plan.radar_plotter() is plot_radar


BROKEN = EntryPoint("radar", "no_such_module_h6.plots:plot_radar", cli_plan.PLOTS_GROUP)


@pytest.mark.parametrize(
    ("missing", "complaint"),
    [
        ("entry point", "flower-edge plan: error: --plot needs the radar plot"),
        ("matplotlib", "flower-edge plan: error: --plot needs matplotlib"),
        ("module", "--plot: cannot import the radar plot 'no_such_module_h6.plots:plot_radar'"),
    ],
)
def test_plan_plot_without_its_upper_layer_is_bad_input(
    missing: str,
    complaint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if missing == "entry point":
        monkeypatch.setattr(cli_plan, "entry_points", lambda **_: [])
    elif missing == "matplotlib":
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    else:
        monkeypatch.setattr(cli_plan, "entry_points", lambda **_: [BROKEN])
    profiles = tmp_path / "p.json"
    profiles.write_text(json.dumps({"nodes": NODES}))
    png = tmp_path / "radar.png"
    argv = ["plan", "--profiles", str(profiles), "--total-samples", "10"]
    assert main([*argv, "--compute-share", "0.5", "--plot", str(png), "--json"]) == 2
    assert complaint in capsys.readouterr().err
    assert not png.exists()


def test_plan_without_plot_needs_no_radar_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_plan, "entry_points", lambda **_: [])
    profiles = tmp_path / "p.json"
    profiles.write_text(json.dumps({"nodes": NODES}))
    argv = ["plan", "--profiles", str(profiles), "--total-samples", "10"]
    assert main([*argv, "--compute-share", "0.5", "--json"]) == 0
    assert sum(n["samples"] for n in json.loads(capsys.readouterr().out)["nodes"]) == 10


GPU_LESS = [  # no gpu anywhere: --drop-empty-axes draws a triangle; c has no 4-axis area
    {"id": "a", "resources": {"cpu": 100, "memory": 50, "disk": 10}},
    {"id": "b", "resources": {"cpu": 200, "memory": 80, "disk": 20}},
    {"id": "c", "resources": {"cpu": 50, "memory": 30}},
]


@pytest.mark.parametrize("options", [["--drop-empty-axes"], ["--order-invariant"], []])
def test_plan_plot_shows_the_plans_match_ratios(
    options: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chart of ``plan --plot`` is the plan's: its axes and its legend's ratios.

    Found by a new-user probe: with ``--drop-empty-axes`` the plan rated GPU-less nodes on
    three axes (a: 0.295, c: 0.027) while the chart drew four and labelled a 0.172, c 0.000.
    """
    from matplotlib.figure import Figure

    seen: dict[str, list[str]] = {}

    def record(fig: Figure, *_: object, **__: object) -> None:
        ax = fig.axes[0]
        legend = ax.get_legend()
        assert legend is not None
        seen["legend"] = [t.get_text() for t in legend.get_texts()]
        seen["axes"] = [t.get_text().split("\n")[0] for t in ax.texts]

    monkeypatch.setattr(Figure, "savefig", record)
    profiles = tmp_path / "p.json"
    profiles.write_text(json.dumps({"nodes": GPU_LESS}))
    argv = ["plan", "--profiles", str(profiles), "--total-samples", "100"]
    png = str(tmp_path / "r.png")
    assert main([*argv, "--compute-share", "0.4", *options, "--plot", png, "--json"]) == 0
    ratios = {n["id"]: n["match_ratio"] for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert seen["legend"] == [f"{i}  m={m:.3f}" for i, m in ratios.items()]
    dropped = options == ["--drop-empty-axes"]
    assert seen["axes"] == (
        ["cpu", "memory", "disk"] if dropped else ["cpu", "gpu", "memory", "disk"]
    )
