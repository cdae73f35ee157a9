"""Records, seed formulas 3-4 and JSON round trips of ``flower_edge.profiling.report``."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from conftest import check_contract, example_doc
from hypothesis import given, settings
from hypothesis import strategies as st

from flower_edge.errors import InputError
from flower_edge.profiling import (
    RESOURCES,
    HostFacts,
    ProfileReport,
    ResourceProbe,
    ResourceReport,
    WorkloadResult,
    execution_intensity,
    resource_evaluation,
)


def host() -> HostFacts:
    return HostFacts(4, "test cpu", 8 * 2**30, None, (0.5, 0.25, 0.0), "Linux-x86_64")


def report(mode: str = "full") -> ProfileReport:
    cpu = ResourceReport.from_workloads(
        [WorkloadResult.measured("a", 100, 2.0, 0.5), WorkloadResult.measured("b", 30, 0.5, 1.0)]
    )
    disk = ResourceReport.from_workloads(
        [WorkloadResult.measured("d", 7, 0.7, 0.25), WorkloadResult.measured("e", 9, 3.0, 0.5)]
    )
    resources = {
        "disk": disk,
        "gpu": ResourceReport.absent("no CUDA device"),
        "memory": cpu,
        "cpu": cpu,
    }
    return ProfileReport(host(), resources, mode, 3.25)  # type: ignore[arg-type]


# ---------------------------------------------------------------- formulas 3 and 4


def test_formula_3_matches_hand_computation() -> None:
    assert execution_intensity(100, 2.0) == 50.0
    assert execution_intensity(30, 0.5) == 60.0
    assert execution_intensity(1, 4) == 0.25


def test_formula_4_matches_hand_computation() -> None:
    # (0.5 * 100/2 + 1.0 * 30/0.5) / 2 = (25 + 60) / 2 = 42.5
    workloads = [
        WorkloadResult.measured("a", 100, 2.0, 0.5),
        WorkloadResult.measured("b", 30, 0.5, 1.0),
    ]
    assert resource_evaluation(workloads) == 42.5
    # three workloads: (0.2*10 + 0.4*20 + 0.9*5) / 3 = (2 + 8 + 4.5) / 3
    three = [
        WorkloadResult.measured("x", 10, 1.0, 0.2),
        WorkloadResult.measured("y", 40, 2.0, 0.4),
        WorkloadResult.measured("z", 5, 1.0, 0.9),
    ]
    assert resource_evaluation(three) == pytest.approx(14.5 / 3, rel=1e-15)


def test_formula_4_is_zero_for_a_missing_resource() -> None:
    assert resource_evaluation([]) == 0.0
    assert ResourceReport.absent("no GPU").evaluation == 0.0


@given(
    st.lists(
        st.tuples(
            st.integers(1, 10**9),
            st.floats(1e-6, 1e5, allow_nan=False),
            st.floats(0.0, 1.0, allow_nan=False),
        ),
        min_size=1,
        max_size=8,
    )
)
@settings(max_examples=50, deadline=None)
def test_formula_4_equals_brute_force_mean(cases: list[tuple[int, float, float]]) -> None:
    workloads = [WorkloadResult.measured(f"w{i}", c, t, u) for i, (c, t, u) in enumerate(cases)]
    brute = sum(u * (c / t) for c, t, u in cases) / len(cases)
    assert resource_evaluation(workloads) == pytest.approx(brute, rel=1e-12)
    assert ResourceReport.from_workloads(workloads).evaluation == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize(
    ("capacity", "seconds", "match"),
    [
        (0, 1.0, r"capacity must be an integer in \[1, "),
        (True, 1.0, "capacity must be an integer"),
        (10, 0.0, r"seconds must be in \(0, "),
        (10, -1.0, "seconds must be in"),
        (10, math.nan, "seconds must be a finite number"),
        (10, math.inf, "seconds must be a finite number"),
        (10, "1", "seconds must be a finite number"),
    ],
)
def test_formula_3_rejects_bad_input(capacity: Any, seconds: Any, match: str) -> None:
    with pytest.raises(InputError, match=match):
        execution_intensity(capacity, seconds)


# ---------------------------------------------------------------- record validation


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, "workload name must be a non-empty string"),
        ({"samples": 0}, r"samples must be an integer in \[1, "),
        ({"samples": 2.5}, "samples must be an integer"),
        ({"seconds": math.nan}, "seconds must be a finite number"),
        ({"utilization": 1.5}, r"utilization must be in \[0, 1\]"),
        ({"utilization": -0.1}, r"utilization must be in \[0, 1\]"),
        ({"intensity": math.inf}, "intensity must be a finite number"),
        ({"intensity": 11.0}, r"intensity must equal samples / seconds = 10 \(seed formula 3\)"),
    ],
)
def test_workload_result_validates(kwargs: dict[str, Any], match: str) -> None:
    base: dict[str, Any] = {
        "name": "w",
        "samples": 20,
        "seconds": 2.0,
        "utilization": 0.5,
        "intensity": 10.0,
    }
    with pytest.raises(InputError, match=match):
        WorkloadResult(**(base | kwargs))


def test_resource_report_validates() -> None:
    w = WorkloadResult.measured("a", 100, 2.0, 0.5)
    with pytest.raises(InputError, match=r"evaluation must equal .* = 25 \(seed formula 4\)"):
        ResourceReport(True, 30.0, (w,))
    with pytest.raises(InputError, match="needs at least one workload"):
        ResourceReport(True, 0.0, ())
    with pytest.raises(InputError, match="unavailable resource has evaluation 0"):
        ResourceReport(False, 1.0, (), "none")
    with pytest.raises(InputError, match="unavailable resource has no workloads"):
        ResourceReport(False, 0.0, (w,), "none")
    with pytest.raises(InputError, match="needs a non-empty reason"):
        ResourceReport(False, 0.0, (), None)
    with pytest.raises(InputError, match="workload names must be unique"):
        ResourceReport.from_workloads([w, w])
    with pytest.raises(InputError, match="available must be a boolean"):
        ResourceReport(1, 25.0, (w,))  # type: ignore[arg-type]


def test_profile_report_validates() -> None:
    good = report()
    with pytest.raises(InputError, match=r"resources must have exactly the keys \('cpu', 'gpu'"):
        ProfileReport(good.host, {"cpu": good.resources["cpu"]}, "full", 1.0)
    with pytest.raises(InputError, match=r"mode must be one of quick, full, got"):
        ProfileReport(good.host, good.resources, "slow", 1.0)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="elapsed_seconds must be a finite number"):
        ProfileReport(good.host, good.resources, "full", math.nan)
    with pytest.raises(InputError, match="host.load_average must be 3 numbers"):
        HostFacts(2, "x", 1, None, (1.0, 2.0))  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"host.cores must be an integer in \[1, 65536\]"):
        HostFacts(0, "x", 1, None, (1.0, 2.0, 3.0))


def test_resources_are_stored_in_seed_axis_order_and_evaluations_follow() -> None:
    r = report()
    assert tuple(r.resources) == RESOURCES == ("cpu", "gpu", "memory", "disk")
    # disk: (0.25 * 7/0.7 + 0.5 * 9/3) / 2 = (2.5 + 1.5) / 2
    assert r.evaluations == {"cpu": 42.5, "gpu": 0.0, "memory": 42.5, "disk": 2.0}


def test_records_are_frozen() -> None:
    r = report()
    with pytest.raises(AttributeError):
        r.mode = "quick"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        r.resources["cpu"].workloads[0].samples = 3  # type: ignore[misc]


# ---------------------------------------------------------------- JSON


def test_json_round_trip_is_exact_and_meets_the_contract() -> None:
    r = report("quick")
    text = r.to_json()
    assert check_contract(json.loads(text)) == []
    assert ProfileReport.from_json(text) == r
    assert ProfileReport.from_json(text.encode()) == r
    assert ProfileReport.from_dict(r.to_dict()) == r


def test_hand_built_contract_document_parses() -> None:
    parsed = ProfileReport.from_dict(example_doc())
    assert parsed.evaluations == {"cpu": 42.5, "gpu": 0.0, "memory": 42.5, "disk": 42.5}
    assert parsed.to_dict() == example_doc()


def _broken(path: tuple[Any, ...], value: Any = None, delete: bool = False) -> str:
    doc = copy.deepcopy(report().to_dict())
    target = doc
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


BAD_REPORTS = [
    ("{", "profile report is not valid JSON"),
    pytest.param("[" * 50_000, "not valid JSON: maximum recursion depth", id="deeply-nested"),
    ("[]", "report must be a JSON object, got list"),
    (_broken(("mode",), delete=True), "report is missing key.* mode"),
    (_broken(("extra",), 1), "report has unknown key.* extra"),
    (_broken(("mode",), "slow"), r"mode must be one of quick, full, got"),
    (_broken(("elapsed_seconds",), "1"), "elapsed_seconds must be a finite number"),
    (_broken(("elapsed_seconds",), 1e300), r"elapsed_seconds must be in \[0, 604800\]"),
    (_broken(("host", "cores"), "4"), "host.cores must be an integer"),
    (_broken(("host", "cores"), True), "host.cores must be an integer"),
    (_broken(("host", "gpu_name"), 3), "host.gpu_name must be a string"),
    (_broken(("host", "load_average"), [1, 2]), "host.load_average must be 3 numbers"),
    (_broken(("host", "memory_bytes"), -1), r"host.memory_bytes must be an integer in \[0, "),
    (_broken(("resources", "gpu"), delete=True), "resources is missing key.* gpu"),
    (_broken(("resources", "tpu"), {}), "resources has unknown key.* tpu"),
    (_broken(("resources", "cpu", "available"), "yes"), "resources.cpu: available must be"),
    (_broken(("resources", "cpu", "workloads"), {}), "resources.cpu.workloads must be a list"),
    (
        _broken(("resources", "cpu", "workloads", 0, "utilization"), 2.0),
        r"resources.cpu.workloads\[0\]: workload 'a' utilization must be in \[0, 1\]",
    ),
    (
        _broken(("resources", "cpu", "workloads", 1, "samples"), -5),
        r"resources.cpu.workloads\[1\]: workload 'b' samples must be an integer in \[1, ",
    ),
    (
        _broken(("resources", "cpu", "workloads", 0, "seconds"), delete=True),
        r"resources.cpu.workloads\[0\] is missing key.* seconds",
    ),
    (
        _broken(("resources", "disk", "evaluation"), 99.0),
        r"resources.disk: evaluation must equal .*seed formula 4",
    ),
    (
        _broken(("resources", "gpu", "evaluation"), 5.0),
        "resources.gpu: an unavailable resource has evaluation 0",
    ),
    (
        _broken(("resources", "cpu", "workloads"), [{"name": "x"}] * 65),
        "resources.cpu.workloads must hold at most 64",
    ),
]


@pytest.mark.parametrize(
    ("text", "match"),
    BAD_REPORTS,
    ids=lambda v: v if len(v) < 60 and not v.startswith(("{", "[")) else None,
)
def test_from_json_rejects_bad_reports_naming_the_field(text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        ProfileReport.from_json(text)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_from_json_rejects_non_finite_numbers(token: str) -> None:
    text = report().to_json().replace('"elapsed_seconds": 3.25', f'"elapsed_seconds": {token}')
    assert token in text
    with pytest.raises(InputError, match=f"must not contain {token}"):
        ProfileReport.from_json(text)


def test_from_json_rejects_oversized_text_and_non_text() -> None:
    with pytest.raises(InputError, match="at most 1000000 characters"):
        ProfileReport.from_json(" " * 1_000_001)
    with pytest.raises(InputError, match="must be JSON text, got dict"):
        ProfileReport.from_json({})  # type: ignore[arg-type]


# ---------------------------------------------------------------- the probe interface


class VirtualDevice:
    """A probe for a virtual device, built from plain numbers, as simulations will do."""

    def __init__(self, speed: float) -> None:
        self.speed = speed

    def profile(self, mode: str) -> ProfileReport:
        samples = 1000 if mode == "full" else 100
        resources = {
            r: ResourceReport.from_workloads(
                [
                    WorkloadResult.measured(
                        f"{r}-{i}", samples, samples * (i + 1) / self.speed, 1.0
                    )
                    for i in range(2)
                ]
            )
            for r in ("cpu", "memory", "disk")
        }
        resources["gpu"] = ResourceReport.absent("virtual device without GPU")
        return ProfileReport(host(), resources, mode, 0.0)  # type: ignore[arg-type]


def test_a_virtual_device_satisfies_the_probe_protocol() -> None:
    device = VirtualDevice(speed=200.0)
    assert isinstance(device, ResourceProbe)
    r = device.profile("quick")
    # E = 200 and 100 samples/s, U = 1 -> N = 150 for each present resource
    assert r.evaluations == {"cpu": 150.0, "gpu": 0.0, "memory": 150.0, "disk": 150.0}
    assert check_contract(r.to_dict()) == []


_workload = st.builds(
    WorkloadResult.measured,
    st.text(min_size=1, max_size=20).filter(str.strip),
    st.integers(1, 10**12),
    st.floats(1e-9, 6e5, allow_nan=False, allow_infinity=False),
    st.floats(0.0, 1.0, allow_nan=False),
)
_resource = st.one_of(
    st.lists(_workload, min_size=1, max_size=4, unique_by=lambda w: w.name).map(
        ResourceReport.from_workloads
    ),
    st.text(min_size=1, max_size=40).filter(str.strip).map(ResourceReport.absent),
)


@given(
    st.fixed_dictionaries({r: _resource for r in RESOURCES}),
    st.sampled_from(["quick", "full"]),
    st.floats(0.0, 1e5, allow_nan=False),
    st.one_of(st.none(), st.text(min_size=1, max_size=30).filter(str.strip)),
)
@settings(max_examples=60, deadline=None)
def test_any_valid_report_survives_the_json_round_trip(
    resources: dict[str, ResourceReport], mode: str, elapsed: float, gpu_name: str | None
) -> None:
    facts = HostFacts(8, "cpu", 2**34, gpu_name, (1.0, 0.5, 0.25), "Linux-aarch64")
    original = ProfileReport(facts, resources, mode, elapsed)  # type: ignore[arg-type]
    parsed = ProfileReport.from_json(original.to_json())
    assert parsed == original
    assert parsed.evaluations == original.evaluations
