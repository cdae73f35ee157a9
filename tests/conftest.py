"""Shared fakes and checkers of the test suite (pytest loads this module first).

Test modules import what they share from here (``from conftest import ToyEdge``), never from
another test module.

Toy clients (numpy only, exact and fast)
    :class:`ToyEdge` speaks the edge protocol of ``flower_edge.wire``: it answers the profile
    query, keeps its job in ``context.state``, trains in slices of ``SLICE_BUDGET`` virtual
    seconds, reports progress and ``VIRTUAL_SECONDS``, and abandons a stale job when told of a
    newer global (if ``abandon``). "Training" moves the model a fixed fraction towards a
    per-node target, so every result can be computed by hand. :func:`make_dropin_app` is an
    unmodified Flower ClientApp (train only, arrays + num-examples). :func:`run_edge` runs
    ``EdgeStrategy`` (K = 2) over four toy nodes on a virtual clock; :data:`DUR` holds their
    virtual job durations.
Flower's log
    :func:`flwr_logs` collects the ``flwr`` logger's records directly (the capture of
    ``fault_clients.py``, the logger lowered to INFO).
Profiling
    :data:`TINY` is a small profiling plan whose runs still span several CPU-time ticks.
    :func:`check_contract` is an independent checker of the profile JSON contract of issue 2,
    written from the issue's text, not from ``ProfileReport.from_dict``, so that the two can
    disagree; :func:`example_doc` is a conforming document built by hand.

The fault tests' numpy clients and scripted clock are in ``fault_clients.py`` (the soak
benchmark uses them too), the real-deployment harness in ``deploy_harness.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np
import pytest
from fault_clients import LogCapture, capture_flwr_logs
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Result

from flower_edge import wire
from flower_edge.profiling import ProfilePlan
from strategies import EdgeStrategy, InProcessGrid, ManualClock, ShareConfig, VirtualClock

# ---------------------------------------------------------------- the command line

#: two nodes of a ``plan --profiles`` file
PLAN_NODES = {
    "nodes": [
        {"id": "pi4", "resources": {"cpu": 10, "gpu": 0, "memory": 40, "disk": 5}},
        {"id": "jetson", "resources": {"cpu": 20, "gpu": 80, "memory": 60, "disk": 10}},
    ]
}


# Flower's Message() reads the process's task identity; a test that builds messages before any
# InProcessGrid has set it (running alone, e.g. with -k) would fail with "run_id is not set"
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

if TaskIdentity._run_id is None:
    from strategies.inprocess import _set_task_identity  # noqa: E402

    _set_task_identity(1)


@pytest.fixture
def profiles(tmp_path: Path) -> str:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(PLAN_NODES), encoding="utf-8")
    return str(path)


def plan_argv(profiles: str, *extra: str) -> list[str]:
    """Return a valid ``plan`` command line on ``profiles``, then ``extra``."""
    return ["plan", "--profiles", profiles, "--total-samples", "100", "--compute-share", "0.5"] + [
        *extra
    ]


def fails(argv: Sequence[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    """Run the CLI on ``argv``: exit code 2, one error line on stderr that holds every needle."""
    from flower_edge.cli import main

    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in errors[0], err
    return errors[0]


# ---------------------------------------------------------------- toy clients

KEYS = ("w", "steps")


def asks_profile(msg: Message) -> bool:
    """Return whether ``msg`` asks for the node's profile (query, or first train message)."""
    if msg.metadata.message_type == wire.PROFILE_MESSAGE_TYPE:
        return True
    return wire.PROFILE_MODE in msg.content.config_records.get(wire.CONFIG, {})


def model(w: float | list[float] = 0.0, steps: int = 0) -> ArrayRecord:
    vec = np.asarray(w if isinstance(w, list) else [w, w, w], dtype=np.float32)
    return ArrayRecord({"w": Array(vec), "steps": Array(np.array([steps], dtype=np.int64))})


def as_numpy(record: ArrayRecord) -> list[np.ndarray]:
    return [record[k].numpy() for k in KEYS]


def target(partition: int) -> np.ndarray:
    return np.full(3, float(partition + 1), dtype=np.float32)


@dataclass
class ToyEdge:
    """An edge-protocol client with exact virtual durations: ``samples / speed + overhead``."""

    speeds: list[float] = field(default_factory=lambda: [10.0, 20.0, 40.0, 80.0])
    overhead: float = 0.5
    abandon: bool = True
    local_samples: int = 100
    lr: float = 0.5
    evaluations: Callable[[int], tuple[float, float, float, float]] | None = None
    with_job: bool = False  # train the first job too when asked (wire.PROFILE_WITH_JOB)
    returned: dict[tuple[int, int], list[np.ndarray]] = field(default_factory=dict)
    replies: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, msg: Message, ctx: Context) -> Message:
        pid = int(ctx.node_config[wire.PARTITION_ID])
        if asks_profile(msg):
            cfg = msg.content.config_records.get(wire.CONFIG, {})
            if self.with_job and cfg.get(wire.PROFILE_WITH_JOB):
                reply = self.train(msg, ctx, pid)
                reply.content[wire.PROFILE] = self.profile_record(pid)
                return reply
            return self.profile(msg, pid)
        return self.train(msg, ctx, pid)

    def profile(self, msg: Message, pid: int) -> Message:
        return Message(RecordDict({wire.PROFILE: self.profile_record(pid)}), reply_to=msg)

    def profile_record(self, pid: int) -> ConfigRecord:
        ev = self.evaluations(pid) if self.evaluations else (1.0 + pid, 0.0, 1.0, 1.0)
        return ConfigRecord(
            {
                wire.EVAL_CPU: ev[0],
                wire.EVAL_GPU: ev[1],
                wire.EVAL_MEMORY: ev[2],
                wire.EVAL_DISK: ev[3],
                wire.LOCAL_SAMPLES: self.local_samples,
            }
        )

    def train(self, msg: Message, ctx: Context, pid: int) -> Message:
        cfg = msg.content.config_records[wire.CONFIG]
        job = int(cfg[wire.JOB_ID])  # type: ignore[arg-type]
        version = int(cfg[wire.GLOBAL_VERSION])  # type: ignore[arg-type]
        budget = float(cfg[wire.SLICE_BUDGET])  # type: ignore[arg-type]
        arrays = msg.content.array_records.get(wire.ARRAYS)
        state = ctx.state.config_records.get("toy")
        abandoned = 0
        if state is None or int(state["job"]) != job:  # type: ignore[call-overload]
            assert arrays is not None, "a new job must carry the global model"
            w, base, pos = as_numpy(arrays), version, 0
            share = int(cfg.get(wire.SAMPLE_SHARE, self.local_samples))  # type: ignore[call-overload]
        else:
            w = as_numpy(ctx.state.array_records["toy-w"])
            base, pos = int(state["base"]), int(state["pos"])  # type: ignore[call-overload]
            share = int(state["share"])  # type: ignore[call-overload]
            if arrays is not None and version > base and self.abandon:
                w, base, pos, abandoned = as_numpy(arrays), version, 0, 1
        speed = self.speeds[pid % len(self.speeds)]
        todo = share - pos
        n = todo if budget <= 0 else min(todo, max(1, int(speed * budget)))
        new_w = (w[0] + self.lr * (target(pid) - w[0]) * (n / share)).astype(np.float32)
        new = [new_w, w[1] + n]
        pos += n
        done = pos >= share
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: pos,
                wire.DONE: int(done),
                wire.JOB_ID: job,
                wire.BASE_VERSION: base,
                wire.SAMPLES_PROCESSED: pos,
                wire.ABANDONED: abandoned,
                wire.VIRTUAL_SECONDS: n / speed + self.overhead,
                wire.TRAIN_LOSS: float(np.abs(target(pid) - new_w).mean()),
            }
        )
        self.replies.append(
            {"node": ctx.node_id, "job": job, "done": done, "base": base, "abandoned": abandoned}
        )
        content = RecordDict({wire.METRICS: metrics})
        if done:
            content[wire.ARRAYS] = ArrayRecord(dict(zip(KEYS, map(Array, new), strict=True)))
            self.returned[(ctx.node_id, job)] = new
            ctx.state.config_records.pop("toy", None)
        else:
            ctx.state["toy"] = ConfigRecord({"job": job, "base": base, "pos": pos, "share": share})
            ctx.state["toy-w"] = ArrayRecord(dict(zip(KEYS, map(Array, new), strict=True)))
        return Message(content, reply_to=msg)


def make_dropin_app(step: float = 0.1) -> ClientApp:
    """An unmodified Flower ClientApp: train only, replies arrays + num-examples."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, ctx: Context) -> Message:
        arrays = msg.content["arrays"]
        assert isinstance(arrays, ArrayRecord)
        pid = int(ctx.node_config["partition-id"])
        new = {
            k: Array(v.numpy() + (step * (pid + 1) if k == "w" else 1)) for k, v in arrays.items()
        }
        reply = RecordDict(
            {"arrays": ArrayRecord(new), "metrics": MetricRecord({"num-examples": 10 * (pid + 1)})}
        )
        return Message(reply, reply_to=msg)

    return app


def accuracy_fn(goal: float = 2.0) -> Callable[[int, ArrayRecord], MetricRecord]:
    """An evaluate_fn: accuracy = 1 / (1 + |mean(w) - goal|)."""

    def evaluate(_: int, arrays: ArrayRecord) -> MetricRecord:
        w = arrays["w"].numpy().astype(np.float64)
        err = float(abs(w.mean() - goal))
        return MetricRecord({"accuracy": 1.0 / (1.0 + err), "loss": err})

    return evaluate


# ---------------------------------------------------------------- the edge strategy on toys

# ToyEdge speeds 10, 20, 40, 80 samples/s, 0.5 s overhead, 100 samples each:
# virtual durations 10.5, 5.5, 3.0, 1.75 s for nodes 1001..1004.
DUR = {1001: 10.5, 1002: 5.5, 1003: 3.0, 1004: 1.75}
EQUAL = ShareConfig(profile=False, total_samples=400, rebalance="off")


def virtual() -> VirtualClock:
    return VirtualClock(wall=ManualClock())


def run_edge(toy: ToyEdge, rounds: int = 2, **options):  # type: ignore[no-untyped-def]
    grid = InProcessGrid(toy, 4)
    options.setdefault("shares", EQUAL)
    strategy = EdgeStrategy(threshold=2, clock=virtual(), **options)
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return strategy, result, grid


# ---------------------------------------------------------------- Flower's log


def flwr_logs(level: int = logging.INFO) -> contextlib.AbstractContextManager[LogCapture]:
    """Capture the ``flwr`` logger's records, the logger lowered to ``level`` meanwhile."""
    return capture_flwr_logs(level)


# ---------------------------------------------------------------- profiling

# small, but each timed run spans several of psutil's 10 ms CPU-time ticks: a run shorter than
# one tick reads no utilisation at all (0.0), which made the contract test flaky
TINY = ProfilePlan(
    cpu_samples=(256, 128),
    memory_samples=(256, 128),
    memory_buffer_bytes=1 << 20,
    disk_samples=(64, 256),
    repeats=1,
    run_budget=1.0,
    disk_shard_samples=(4, 16),
    sample_interval=0.01,
    max_growth=1.0,
    gpu_batches=(8, 4),
    gpu_max_batches=(64, 16),
    gpu_run_budget=0.05,
    gpu_sizing_budget=0.05,
)


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


def rated_report(
    cpu: float,
    *,
    memory: float = 100.0,
    disk: float = 100.0,
    mode: str = "quick",
    cores: int = 1,
    elapsed: float = 1.0,
    reason: str = "test device",
) -> Any:
    """Return a valid ProfileReport rating cpu, memory and disk at these rates, with no GPU."""
    from flower_edge.profiling.report import (
        HostFacts,
        ProfileReport,
        ResourceReport,
        WorkloadResult,
    )

    def rated(name: str, rate: float) -> ResourceReport:
        work = WorkloadResult.measured(f"{name}-256", 256, 256 / rate, 1.0)
        return ResourceReport.from_workloads([work], reason=reason)

    resources = {
        "cpu": rated("cpu", cpu),
        "gpu": ResourceReport.absent("no gpu"),
        "memory": rated("memory", memory),
        "disk": rated("disk", disk),
    }
    host = HostFacts(
        cores=cores,
        cpu_model="test",
        memory_bytes=2**30,
        gpu_name=None,
        load_average=(0.0, 0.0, 0.0),
        platform="test",
    )
    return ProfileReport(host, resources, mode, elapsed)  # type: ignore[arg-type]


class Probe:
    """A virtual probe whose CPU rating is the device speed (a valid ProfileReport)."""

    def __init__(self, cpu: float) -> None:
        self.cpu = cpu

    def profile(self, mode: str) -> Any:
        return rated_report(self.cpu)


def load_benchmark(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` (a script, not a package) as a module."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the fields of ``flower-edge analyze --json`` (``ModelProfile.to_dict``)
ANALYZE_FIELDS = frozenset(
    {"operators", "mean_intensity", "compute_share", "memory_share", "share", "includes_backward"}
)


# ------------------------------------------------ evaluate_fn recorders (last-call checks)
def fingerprint(arrays: ArrayRecord) -> float:
    """Return a number that tells models apart (48 bits of a hash: an exact float)."""
    digest = hashlib.sha256()
    for key in arrays:
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key].numpy()).tobytes())
    return float(int.from_bytes(digest.digest()[:6], "big"))


class Recorder:
    """An ``evaluate_fn`` that records the round and the model of every call.

    ``none_at_start``: return ``None`` for round 0, as an ``evaluate_fn`` that only saves
    models may (the strategy cannot know that round 1 returns the metric).
    """

    def __init__(self, goal: float, *, none_at_start: bool = False) -> None:
        self.goal = goal
        self.none_at_start = none_at_start
        self.calls: list[tuple[int, float]] = []

    def __call__(self, rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        fp = fingerprint(arrays)
        self.calls.append((rnd, fp))
        if rnd == 0 and self.none_at_start:
            return None
        err = abs(float(arrays["w"].numpy().astype(np.float64).mean()) - self.goal)
        return MetricRecord({"accuracy": 1.0 / (1.0 + err), "fp": fp})

    def per_round(self) -> dict[int, list[float]]:
        out: dict[int, list[float]] = {}
        for rnd, fp in self.calls:
            out.setdefault(rnd, []).append(fp)
        return out


def check_last_calls(recorder: Recorder, result: Result, rounds: int) -> dict[int, int]:
    """Assert that each round's last call scored the served model; return the call counts."""
    per_round = recorder.per_round()
    assert sorted(per_round) == list(range(rounds + 1))
    assert [rnd for rnd, _ in recorder.calls] == sorted(rnd for rnd, _ in recorder.calls)
    for rnd in range(1, rounds + 1):
        served = result.evaluate_metrics_serverapp[rnd]["fp"]
        assert per_round[rnd][-1] == served, f"round {rnd}: the last call is not the served model"
    assert recorder.calls[-1][1] == fingerprint(result.arrays)
    return {rnd: len(fps) for rnd, fps in per_round.items()}


def edge_preset_on_toy(valuation: Any, **overrides: Any) -> tuple[EdgeStrategy, InProcessGrid]:
    """The ``edge`` preset (K = 1, no stop, the preset's shares) on 4 toy nodes of speeds 10-80.

    ``valuation``: its ValuationConfig; ``overrides``: preset options to change.
    """
    from dataclasses import replace

    from strategies import StopConfig
    from strategies.edge import PRESET_SHARES, PRESETS

    shares = ShareConfig(profile=False, total_samples=400, rebalance="off")
    strategy = EdgeStrategy(
        threshold=1,
        **{**PRESETS["edge"], **overrides},
        clock=virtual(),
        shares=replace(shares, **PRESET_SHARES["edge"]),
        stop=StopConfig(),
        valuation=valuation,
    )
    return strategy, InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
