"""Tests of the independent checker of the profile JSON contract (``conftest.check_contract``).

The checker is written from the issue's text, not from ``ProfileReport.from_dict``, so that the
two can disagree: other profiling tests run real reports through it.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from conftest import check_contract, example_doc


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
