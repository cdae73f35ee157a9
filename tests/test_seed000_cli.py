"""``flower-edge analyze`` and ``flower-edge plan``: JSON contracts and bad input (exit 2)."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ANALYZE_FIELDS

from flower_edge.allocation import TimeModel, fit_time_model, predicted_makespan
from flower_edge.cli import main
from flower_edge.cli_plan import GIVEN_SHARE, build_plan
from flower_edge.radar import match_ratios, standardise

NODES: list[dict[str, Any]] = [
    {"id": "pi4", "resources": {"cpu": 10, "gpu": 0, "memory": 40, "disk": 5}, "capacity": 500},
    {"id": "jetson", "resources": {"cpu": 20, "gpu": 80, "memory": 60, "disk": 10}},
    {"id": "laptop", "resources": {"cpu": 60, "gpu": 0, "memory": 100, "disk": 30}},
]


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def fails(argv: list[str], capsys: pytest.CaptureFixture[str], match: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert match in err, err


# ---------------------------------------------------------------- analyze
def test_analyze_bundled_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(["analyze", "cnn", "--input-shape", "8,1,28,28", "--json"], capsys)
    assert set(doc) == ANALYZE_FIELDS
    assert (doc["share"], doc["includes_backward"]) == ("count", True)  # the defaults
    for op in doc["operators"]:
        assert set(op) == {"name", "op", "flops", "bytes", "intensity", "kind"}
        assert op["kind"] in ("compute", "memory")
        assert isinstance(op["flops"], float)
    n_compute = sum(op["kind"] == "compute" for op in doc["operators"])
    assert doc["compute_share"] == n_compute / len(doc["operators"])
    assert doc["memory_share"] == pytest.approx(1 - doc["compute_share"])


@pytest.mark.parametrize(
    ("extra", "share", "backward"),
    [
        ([], "count", True),
        (["--share", "flops"], "flops", True),
        (["--forward-only"], "count", False),
        (["--share", "flops", "--forward-only"], "flops", False),
    ],
)
def test_analyze_json_says_how_the_share_was_counted_and_over_which_pass(
    extra: list[str], share: str, backward: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON did not record ``--share`` nor ``--forward-only``: a saved profile's p_c could
    not be told from one counted another way (found by a CLI probe)."""
    doc = run_json(["analyze", "mlp", "--input-shape", "4,64", "--json", *extra], capsys)
    assert (doc["share"], doc["includes_backward"]) == (share, backward)
    flops = [op["flops"] for op in doc["operators"]]
    compute = [op["flops"] for op in doc["operators"] if op["kind"] == "compute"]
    n = sum(op["kind"] == "compute" for op in doc["operators"])
    expected = sum(compute) / sum(flops) if share == "flops" else n / len(flops)
    assert doc["compute_share"] == pytest.approx(expected)


def test_analyze_forward_only_and_execute(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["analyze", "mlp", "--input-shape", "4,64", "--json"]
    doc = run_json([*argv, "--forward-only", "--execute"], capsys)
    assert doc["operators"]
    assert all(op["name"].startswith("fwd/") for op in doc["operators"])


def test_analyze_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "transformer", "--input-shape", "4,16"]) == 0
    out = capsys.readouterr().out
    assert "compute share p_c =" in out
    assert "aten.addmm.default" in out


def test_analyze_factory_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "seed000_user_models.py").write_text(
        textwrap.dedent(
            """
            from torch import nn

            def tiny():
                return nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 2))

            def broken():
                raise ValueError("no weights here")

            def not_a_module():
                return 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = "seed000_user_models:tiny"
    doc = run_json(["analyze", spec, "--input-shape", "3,6", "--json", "--share", "flops"], capsys)
    assert any(op["op"] == "aten.tanh.default" for op in doc["operators"])
    fails(
        ["analyze", "seed000_user_models:broken", "--input-shape", "3,6"],
        capsys,
        "the factory raised ValueError: no weights here",
    )
    fails(
        ["analyze", "seed000_user_models:not_a_module", "--input-shape", "3,6"],
        capsys,
        "returned int, not a torch.nn.Module",
    )
    fails(
        ["analyze", "seed000_user_models:missing", "--input-shape", "3,6"],
        capsys,
        "has no callable 'missing'",
    )
    fails(["analyze", "no_such_pkg_xyz:f", "--input-shape", "3,6"], capsys, "cannot import")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["analyze", "nope", "--input-shape", "2,3"], "neither pkg.mod:factory nor a bundled"),
        (["analyze", "mlp", "--input-shape", "2,a"], "--input-shape must be comma-separated"),
        (["analyze", "mlp", "--input-shape", "2,0"], "--input-shape must be comma-separated"),
        (
            ["analyze", "cnn", "--input-shape", "2,1,28,28", "--model-kwargs", '{"image_size": 8}'],
            "does not fit the model (CNN)",
        ),
        (["analyze", "mlp", "--input-shape", "2,3", "--model-kwargs", "[1]"], "JSON object"),
    ],
)
def test_analyze_bad_input(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    fails(argv, capsys, match)


# ---------------------------------------------------------------- plan
def test_plan_json_contract_and_formulas(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    argv = ["plan", "--profiles", profiles, "--total-samples", "3000", "--compute-share", "0.3"]
    doc = run_json([*argv, "--json"], capsys)
    assert set(doc) == {
        "compute_share",
        "memory_share",
        "compute_share_source",
        "model",
        "input_shape",
        "model_kwargs",
        "share",
        "includes_backward",
        "order_invariant",
        "drop_empty_axes",
        "method",
        "makespan",
        "nodes",
    }
    assert doc["compute_share_source"] == "given"  # --compute-share: no model, no analysis
    assert [doc[k] for k in ("model", "input_shape", "model_kwargs")] == [None] * 3
    assert (doc["share"], doc["includes_backward"]) == (None, None)
    assert (doc["order_invariant"], doc["drop_empty_axes"]) == (False, False)
    assert doc["method"] == "seed"
    assert doc["compute_share"] == 0.3
    assert doc["memory_share"] == pytest.approx(0.7)
    ev = np.array([[n["resources"][r] for r in ("cpu", "gpu", "memory", "disk")] for n in NODES])
    ratios = match_ratios(ev, 0.3)
    scores = standardise(ev)
    assert [n["id"] for n in doc["nodes"]] == ["pi4", "jetson", "laptop"]
    for d, node in enumerate(doc["nodes"]):
        assert set(node) == {"id", "scores", "match_ratio", "samples", "predicted_seconds"}
        assert node["match_ratio"] == pytest.approx(ratios[d])
        assert list(node["scores"].values()) == pytest.approx(list(scores[d]))
    samples = [n["samples"] for n in doc["nodes"]]
    assert sum(samples) == 3000
    assert samples[0] <= 500
    # no observations: prior k = 1 / m, b = 0, under which formula 7 is already balanced
    models = [TimeModel(1 / m, 0.0) for m in ratios]
    assert doc["makespan"] == pytest.approx(predicted_makespan(samples, models))
    exact = 3000 * ratios / ratios.sum()
    assert np.all(np.abs(np.asarray(samples) - exact) <= 1)


def test_plan_with_observations_and_optimal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    obs_data = {
        "pi4": [[100, 12.0], [200, 22.0], [300, 32.0], [400, 500.0], [500, 52.0], [50, 7.0]],
        "jetson": [[100, 3.0], [300, 7.0]],
        "laptop": [[500, 6.0], [1000, 11.0], [1500, 16.0]],
    }
    obs = write(tmp_path, "o.json", obs_data)
    base = ["plan", "--profiles", profiles, "--total-samples", "3000", "--compute-share", "0.3"]
    seed = run_json([*base, "--observations", obs, "--json"], capsys)
    opt = run_json([*base, "--observations", obs, "--method", "optimal", "--json"], capsys)
    models = [fit_time_model([(x, t) for x, t in obs_data[n["id"]]]) for n in NODES]
    assert models[0] == pytest.approx(TimeModel(0.1, 2.0))
    for doc in (seed, opt):
        samples = [n["samples"] for n in doc["nodes"]]
        assert sum(samples) == 3000
        assert samples[0] <= 500
        assert doc["makespan"] == pytest.approx(predicted_makespan(samples, models))
    assert opt["method"] == "optimal"
    assert opt["makespan"] <= seed["makespan"] + 1e-9


def test_plan_notes_an_absurd_claim_and_can_cap_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: a node claiming 1e30 on every resource took all the samples
    and nothing said so."""
    evil = {"id": "evil", "resources": {r: 1e30 for r in ("cpu", "gpu", "memory", "disk")}}
    profiles = write(tmp_path, "p.json", {"nodes": [*NODES, evil]})
    base = ["plan", "--profiles", profiles, "--total-samples", "3000", "--compute-share", "0.4"]
    assert main([*base, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout stays the JSON plan
    assert doc["nodes"][3]["samples"] > 2990  # the seed's formula 7, uncapped by default
    notes = [line for line in captured.err.splitlines() if "plan: note: node evil" in line]
    assert len(notes) == 4  # one per resource
    assert "--max-share-fraction" in notes[0]
    assert not [line for line in captured.err.splitlines() if "note: node pi4" in line]
    doc = run_json([*base, "--json", "--max-share-fraction", "0.4"], capsys)
    samples = [n["samples"] for n in doc["nodes"]]
    assert max(samples) == 1200
    assert sum(samples) == 3000
    fails([*base, "--max-share-fraction", "0"], capsys, "--max-share-fraction must be in (0, 1]")
    fails([*base, "--max-share-fraction", "0.2"], capsys, "--max-share-fraction 0.2: at most 600")


def test_plan_notes_observations_that_give_no_time_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    obs = write(tmp_path, "o.json", {"jetson": [[1000, 1.0]], "laptop": [[50, 3.0], [100, 5.0]]})
    argv = ["plan", "--profiles", profiles, "--total-samples", "3000", "--compute-share", "0.3"]
    assert main([*argv, "--observations", obs]) == 0
    err = capsys.readouterr().err
    (note,) = [line for line in err.splitlines() if ": note: " in line]
    assert "node jetson: its observations give no time model" in note
    assert "match-ratio prior" in note


def test_plan_notes_a_seconds_per_sample_that_observations_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: ``--seconds-per-sample 5`` beside observations that set the
    prior was ignored without a word; where no observation gives a model it is the prior."""
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    obs = write(tmp_path, "o.json", {"laptop": [[50, 3.0], [100, 5.0]]})
    argv = ["plan", "--profiles", profiles, "--total-samples", "3000", "--compute-share", "0.3"]
    given = [*argv, "--seconds-per-sample", "5", "--json"]
    with_obs = run_json([*given, "--observations", obs], capsys)
    assert with_obs == run_json([*argv, "--json", "--observations", obs], capsys)
    assert main([*given, "--observations", obs]) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    assert "--seconds-per-sample 5 is not used" in note
    assert main(given) == 0  # no observations: K0 is the prior, and nothing to note
    captured = capsys.readouterr()
    assert ": note: " not in captured.err
    assert json.loads(captured.out)["makespan"] == pytest.approx(
        5 * run_json([*argv, "--json"], capsys)["makespan"]
    )


def test_plan_reads_profile_reports_and_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def report(node_id: str, evals: dict[str, float]) -> dict[str, Any]:
        resources: dict[str, dict[str, Any]] = {
            r: {
                "available": evals[r] > 0,
                "evaluation": evals[r],
                "reason": None if evals[r] > 0 else "absent",
                "workloads": [],
            }
            for r in ("cpu", "gpu", "memory", "disk")
        }
        return {"id": node_id, "host": {}, "resources": resources, "mode": "quick",
                "elapsed_seconds": 1.0}  # fmt: skip

    data = [report(n["id"], n["resources"]) for n in NODES]
    data[1] = {"id": "jetson", "profile": {k: v for k, v in data[1].items() if k != "id"}}
    profiles = write(tmp_path, "reports.json", data)
    plot = tmp_path / "radar.png"
    argv = ["plan", "--profiles", profiles, "--total-samples", "100", "--model", "mlp"]
    doc = run_json([*argv, "--input-shape", "8,64", "--plot", str(plot), "--json"], capsys)
    assert 0 < doc["compute_share"] < 1
    ev = np.array([[n["resources"][r] for r in ("cpu", "gpu", "memory", "disk")] for n in NODES])
    ratios = match_ratios(ev, doc["compute_share"])
    assert [n["match_ratio"] for n in doc["nodes"]] == pytest.approx(list(ratios))
    assert plot.read_bytes()[:4] == b"\x89PNG"


KWARGS = ["--model-kwargs", '{"hidden": 16}']


@pytest.mark.parametrize(
    ("extra", "share", "backward"),
    [
        ([], "count", True),
        (["--share", "flops"], "flops", True),
        (["--forward-only"], "count", False),
        (["--share", "flops", "--forward-only", *KWARGS], "flops", False),
    ],
)
def test_plan_json_records_how_p_c_was_obtained(
    extra: list[str],
    share: str,
    backward: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Found by a CLI probe: ``plan --json`` with ``--share flops --forward-only`` wrote the
    same fields as with the defaults (and as with ``--compute-share``), so a saved plan's p_c
    could not be told from one obtained another way; the record is ``analyze --json``'s."""
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    model = ["--model", "mlp", "--input-shape", "4,64", *extra]
    argv = ["plan", "--profiles", profiles, "--total-samples", "100", *model, "--json"]
    doc = run_json(argv, capsys)
    analysis = run_json(["analyze", "mlp", "--input-shape", "4,64", *extra, "--json"], capsys)
    assert doc["compute_share_source"] == "model"
    assert (doc["model"], doc["input_shape"]) == ("mlp", [4, 64])
    assert doc["model_kwargs"] == ({"hidden": 16} if "--model-kwargs" in extra else None)
    assert (doc["share"], doc["includes_backward"]) == (share, backward)
    assert (analysis["share"], analysis["includes_backward"]) == (share, backward)
    assert doc["compute_share"] == analysis["compute_share"]
    assert main(argv[:-1]) == 0  # the table says it too
    passes = "forward and backward" if backward else "forward only"
    assert f"(--model mlp: by {share}, {passes})" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "invariant", "dropped"),
    [
        ([], False, False),
        (["--order-invariant"], True, False),
        (["--drop-empty-axes"], False, True),
        (["--order-invariant", "--drop-empty-axes"], True, True),
    ],
)
def test_plan_json_records_the_radar_options(
    extra: list[str],
    invariant: bool,
    dropped: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The match ratios depend on ``--order-invariant`` and ``--drop-empty-axes``, which the
    JSON did not record (found by a CLI probe)."""
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    argv = ["plan", "--profiles", profiles, "--total-samples", "30", "--compute-share", "0.4"]
    doc = run_json([*argv, *extra, "--json"], capsys)
    assert (doc["order_invariant"], doc["drop_empty_axes"]) == (invariant, dropped)
    assert doc["compute_share_source"] == "given"


def test_build_plan_records_a_given_p_c_by_default() -> None:
    """In-process callers pass p_c as a number: the document says it was given."""
    ev = [[n["resources"].get(r, 0) for r in ("cpu", "gpu", "memory", "disk")] for n in NODES]
    doc, _ = build_plan([n["id"] for n in NODES], ev, [None] * 3, 30, 0.4, order_invariant=True)
    assert {k: doc[k] for k in GIVEN_SHARE} == dict(GIVEN_SHARE)
    assert (doc["order_invariant"], doc["drop_empty_axes"]) == (True, False)


def test_plan_order_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    argv = ["plan", "--profiles", profiles, "--total-samples", "30", "--compute-share", "0.4"]
    doc = run_json([*argv, "--order-invariant", "--json"], capsys)
    ev = np.array([[n["resources"][r] for r in ("cpu", "gpu", "memory", "disk")] for n in NODES])
    expected = match_ratios(ev, 0.4, order_invariant=True)
    assert [n["match_ratio"] for n in doc["nodes"]] == pytest.approx(list(expected))


def test_plan_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    argv = ["plan", "--profiles", profiles, "--total-samples", "30", "--compute-share", "0.5"]
    assert main([*argv, "--max-rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "method seed: makespan" in out
    assert "(optimal:" in out
    assert "1 more nodes" in out


def test_plan_zero_match_node_gets_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        # C and M are not neighbours on the seed's four axes: a also needs D for an area
        {"id": "a", "resources": {"cpu": 1.0, "memory": 1.0, "disk": 1.0}},
        {"id": "b", "resources": {"cpu": 0.0, "memory": 0.0, "disk": 1.0}},
    ]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    argv = ["plan", "--profiles", profiles, "--total-samples", "10", "--compute-share", "0.5"]
    for method in ("seed", "optimal"):
        doc = run_json([*argv, "--method", method, "--json"], capsys)
        assert [n["samples"] for n in doc["nodes"]] == [10, 0]
        assert doc["nodes"][1]["match_ratio"] == 0.0


BAD_PLANS: list[tuple[Any, list[str], str]] = [
    ({"nodes": []}, [], "node list is empty"),
    ({"nodes": [NODES[0], NODES[0]]}, [], "nodes[1].id 'pi4' duplicates nodes[0].id"),
    (
        '{"nodes": [{"id": "x", "resources": {"cpu": NaN}}]}',
        [],
        "nodes[0].resources.cpu must be a finite number >= 0, got nan",
    ),
    (
        {"nodes": [{"id": "x", "resources": {"cpu": -1}}]},
        [],
        "nodes[0].resources.cpu must be >= 0, got -1",
    ),
    (
        '{"nodes": [{"id": "x", "resources": {"cpu": Infinity}}]}',
        [],
        "must be a finite number >= 0, got inf",
    ),
    ({"nodes": [{"id": "x", "resources": {"tpu": 1}}]}, [], "unknown keys ['tpu']"),
    ({"nodes": NODES, "node": []}, [], "unknown top-level keys ['node']"),
    (  # one `profile --json` report (a --cache file) as is: say to list it with an id
        {"host": {}, "mode": "quick", "elapsed_seconds": 1.0, "resources": {"cpu": {}}},
        [],
        "profiles is a single `flower-edge profile --json` report; plan needs a list",
    ),
    ({"nodes": [{"resources": {"cpu": 1}}]}, [], "nodes[0].id must be a non-empty string"),
    ({"nodes": [{"id": "x", "resources": {"cpu": 1}, "capacity": -3}]}, [], "capacity must be"),
    ({"nodes": [{"id": "x", "resources": {"cpu": 0}}]}, [], "no node scores above zero"),
    ({"nodes": NODES}, ["--total-samples", "-5"], "--total-samples must be an integer >= 0"),
    (
        {"nodes": [{"id": "x", "resources": {"cpu": 1, "gpu": 1}, "capacity": 5}]},
        [],
        "can hold 5 samples, fewer than total=10",
    ),
    ({"nodes": NODES}, ["--compute-share", "1.5"], "--compute-share must be in [0, 1], got 1.5"),
    ({"nodes": NODES}, ["--model", "mlp"], "exactly one of --model"),
    ("{not json", [], "is not valid JSON"),
]


@pytest.mark.parametrize(("profiles", "extra", "match"), BAD_PLANS)
def test_plan_bad_input(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    profiles: Any,
    extra: list[str],
    match: str,
) -> None:
    path = write(tmp_path, "p.json", profiles)
    argv = ["plan", "--profiles", path, "--total-samples", "10", "--compute-share", "0.5"]
    if "--total-samples" in extra:
        argv[3:5] = []
    if "--compute-share" in extra:  # replace the default share
        argv = argv[:-2]
    fails([*argv, *extra], capsys, match)


def test_plan_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profiles = write(tmp_path, "p.json", {"nodes": NODES})
    base = ["plan", "--profiles", profiles, "--total-samples", "10", "--compute-share", "0.5"]
    fails(["plan", "--profiles", str(tmp_path / "none.json"), *base[3:]], capsys, "--profiles")
    obs = write(tmp_path, "o.json", {"ghost": [[1, 2]]})
    fails([*base, "--observations", obs], capsys, "unknown node id 'ghost'")
    obs = write(tmp_path, "o.json", {"pi4": [[1, math.pi, 3]]})
    fails([*base, "--observations", obs], capsys, "must be a [load, seconds] pair")
    fails([*base, "--plot", str(tmp_path / "no" / "r.png")], capsys, "does not exist")


def test_plan_keeps_four_axes_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two GPU-less nodes: 70/30 on the seed's four axes, 63/37 with the empty G axis dropped."""
    nodes = [
        {"id": "a", "resources": {"cpu": 1.0, "memory": 1.0, "disk": 1.0}},
        {"id": "b", "resources": {"cpu": 1.0, "memory": 1.0, "disk": 0.43}},
    ]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    argv = ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "0.4"]
    four = run_json([*argv, "--json"], capsys)
    three = run_json([*argv, "--drop-empty-axes", "--json"], capsys)
    assert [n["samples"] for n in four["nodes"]] == [70, 30]
    assert [n["samples"] for n in three["nodes"]] == [63, 37]


def test_plan_notes_a_node_that_gets_nothing_for_want_of_radar_area(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a new-user probe: a node rated on cpu alone got 0 samples and nothing said so."""
    full = {"cpu": 1.0, "gpu": 1.0, "memory": 1.0, "disk": 1.0}
    nodes = [{"id": "a", "resources": {"cpu": 5.0}}, {"id": "b", "resources": full}]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    base = ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "0.4"]
    assert main([*base, "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert [n["samples"] for n in doc["nodes"]] == [0, 100]
    (note,) = [line for line in captured.err.splitlines() if ": note: " in line]
    assert "node a: match ratio 0, so no samples: rated on cpu" in note
    assert "rate all four resources" in note
    # b rates every axis, so none is empty: --drop-empty-axes would change nothing for a
    # (the note suggested it, found by a CLI probe)
    assert "--drop-empty-axes" not in note
    again = run_json([*base, "--drop-empty-axes", "--json"], capsys)
    assert [n["samples"] for n in again["nodes"]] == [0, 100]
    # F = 0 plans nothing, so there is nothing to say
    assert main([*base[:4], "0", *base[5:], "--json"]) == 0
    assert ": note: " not in capsys.readouterr().err


def test_plan_suggests_drop_empty_axes_only_where_it_helps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPU-less nodes: one rated on cpu and memory (not neighbours on C, G, M, D) has no area
    on four axes and one on three, so the note names --drop-empty-axes, and it works."""
    nodes = [
        {"id": "a", "resources": {"cpu": 1.0, "memory": 1.0}},
        {"id": "b", "resources": {"cpu": 1.0, "memory": 1.0, "disk": 1.0}},
    ]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    base = ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "0.4"]
    assert main([*base, "--json"]) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    assert "node a: match ratio 0" in note
    assert "rate all four resources or pass --drop-empty-axes" in note
    doc = run_json([*base, "--drop-empty-axes", "--json"], capsys)
    assert doc["nodes"][0]["samples"] > 0


def test_plan_names_a_p_c_of_1_as_why_nodes_have_no_area(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a CLI probe: ``--compute-share 1`` (p_m = 0: memory and disk axes of length 0)
    left GPU-less nodes rated on cpu, memory and disk without area, and the note blamed their
    axes and suggested --drop-empty-axes, which cannot help while one node has a GPU."""
    rated = {"cpu": 1.0, "memory": 1.0, "disk": 1.0}
    nodes = [
        {"id": "gpu", "resources": {**rated, "gpu": 1.0}},
        {"id": "cpu", "resources": rated},
    ]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    base = ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "1"]
    assert main([*base, "--json"]) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    assert "node cpu: match ratio 0" in note
    assert "p_c = 1 gives the memory and disk axes length 0: only cpu and gpu count" in note
    assert "--drop-empty-axes" not in note
    profiles = write(tmp_path, "q.json", {"nodes": nodes[1:]})
    base[2] = profiles
    fails(base, capsys, "p_c = 1 gives the memory and disk axes length 0")
    nodes = [
        {"id": "x", "resources": {"cpu": 1.0, "gpu": 1.0}},
        {"id": "y", "resources": {"memory": 1.0, "disk": 1.0}},
    ]
    base[2], base[-1] = write(tmp_path, "r.json", {"nodes": nodes}), "0"
    assert main([*base, "--json"]) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if ": note: " in line]
    assert "node x: match ratio 0" in note
    assert "p_c = 0 gives the cpu and gpu axes length 0: only memory and disk count" in note


def test_plan_note_of_a_no_area_node_with_observations_does_not_say_no_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by a CLI probe: a node of match ratio 0 whose observations give a time model
    takes samples in the rebalancing (637 of 1000 there), and the note said "so no samples"."""
    full = {"cpu": 1.0, "gpu": 1.0, "memory": 1.0, "disk": 1.0}
    nodes = [{"id": "a", "resources": {"cpu": 5.0}}, {"id": "b", "resources": full}]
    profiles = write(tmp_path, "p.json", {"nodes": nodes})
    obs = write(
        tmp_path, "o.json", {"a": [[100, 1.0], [200, 2.0]], "b": [[100, 10.0], [200, 20.0]]}
    )
    base = ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "0.4"]
    assert main([*base, "--observations", obs, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["nodes"][0]["samples"] > 0
    (note,) = [line for line in captured.err.splitlines() if ": note: " in line]
    assert "node a: match ratio 0, so no samples from the initial split" in note
    assert "may get it some in the rebalancing" in note
    assert main([*base, "--observations", write(tmp_path, "q.json", {"b": [[1, 2.0]]})]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note: node a" in line]
    assert notes == [notes[0]]
    assert "node a: match ratio 0, so no samples: rated on cpu" in notes[0]
