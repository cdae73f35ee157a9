"""Profile replies are parsed once, through ProfileReport.from_json, and must agree with it."""

from __future__ import annotations

import pytest
from flwr.app import ConfigRecord, Message, RecordDict

from clients.testing import instruction
from flower_edge import wire
from flower_edge.errors import InputError
from flower_edge.profiling import HostFacts, ProfileReport, ResourceReport, WorkloadResult
from strategies.records import parse_profile_reply

NODE = 1001


def _report(cpu_rate: float) -> ProfileReport:
    def res(rate: float) -> ResourceReport:
        work = [WorkloadResult.measured(f"w{n}", n, n / rate, 0.5) for n in (100, 400)]
        return ResourceReport.from_workloads(work)

    host = HostFacts(
        cores=2,
        cpu_model="test",
        memory_bytes=2**30,
        gpu_name=None,
        load_average=(0.0, 0.0, 0.0),
        platform="test",
    )
    resources = {
        "cpu": res(cpu_rate),
        "gpu": ResourceReport.absent("no GPU"),
        "memory": res(50.0),
        "disk": res(5.0),
    }
    return ProfileReport(host, resources, "quick", 1.0)


def _reply(report: ProfileReport, **override: float) -> Message:
    evaluations = {wire.EVAL_KEYS[r]: v for r, v in report.evaluations.items()}
    evaluations.update(override)
    record = ConfigRecord(
        {**evaluations, wire.LOCAL_SAMPLES: 10, wire.PROFILE_REPORT: report.to_json()}
    )
    query = instruction(RecordDict({}), wire.PROFILE_MESSAGE_TYPE, NODE)
    return Message(RecordDict({wire.PROFILE: record}), reply_to=query)


def test_consistent_profile_is_parsed() -> None:
    report = _report(20.0)
    parsed = parse_profile_reply(_reply(report))
    assert parsed.evaluations[0] == pytest.approx(report.evaluations["cpu"])
    assert parsed.evaluations[1] == 0.0
    assert parsed.node_id == NODE


def test_claim_beyond_its_own_report_is_rejected() -> None:
    report = _report(20.0)
    inflated = report.evaluations["cpu"] * 1000
    with pytest.raises(InputError, match="evaluation of 'cpu'.*differs from its own report"):
        parse_profile_reply(_reply(report, **{wire.EVAL_CPU: inflated}))


def test_report_with_nan_is_rejected_naming_the_field() -> None:
    report = _report(20.0)
    bad = report.to_json().replace('"utilization": 0.5', '"utilization": NaN', 1)
    msg = _reply(report)
    msg.content[wire.PROFILE][wire.PROFILE_REPORT] = bad
    with pytest.raises(InputError, match="NaN"):
        parse_profile_reply(msg)


def test_report_with_a_huge_int_is_rejected_not_an_overflow() -> None:
    # float(10**400) raised OverflowError out of the reply parser (not a rejected reply)
    report = _report(20.0)
    bad = report.to_json().replace('"utilization": 0.5', '"utilization": 1' + "0" * 400, 1)
    msg = _reply(report)
    msg.content[wire.PROFILE][wire.PROFILE_REPORT] = bad
    with pytest.raises(InputError, match="utilization must be a finite number in"):
        parse_profile_reply(msg)


def test_report_of_workloads_near_the_largest_float_parses() -> None:
    # seed formula 4 summed the terms before dividing: OverflowError out of the parser
    def res() -> ResourceReport:
        work = [WorkloadResult.measured(f"w{n}", 10**12, 1e-296, 1.0) for n in (1, 2)]
        return ResourceReport.from_workloads(work)

    report = _report(20.0)
    huge = ProfileReport(report.host, {**report.resources, "cpu": res()}, "quick", 1.0)
    parsed = parse_profile_reply(_reply(huge))
    assert parsed.evaluations[0] == pytest.approx(1e308)
