"""The ClientApp's message handling: profile, decision at preemption points, errors, state."""

import json
import logging
import re
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from torch.utils.data import TensorDataset

from clients.app import ERROR_CODE, build_client_app
from clients.state import GLOBAL_KEY, JOB_KEY, NODE_KEY, PROFILE_KEY_PREFIX
from clients.task import Task
from clients.testing import instruction, node_context
from flower_edge import wire
from flower_edge.models import MLP

NODE = 2**63 + 5  # Flower node ids are uint64; nothing may assume small ids


def _data() -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(60, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return TensorDataset(x[:48], y[:48]), TensorDataset(x[48:], y[48:])


TRAIN, TEST = _data()


def _model() -> MLP:
    return MLP(in_features=8, hidden=16, num_classes=4)


TASK = Task(model_fn=_model, load_data=lambda ctx: (TRAIN, TEST), batch_size=16)


def _global(seed: int = 0) -> ArrayRecord:
    torch.manual_seed(seed)
    return ArrayRecord(_model().state_dict())


def _msg(cfg: dict[str, Any] | None, arrays: ArrayRecord | None, kind: str = "train") -> Message:
    content = RecordDict()
    if cfg is not None:
        content[wire.CONFIG] = ConfigRecord(cfg)
    if arrays is not None:
        content[wire.ARRAYS] = arrays
    return instruction(content, kind, NODE)


def _ok(reply: Message) -> dict:
    assert not reply.has_error(), reply.error
    return dict(reply.content[wire.METRICS])


def _job(job: int, version: int, **extra: Any) -> dict[str, Any]:
    return {wire.JOB_ID: job, wire.GLOBAL_VERSION: version, **extra}


# ---------------------------------------------------------------- profile query


class FakeReport:
    def __init__(self, evaluations: dict[str, float]) -> None:
        self.evaluations = evaluations

    def to_json(self) -> str:
        return json.dumps({"evaluations": self.evaluations})


class FakeProbe:
    def __init__(self, evaluations: dict[str, float]) -> None:
        self.evaluations = evaluations
        self.modes: list[str] = []

    def profile(self, mode: str) -> FakeReport:
        self.modes.append(mode)
        return FakeReport(self.evaluations)


def _profile_msg(mode: str | None = None) -> Message:
    cfg = {} if mode is None else {wire.PROFILE_MODE: mode}
    return instruction(
        RecordDict({wire.CONFIG: ConfigRecord(cfg)}), wire.PROFILE_MESSAGE_TYPE, NODE
    )


def test_profile_query_replies_with_the_report_and_caches_it() -> None:
    probe = FakeProbe({"cpu": 3.5, "gpu": 0.0, "memory": 12.0, "disk": 0.25})
    app = build_client_app(TASK, probe_fn=lambda ctx: probe)
    ctx = node_context(NODE)
    first = app(_profile_msg(), ctx)
    rec = first.content[wire.PROFILE]
    assert (rec[wire.EVAL_CPU], rec[wire.EVAL_GPU], rec[wire.EVAL_MEMORY], rec[wire.EVAL_DISK]) == (
        3.5,
        0.0,
        12.0,
        0.25,
    )
    assert rec[wire.LOCAL_SAMPLES] == 48
    assert json.loads(rec[wire.PROFILE_REPORT])["evaluations"]["memory"] == 12.0
    second = app(_profile_msg("quick"), ctx)
    assert dict(second.content[wire.PROFILE]) == dict(rec)
    assert probe.modes == ["quick"]  # ran once per node
    app(_profile_msg("full"), ctx)
    assert probe.modes == ["quick", "full"]
    assert PROFILE_KEY_PREFIX + "full" in ctx.state


def test_profile_query_errors() -> None:
    app = build_client_app(TASK, probe_fn=lambda ctx: FakeProbe({"cpu": -1.0}))
    reply = app(_profile_msg("slow"), node_context(NODE))
    assert reply.error.code == ERROR_CODE
    assert "'profile-mode' must be one of quick, full, got 'slow'" in str(reply.error.reason)
    reply = app(_profile_msg(), node_context(NODE))
    assert "ProfilingError: evaluation of cpu must be >= 0, got -1.0" in str(reply.error.reason)


class BrokenProbe:
    def profile(self, mode: str) -> FakeReport:
        raise ValueError("sensor read failed")


def _flwr_log(caplog: pytest.LogCaptureFixture) -> logging.Handler:
    handler = caplog.handler
    logging.getLogger("flwr").addHandler(handler)
    return handler


@pytest.mark.parametrize(
    ("probe_fn", "node_config", "logged"),
    [
        (lambda ctx: BrokenProbe(), {}, "profiling failed (ValueError: sensor read failed)"),
        (None, {wire.PROFILE_CACHE: 5}, "ConfigError: node config 'profile-cache' must be"),
    ],
)
def test_a_failing_benchmark_beside_the_first_job_leaves_the_job_running(
    probe_fn: Any, node_config: dict, logged: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by a new-user probe: a probe raising ValueError aborted the first job, and a bad
    node-config ``profile-cache`` got an error reply and no job, though docs/client.md says the
    job still runs and the reply carries no profile."""
    app = build_client_app(TASK, probe_fn=probe_fn)
    ctx = node_context(NODE)
    ctx.node_config.update(node_config)
    cfg = _job(1, 0, **{wire.PROFILE_MODE: "quick", wire.PROFILE_WITH_JOB: True})
    handler = _flwr_log(caplog)
    try:
        reply = app(_msg(cfg | {wire.SAMPLE_SHARE: 32}, _global()), ctx)
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    m = _ok(reply)
    assert m[wire.SAMPLES_PROCESSED] == 32
    assert m[wire.DONE] == 1
    assert wire.PROFILE not in reply.content.config_records
    assert logged in caplog.text


def test_a_bad_profile_mode_beside_a_job_is_still_an_error_reply() -> None:
    cfg = _job(1, 0, **{wire.PROFILE_MODE: "slow", wire.PROFILE_WITH_JOB: True})
    reply = build_client_app(TASK)(_msg(cfg, _global()), node_context(NODE))
    assert "'profile-mode' must be one of quick, full, got 'slow'" in reply.error.reason


# ---------------------------------------------------------------- evaluate


def test_evaluate_reports_loss_and_accuracy_on_local_test_data() -> None:
    g = _global()
    reply = build_client_app(TASK)(_msg({}, g, "evaluate"), node_context(NODE))
    m = _ok(reply)
    model = _model()
    model.load_state_dict(g.to_torch_state_dict())
    with torch.no_grad():
        logits = model(TEST.tensors[0])
    expected_acc = float((logits.argmax(1) == TEST.tensors[1]).float().mean())
    expected_loss = float(torch.nn.functional.cross_entropy(logits, TEST.tensors[1]))
    assert m[wire.NUM_EXAMPLES] == 12
    assert m[wire.EVAL_ACCURACY] == pytest.approx(expected_acc)
    assert m[wire.EVAL_LOSS] == pytest.approx(expected_loss, rel=1e-6)


def test_evaluate_without_arrays_uses_the_held_global_or_refuses() -> None:
    app = build_client_app(TASK)
    ctx = node_context(NODE)
    reply = app(_msg({}, None, "evaluate"), ctx)
    assert "carries no 'arrays' and the node holds no global model" in str(reply.error.reason)
    _ok(app(_msg(_job(1, 0, **{wire.SAMPLE_SHARE: 0}), _global()), ctx))
    assert _ok(app(_msg({}, None, "evaluate"), ctx))[wire.NUM_EXAMPLES] == 12


# ---------------------------------------------------------------- the abandon decision


def _preempt(
    alpha: float,
    theta: float,
    match_ratio: float,
    values: tuple[list[int], list[float]] | None,
    availability: float = 1.0,
    server: dict[str, float] | None = None,
) -> tuple[dict, Message]:
    """Start a 96-sample job (one batch per slice), then announce global v1 mid-job."""
    app = build_client_app(TASK, availability_fn=lambda: availability)
    ctx = node_context(NODE, run_config={"alpha": alpha, "theta": theta})
    start = _job(3, 0, **{wire.SAMPLE_SHARE: 96, wire.SLICE_BUDGET: 1e-9})
    assert _ok(app(_msg(start, _global(0)), ctx))[wire.SAMPLES_PROCESSED] == 16
    cfg = _job(3, 1, **{wire.SLICE_BUDGET: 1e-9, wire.MATCH_RATIO: match_ratio}, **(server or {}))
    if values is not None:
        cfg |= {wire.VALUE_NODE_IDS: values[0], wire.VALUES: values[1], wire.VALUES_ROUND: 1}
    reply = app(_msg(cfg, _global(1)), ctx)
    return _ok(reply), reply


def test_high_score_abandons_and_restarts_from_the_new_global() -> None:
    # R = sqrt(0.9) * 1.0 = 0.949, V = 0.5 (took part): score = 0.724 >= 0.6
    m, _ = _preempt(0.5, 0.6, 0.9, ([NODE, 11], [0.5, 0.5]))
    assert (m[wire.ABANDONED], m[wire.ABANDONED_JOBS]) == (1, 1)
    assert m[wire.BASE_VERSION] == 1
    assert m[wire.SAMPLES_PROCESSED] == 16  # restarted: one batch of the new job


def test_low_score_continues_the_stale_job() -> None:
    # R = sqrt(0.9) * 0.5 = 0.474, V = 0.1: score = 0.5*0.474 + 0.5*0.1 = 0.287 < 0.6
    m, _ = _preempt(0.5, 0.6, 0.9, ([NODE], [0.1]), availability=0.5)
    assert (m[wire.ABANDONED], m[wire.ABANDONED_JOBS]) == (0, 0)
    assert m[wire.BASE_VERSION] == 0
    assert m[wire.SAMPLES_PROCESSED] == 32


@pytest.mark.parametrize(("availability", "abandoned"), [(1.0, 1), (0.5, 0), (0.46 / 0.9, 1)])
def test_availability_scales_the_resource_of_the_decision(
    availability: float, abandoned: int
) -> None:
    # alpha = 1: score = R = sqrt(0.81) * availability = 0.9 * availability; theta 0.46 (a
    # tie abandons)
    m, _ = _preempt(1.0, 0.46, 0.81, None, availability=availability)
    assert m[wire.ABANDONED] == abandoned


def test_first_round_decision_uses_the_neutral_value() -> None:
    # no results yet: V = 0.5 (neutral); alpha = 0.5, R = 0.64: score 0.57 -> continue at 0.6
    m, _ = _preempt(0.5, 0.6, 0.64**2, None)
    assert m[wire.ABANDONED] == 0
    # ... abandon at theta 0.57 (tie)
    m, _ = _preempt(0.5, 0.57, 0.64**2, None)
    assert m[wire.ABANDONED] == 1
    # a node never valued, results without it: V = their mean 0.25; score 0.445
    m, _ = _preempt(0.5, 0.45, 0.64**2, ([1, 2], [0.1, 0.4]))
    assert m[wire.ABANDONED] == 0
    m, _ = _preempt(0.5, 0.445, 0.64**2, ([1, 2], [0.1, 0.4]))
    assert m[wire.ABANDONED] == 1


@pytest.mark.parametrize(("server_theta", "abandoned"), [(0.72, 1), (0.73, 0)])
def test_the_servers_theta_overrides_the_run_config(server_theta: float, abandoned: int) -> None:
    # run config theta 0 would always abandon; the server's threshold decides: score 0.724
    m, _ = _preempt(0.5, 0.0, 0.9, ([NODE, 11], [0.5, 0.5]), server={wire.THETA: server_theta})
    assert m[wire.ABANDONED] == abandoned


@pytest.mark.parametrize(("resource", "abandoned"), [(0.4, 1), (0.39, 0)])
def test_the_servers_resource_replaces_the_match_ratio(resource: float, abandoned: int) -> None:
    # alpha = 1: score = R = the server's resource (not sqrt(0.01) = 0.1), theta 0.4
    m, _ = _preempt(1.0, 0.4, 0.01, None, server={wire.RESOURCE: resource})
    assert m[wire.ABANDONED] == abandoned


def test_node_that_missed_the_aggregation_uses_its_last_known_value() -> None:
    app = build_client_app(TASK, availability_fn=lambda: 1.0)
    ctx = node_context(NODE, run_config={"alpha": 0.0, "theta": 0.5})
    # job 1 finishes while the node is valued 0.8 in round 1
    first = _job(1, 0, **{wire.SAMPLE_SHARE: 16, wire.VALUE_NODE_IDS: [NODE], wire.VALUES: [0.8]})
    _ok(app(_msg(first, _global(0)), ctx))
    # job 2 starts; v2 arrives with results of round 2 that do not include this node
    _ok(app(_msg(_job(2, 1, **{wire.SAMPLE_SHARE: 64, wire.SLICE_BUDGET: 1e-9}), _global(1)), ctx))
    cfg = _job(2, 2, **{wire.SLICE_BUDGET: 1e-9, wire.VALUE_NODE_IDS: [9], wire.VALUES: [1.0]})
    m = _ok(app(_msg(cfg, _global(2)), ctx))
    assert m[wire.ABANDONED] == 1  # alpha = 0: score = V = 0.8 (last known) >= 0.5


def test_no_decision_without_a_newer_global() -> None:
    app = build_client_app(TASK, availability_fn=lambda: 1.0)
    ctx = node_context(NODE, run_config={"alpha": 1.0, "theta": 0.0})  # would always abandon
    cfg = _job(5, 4, **{wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9})
    _ok(app(_msg(cfg, _global()), ctx))
    m = _ok(app(_msg(cfg, None), ctx))
    assert (m[wire.ABANDONED], m[wire.SAMPLES_PROCESSED]) == (0, 32)


# ---------------------------------------------------------------- bad input


def _wrong_shape() -> ArrayRecord:
    g = _global()
    bad = ArrayRecord({k: v for k, v in g.items()})
    first = next(iter(bad))
    bad[first] = Array(np.zeros((3, 3), dtype=np.float32))
    return bad


BAD_TRAIN = [
    (_job(1, 5), "no-arrays", "no global model of version 5 \\(it holds 0\\)"),
    ({}, "no-arrays", r"train message carries no 'arrays'"),
    (_job(1, 0), "wrong-shape", r"global arrays do not fit the local model: 'net.1.weight' has"),
    (_job(1, 0), "wrong-keys", r"do not fit the local model: missing \['net.1.bias'"),
    (_job(1, 0, **{wire.SAMPLE_SHARE: -1}), "ok", "'sample-share' must be an integer >= 0, got -1"),
    (_job(1, 0, **{wire.SAMPLE_SHARE: "ten"}), "ok", "'sample-share' must be an int"),
    (_job(1, 0, **{wire.SLICE_BUDGET: -2.0}), "ok", "'slice-budget' must be >= 0"),
    ({wire.JOB_ID: 1}, "ok", "'global-version' is required with 'job-id'"),
    (
        _job(1, 0, **{wire.VALUE_NODE_IDS: [1, 2], wire.VALUES: [0.5]}),
        "ok",
        "'value-node-ids' and 'values' must have the same length, got 2 and 1",
    ),
    (_job(1, 0, **{wire.VALUES: [1.5], wire.VALUE_NODE_IDS: [1]}), "ok", r"in \[0, 1\], got 1.5"),
]


@pytest.mark.parametrize(("cfg", "arrays", "match"), BAD_TRAIN)
def test_bad_train_message_gets_an_error_reply_and_the_node_stays_usable(
    cfg: dict, arrays: str, match: str
) -> None:
    app = build_client_app(TASK)
    ctx = node_context(NODE)
    # a job in progress that the bad message must not disturb
    _ok(app(_msg(_job(7, 0, **{wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9}), _global()), ctx))
    before = {k: v.object_id for k, v in ctx.state.items()}
    record = {
        "ok": _global(),
        "no-arrays": None,
        "wrong-shape": _wrong_shape(),
        "wrong-keys": ArrayRecord({"net.1.weight": Array(np.zeros((16, 8), np.float32))}),
    }[arrays]
    reply = app(_msg(cfg, record), ctx)
    assert reply.has_error()
    assert reply.error.code == ERROR_CODE
    assert re.search(match, str(reply.error.reason)), reply.error.reason
    assert {k: v.object_id for k, v in ctx.state.items()} == before
    m = _ok(app(_msg(_job(7, 0, **{wire.SLICE_BUDGET: 1e-9}), None), ctx))
    assert m[wire.SAMPLES_PROCESSED] == 32


@pytest.mark.parametrize(
    ("run_config", "match"),
    [
        ({"alpha": 1.5}, r"run config 'alpha' must be in \[0, 1\], got 1.5"),
        ({"theta": float("nan")}, r"run config 'theta' must be"),
        ({"learning-rate": 0}, r"run config 'learning-rate' must be > 0"),
        ({"batch-size": 0}, r"run config 'batch-size' must be an integer >= 1, got 0"),
        ({"local-epochs": "two"}, r"run config 'local-epochs' must be an integer in \[1, 10000\]"),
        ({"seed": -3}, r"run config 'seed' must be an integer >= 0"),
        ({"alpha": "high"}, r"run config 'alpha' must be a finite number"),
    ],
)
def test_bad_run_config_gets_an_error_reply(run_config: dict, match: str) -> None:
    app = build_client_app(TASK)
    for kind in ("train", "evaluate"):
        reply = app(_msg(_job(1, 0), _global(), kind), node_context(NODE, run_config=run_config))
        assert reply.error.code == ERROR_CODE
        assert re.search(match, str(reply.error.reason)), reply.error.reason


def test_virtual_clock_requires_send_time() -> None:
    class Timer:
        def samples_within(self, start: float, budget: float) -> int:
            return 10

        def slice_seconds(self, start: float, samples: int, down: int, up: int) -> float:
            return 1.0

    app = build_client_app(TASK, timer_fn=lambda ctx: Timer())
    reply = app(_msg(_job(1, 0), _global()), node_context(NODE))
    assert "'send-time' is required under a virtual clock" in str(reply.error.reason)


def test_bad_availability_fn_is_reported() -> None:
    app = build_client_app(TASK, availability_fn=lambda: 1.7)
    ctx = node_context(NODE)
    # every reply reports the availability (the server derives theta with it): the first
    # job already names the bad function, not only the first abandon decision
    reply = app(
        _msg(_job(1, 0, **{wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9}), _global()), ctx
    )
    assert r"availability_fn's result must be in [0, 1], got 1.7" in str(reply.error.reason)


# ---------------------------------------------------------------- corrupted state


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda s: s.__setitem__(NODE_KEY, ConfigRecord({"global-version": "x"})),
        lambda s: s.__setitem__(NODE_KEY, MetricRecord({"a": 1})),
        lambda s: s[NODE_KEY].__setitem__("position", 10**6),
        lambda s: s.__setitem__(JOB_KEY, ArrayRecord({"junk": Array(np.zeros(2))})),
        lambda s: s.__delitem__(GLOBAL_KEY),
    ],
)
def test_corrupted_state_starts_fresh_with_a_warning(
    corrupt: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = build_client_app(TASK)
    ctx = node_context(NODE)
    ctx.state["user-record"] = ConfigRecord({"keep": 1})
    _ok(app(_msg(_job(1, 0, **{wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9}), _global()), ctx))
    corrupt(ctx.state)
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        reply = app(_msg(_job(1, 0, **{wire.SLICE_BUDGET: 1e-9}), _global()), ctx)
    finally:
        flwr_logger.removeHandler(caplog.handler)
    m = _ok(reply)
    assert m[wire.SAMPLES_PROCESSED] == 16  # the job restarted
    assert "corrupted" in caplog.text
    assert ctx.state["user-record"]["keep"] == 1


def test_host_availability_is_a_fraction() -> None:
    from clients.app import host_availability

    assert 0.0 <= host_availability() <= 1.0


@pytest.mark.parametrize(("theta", "abandoned"), [(0.0, 1), (2.0, 0)])
def test_wall_clock_decision_uses_host_availability(theta: float, abandoned: int) -> None:
    app = build_client_app(TASK)  # no availability_fn: psutil on the wall clock
    ctx = node_context(NODE, run_config={"alpha": 1.0, "theta": theta})
    _ok(app(_msg(_job(1, 0, **{wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9}), _global()), ctx))
    cfg = _job(1, 1, **{wire.SLICE_BUDGET: 1e-9, wire.MATCH_RATIO: 3.0})  # clipped to 1
    assert _ok(app(_msg(cfg, _global(1)), ctx))[wire.ABANDONED] == abandoned


def test_client_app_pickles_for_ray_with_empty_caches() -> None:
    from ray import cloudpickle  # what Ray uses to ship the ClientApp to its actors

    from clients.examples import client_app

    ctx = node_context(NODE, num_partitions=2)
    content = RecordDict({wire.ARRAYS: ArrayRecord(MLP().state_dict())})
    assert _ok(client_app(instruction(content, "evaluate", NODE), ctx))[wire.NUM_EXAMPLES] > 0
    clone = cloudpickle.loads(cloudpickle.dumps(client_app))
    assert _ok(clone(instruction(content, "evaluate", NODE), ctx))[wire.NUM_EXAMPLES] > 0


def test_older_results_do_not_overwrite_a_newer_value() -> None:
    app = build_client_app(TASK, availability_fn=lambda: 1.0)
    ctx = node_context(NODE, run_config={"alpha": 0.0, "theta": 0.5})
    ids = {wire.VALUE_NODE_IDS: [NODE]}
    newer = _job(1, 0, **{wire.SAMPLE_SHARE: 16, **ids, wire.VALUES: [0.9], wire.VALUES_ROUND: 5})
    _ok(app(_msg(newer, _global(0)), ctx))
    older = _job(2, 1, **{wire.SAMPLE_SHARE: 16, **ids, wire.VALUES: [0.1], wire.VALUES_ROUND: 3})
    _ok(app(_msg(older, _global(1)), ctx))
    # job 3 is preempted by v3 with no results for this node: V = last known = 0.9 -> abandon
    _ok(app(_msg(_job(3, 2, **{wire.SAMPLE_SHARE: 64, wire.SLICE_BUDGET: 1e-9}), _global(2)), ctx))
    m = _ok(app(_msg(_job(3, 3, **{wire.SLICE_BUDGET: 1e-9}), _global(3)), ctx))
    assert m[wire.ABANDONED] == 1


def test_a_negative_theta_in_the_run_config_leaves_the_threshold_to_the_server() -> None:
    from clients.settings import DEFAULT_THETA, ClientSettings

    s = ClientSettings.from_run_config({"theta": -1.0}, TASK)
    assert s.theta == DEFAULT_THETA  # used only if the server sends none
    # the server's theta decides: score 0.724 (see the abandon tests above)
    m, _ = _preempt(0.5, -1.0, 0.9, ([NODE, 11], [0.5, 0.5]), server={wire.THETA: 0.73})
    assert m[wire.ABANDONED] == 0
