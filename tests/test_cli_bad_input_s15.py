"""Whole numbers written as floats (``400.0``) where an integer is read from JSON or TOML.

Found by a probe: ``flower-edge plan`` refused a ``--profiles`` file whose ``capacity`` was
``400.0`` ("must be an integer"), as pandas' ``to_json`` and JavaScript's ``JSON.stringify`` of a
float column write it; ``analyze --model-kwargs '{"hidden": 16.0}'`` and a profile report with
``"cores": 8.0`` were refused the same way. They are taken as the integer now; ``400.5``, NaN,
infinity, booleans and strings are still refused with a message that names the field.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import PLAN_NODES, example_doc, fails, plan_argv

from flower_edge import validate
from flower_edge.errors import ConfigError, InputError


@pytest.mark.parametrize("value", [400.0, np.float64(400.0), np.float32(400.0), 400])
def test_integer_takes_a_whole_float_where_asked(value: object) -> None:
    got = validate.integer("capacity", value, low=0, integral_float=True)
    assert got == 400
    assert type(got) is int


@pytest.mark.parametrize(
    "value", [400.5, float("nan"), float("inf"), -float("inf"), True, "400", [400], None]
)
def test_integer_still_refuses_what_is_not_a_whole_number(value: object) -> None:
    with pytest.raises(InputError, match=r"^nodes\[0\]\.capacity must be an integer >= 0, got "):
        validate.integer("nodes[0].capacity", value, low=0, integral_float=True, error=InputError)


def test_integer_refuses_a_whole_float_unless_asked_and_names_the_value_as_received() -> None:
    with pytest.raises(ConfigError, match=r"^threshold K must be an integer >= 1, got 2\.0$"):
        validate.integer("threshold K", 2.0, low=1)
    with pytest.raises(ConfigError, match=r"^hidden must be an integer in \[1, 10\], got 1e\+30$"):
        validate.integer("hidden", 1e30, low=1, high=10, integral_float=True)
    assert validate.whole(-3.0) == -3
    assert validate.whole(True) is True
    assert validate.whole(2.5) == 2.5


def _plan_json(tmp_path: Path, capacity: object, capsys: pytest.CaptureFixture[str]) -> dict:
    from flower_edge.cli import main

    nodes = json.loads(json.dumps(PLAN_NODES))
    nodes["nodes"][1]["capacity"] = capacity
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(nodes), encoding="utf-8")
    assert main(plan_argv(str(path), "--json")) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_takes_a_capacity_written_as_a_whole_float(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_float = _plan_json(tmp_path, 30.0, capsys)
    assert as_float == _plan_json(tmp_path, 30, capsys)
    assert as_float["nodes"][1]["samples"] == 30  # the cap binds: jetson would take more
    assert as_float != _plan_json(tmp_path, None, capsys)


@pytest.mark.parametrize(
    ("capacity", "shown"),
    [("400.5", "400.5"), ("NaN", "nan"), ("Infinity", "inf"), ("true", "True"), ('"400"', "'400'")],
)
def test_plan_still_refuses_a_capacity_that_is_not_a_whole_number(
    capacity: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = json.dumps(PLAN_NODES).replace('"disk": 5}', f'"disk": 5}}, "capacity": {capacity}')
    path = tmp_path / "nodes.json"
    path.write_text(text, encoding="utf-8")
    fails(plan_argv(str(path)), capsys, f"nodes[0].capacity must be an integer >= 0, got {shown}")


def test_analyze_takes_a_model_kwarg_written_as_a_whole_float(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from flower_edge.cli import main
    from flower_edge.models import build_model

    model = build_model("mlp", in_features=8.0, hidden=16.0)
    assert [tuple(p.shape) for p in model.parameters()][0] == (16, 8)
    argv = ["analyze", "mlp", "--input-shape", "8,64", "--json", "--model-kwargs"]
    assert main([*argv, '{"hidden": 16.0}']) == 0
    as_float = json.loads(capsys.readouterr().out)
    assert main([*argv, '{"hidden": 16}']) == 0
    assert as_float == json.loads(capsys.readouterr().out)


def test_a_profile_report_with_whole_floats_reads_as_integers() -> None:
    from flower_edge.profiling.report import ProfileReport

    doc = example_doc()
    doc["host"]["cores"] = float(doc["host"]["cores"])
    doc["host"]["memory_bytes"] = float(doc["host"]["memory_bytes"])
    workload = doc["resources"]["cpu"]["workloads"][0]
    workload["samples"] = float(workload["samples"])
    report = ProfileReport.from_json(json.dumps(doc))
    assert type(report.host.cores) is int
    assert type(report.host.memory_bytes) is int
    assert type(report.resources["cpu"].workloads[0].samples) is int
    assert report.to_dict() == ProfileReport.from_json(json.dumps(example_doc())).to_dict()
    workload["samples"] = workload["samples"] + 0.5
    with pytest.raises(InputError, match=r"resources\.cpu\.workloads\[0\]: .* samples must be an"):
        ProfileReport.from_json(json.dumps(doc))
