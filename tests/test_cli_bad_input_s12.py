"""Defects found by the twelfth session's new-user probe of the command line and its files."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
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
