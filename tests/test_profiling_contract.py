"""An independent checker of the profile JSON contract of issue 2, and tests of the checker.

The checker is written from the issue's text, not from ``ProfileReport.from_dict``, so that the
two can disagree: other profiling tests run real reports through it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any, cast

import pytest

RESOURCE_KEYS = ("cpu", "gpu", "memory", "disk")


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _float(v: object) -> bool:
    return isinstance(v, float) and math.isfinite(v)


def _number(v: object) -> bool:
    return (_int(v) or isinstance(v, float)) and math.isfinite(cast(float, v))


HOST_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "cores": (lambda v: _int(v) and v >= 1, "an int >= 1"),
    "cpu_model": (lambda v: isinstance(v, str), "a string"),
    "memory_bytes": (lambda v: _int(v) and v >= 0, "an int >= 0"),
    "gpu_name": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "load_average": (
        lambda v: isinstance(v, list) and len(v) == 3 and all(_number(x) and x >= 0 for x in v),
        "3 numbers >= 0",
    ),
    "platform": (lambda v: isinstance(v, str), "a string"),
}
WORKLOAD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "name": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "samples": (lambda v: _int(v) and v >= 1, "an int >= 1"),
    "seconds": (lambda v: _float(v) and v > 0, "a float > 0"),
    "utilization": (lambda v: _float(v) and 0.0 <= v <= 1.0, "a float in [0, 1]"),
    "intensity": (lambda v: _float(v) and v >= 0, "a float >= 0"),
}
RESOURCE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "available": (lambda v: isinstance(v, bool), "a bool"),
    "evaluation": (lambda v: _float(v) and v >= 0, "a float >= 0"),
    "workloads": (lambda v: isinstance(v, list), "a list"),
    "reason": (lambda v: v is None or isinstance(v, str), "a string or null"),
}


def _rules(where: str, obj: Any, rules: dict[str, tuple[Callable[[Any], bool], str]]) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where} is not an object"]
    bad = [f"{where} keys {sorted(obj)} != {sorted(rules)}"] if set(obj) != set(rules) else []
    for key, (ok, what) in rules.items():
        if key in obj and not ok(obj[key]):
            bad.append(f"{where}.{key} is not {what}")
    return bad


def check_contract(doc: Any) -> list[str]:
    """Return every way ``doc`` breaks the contract (empty when it conforms)."""
    top: dict[str, tuple[Callable[[Any], bool], str]] = {
        "host": (lambda v: isinstance(v, dict), "an object"),
        "resources": (lambda v: isinstance(v, dict) and set(v) == set(RESOURCE_KEYS), "cgmd"),
        "mode": (lambda v: v in ("quick", "full"), "quick or full"),
        "elapsed_seconds": (lambda v: _float(v) and v >= 0, "a float >= 0"),
    }
    bad = _rules("report", doc, top)
    if bad:
        return bad
    bad += _rules("host", doc["host"], HOST_RULES)
    for name in RESOURCE_KEYS:
        bad += _check_resource(f"resources.{name}", doc["resources"][name])
    return bad


def _check_resource(where: str, res: Any) -> list[str]:
    bad = _rules(where, res, RESOURCE_RULES)
    if bad:
        return bad
    workloads = res["workloads"]
    for i, w in enumerate(workloads):
        bad += _rules(f"{where}.workloads[{i}]", w, WORKLOAD_RULES)
    if bad:
        return bad
    for i, w in enumerate(workloads):
        if not math.isclose(w["intensity"], w["samples"] / w["seconds"], rel_tol=1e-9):
            bad.append(f"{where}.workloads[{i}].intensity != samples / seconds")
    if not res["available"]:
        if res["evaluation"] != 0.0 or workloads or not res["reason"]:
            bad.append(f"{where} unavailable but evaluation != 0, workloads or no reason")
        return bad
    if len(workloads) < 2:
        bad.append(f"{where} available with fewer than 2 workloads")
    elif not bad:
        mean = math.fsum(w["utilization"] * w["intensity"] for w in workloads) / len(workloads)
        if not math.isclose(res["evaluation"], mean, rel_tol=1e-9):
            bad.append(f"{where}.evaluation != mean(utilization * intensity)")
    return bad


def example_doc() -> dict[str, Any]:
    """A conforming document, built by hand."""
    cpu = [
        {"name": "a", "samples": 100, "seconds": 2.0, "utilization": 0.5, "intensity": 50.0},
        {"name": "b", "samples": 30, "seconds": 0.5, "utilization": 1.0, "intensity": 60.0},
    ]
    return {
        "host": {
            "cores": 2,
            "cpu_model": "x",
            "memory_bytes": 1024,
            "gpu_name": None,
            "load_average": [0.5, 0.25, 0.0],
            "platform": "Linux-x86_64",
        },
        "resources": {
            "cpu": {"available": True, "evaluation": 42.5, "workloads": cpu, "reason": None},
            "gpu": {"available": False, "evaluation": 0.0, "workloads": [], "reason": "none"},
            "memory": {"available": True, "evaluation": 42.5, "workloads": cpu, "reason": None},
            "disk": {"available": True, "evaluation": 42.5, "workloads": cpu, "reason": None},
        },
        "mode": "quick",
        "elapsed_seconds": 1.5,
    }


def test_checker_accepts_the_hand_built_document() -> None:
    assert check_contract(example_doc()) == []


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        (("mode",), "slow", "mode"),
        (("elapsed_seconds",), 3, "elapsed_seconds"),
        (("elapsed_seconds",), math.nan, "elapsed_seconds"),
        (("host", "cores"), True, "host.cores"),
        (("host", "gpu_name"), 7, "host.gpu_name"),
        (("resources", "disk", "workloads"), {}, "workloads is not a list"),
        (("host", "load_average"), [1.0, 2.0], "load_average"),
        (("resources", "cpu", "evaluation"), 42.0, "evaluation != mean"),
        (("resources", "gpu", "evaluation"), 1.0, "unavailable"),
        (("resources", "gpu", "reason"), None, "unavailable"),
        (("resources", "memory", "available"), "yes", "available"),
    ],
)
def test_checker_rejects_each_broken_field(
    path: tuple[str, ...], value: Any, complaint: str
) -> None:
    doc = copy.deepcopy(example_doc())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert any(complaint in m for m in check_contract(doc)), check_contract(doc)


def test_checker_rejects_a_workload_with_wrong_intensity() -> None:
    doc = copy.deepcopy(example_doc())
    doc["resources"]["disk"]["workloads"] = [
        {"name": "a", "samples": 100, "seconds": 2.0, "utilization": 0.5, "intensity": 51.0},
        {"name": "b", "samples": 30, "seconds": 0.5, "utilization": 1.0, "intensity": 60.0},
    ]
    assert any("intensity != samples / seconds" in m for m in check_contract(doc))


def test_checker_rejects_missing_and_extra_keys() -> None:
    doc = copy.deepcopy(example_doc())
    del doc["host"]["cpu_model"]
    doc["resources"]["cpu"]["workloads"][0]["extra"] = 1
    complaints = check_contract(doc)
    assert any(m.startswith("host keys") for m in complaints)
    assert any("workloads[0] keys" in m for m in complaints)
