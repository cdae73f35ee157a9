"""Failures of the user's task (model_fn, load_data, their data) become one-line error replies."""

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from clients.app import ERROR_CODE, build_client_app
from clients.task import Task
from clients.testing import instruction, node_context
from flower_edge import wire
from flower_edge.models import MLP

NODE = 7
FEATURES, CLASSES = 8, 4


def _data(x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(40, FEATURES, generator=g) if x is None else x
    ys = torch.randint(0, CLASSES, (40,), generator=g) if y is None else y
    return TensorDataset(xs, ys)


TRAIN = _data()


def _model() -> nn.Module:
    return MLP(in_features=FEATURES, hidden=16, num_classes=CLASSES)


def _task(**kw: Any) -> Task:
    args: dict[str, Any] = {"model_fn": _model, "load_data": lambda ctx: (TRAIN, TRAIN)}
    return Task(**(args | kw), batch_size=16)


def _global() -> ArrayRecord:
    torch.manual_seed(0)
    return ArrayRecord(_model().state_dict())


def _msg(kind: str = "train", **cfg: Any) -> Message:
    content = RecordDict({wire.ARRAYS: _global()})
    if kind == "train":
        content[wire.CONFIG] = ConfigRecord({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0} | cfg)
    return instruction(content, kind, NODE)


@pytest.fixture
def flwr_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="flwr")
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def _boom() -> nn.Module:
    raise RuntimeError("my model factory broke")


class _DetachedMLP(MLP):
    """Logits cut off the autograd graph: backward() fails."""

    def __init__(self) -> None:
        super().__init__(in_features=FEATURES, hidden=16, num_classes=CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).detach()


def _frozen() -> nn.Module:
    model = _model()
    model.requires_grad_(False)
    return model


def _with(x: torch.Tensor | None = None, y: torch.Tensor | None = None) -> Callable[[Any], Any]:
    data = _data(x, y)
    return lambda ctx: (data, data)


class _DictItems(Dataset[Any]):
    """Items as dicts (the shape of a Hugging Face data set's rows)."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"x": TRAIN.tensors[0][i], "label": int(TRAIN.tensors[1][i])}


class _FeatureItems(Dataset[Any]):
    """Items of features only, no label."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> torch.Tensor:
        return TRAIN.tensors[0][i]


_X = TRAIN.tensors[0]
_Y = TRAIN.tensors[1]


@pytest.mark.parametrize(
    ("task", "match"),
    [
        ({"load_data": lambda ctx: None}, r"load_data must return \(train, test\), got NoneType"),
        (
            {"load_data": lambda ctx: TRAIN},
            r"load_data must return \(train, test\), got TensorDataset",
        ),
        ({"load_data": lambda ctx: 1 / 0}, "load_data raised ZeroDivisionError: division by zero"),
        ({"load_data": lambda ctx: (TRAIN, 3)}, "load_data's test data must be a map-style"),
        (  # found by a new-user probe: a stack error from the collate, naming nothing
            {"load_data": lambda ctx: ((_X, _Y), TRAIN)},
            r"load_data's train data must be a data set of \(features, label\) items, got a "
            r"tuple of 2 arrays \(shapes \[40, 8\], \[40\]\): wrap .*TensorDataset",
        ),
        (
            {"load_data": lambda ctx: (TRAIN, [_X.numpy(), _Y.numpy()])},
            r"load_data's test data .*got a list of 2 arrays",
        ),
        (
            {"load_data": lambda ctx: (_X, TRAIN)},
            r"load_data's train data .*got a bare Tensor of shape \[40, 8\]",
        ),
        (  # found by a new-user probe: "KeyError: 0", naming neither the items nor the fix
            {"load_data": lambda ctx: (_DictItems(), TRAIN)},
            r"the items of load_data's data must be \(features, label\) pairs, got dicts with "
            r"keys \['label', 'x'\] \(the first batch of train data\)",
        ),
        (
            {"load_data": lambda ctx: (_FeatureItems(), TRAIN)},
            r".*must be \(features, label\) pairs, got single Tensors",
        ),
        (  # found by a new-user probe: a raw RuntimeError from backward() out of the app
            {"model_fn": _frozen},
            r"model_fn's model has no trainable parameters \(none with requires_grad\)",
        ),
        (  # found by a new-user probe: a raw RuntimeError out of the ClientApp
            {"model_fn": _DetachedMLP},
            r"training step failed: RuntimeError: element 0 of tensors does not require grad"
            r".* \(the first batch of train data\)",
        ),
        ({"model_fn": _boom}, "model_fn raised RuntimeError: my model factory broke"),
        ({"model_fn": lambda: None}, r"model_fn must return a torch.nn.Module, got NoneType"),
        (
            {"load_data": _with(x=_X[:, :6])},
            r"features of shape \[16, 6\] \(float32\) do not fit model_fn's model: .*mat1 and "
            r"mat2.*\(the first batch of train data\)",
        ),
        (
            {"load_data": _with(y=_Y + 8)},
            r"label 1\d is outside the model's 4 outputs \(the first batch of train data\)",
        ),
        (
            {"load_data": _with(y=_Y.float())},
            r"labels of dtype float32 do not fit the loss .*\(the first batch of train data\)",
        ),
        (  # found by a new-user probe: "the loss failed ...", without the cause
            {"load_data": _with(y=_Y.int())},
            r"labels of dtype int32 do not fit the loss \(class labels are integers, "
            r"torch.int64\): .*\(the first batch of train data\)",
        ),
        (
            {"load_data": _with(x=_X.double())},
            r"features of dtype float64 do not match the model's float32 weights",
        ),
    ],
)
def test_task_failures_get_an_error_reply_naming_the_cause(
    task: dict[str, Any], match: str, flwr_log: pytest.LogCaptureFixture
) -> None:
    """Found by a new-user probe: errors in the user's model or data came out as raw
    torch/Python exceptions (chained tracebacks in a real run), not as error replies."""
    reply = build_client_app(_task(**task))(_msg(**{wire.SAMPLE_SHARE: 32}), node_context(NODE))
    assert reply.has_error()
    assert reply.error.code == ERROR_CODE
    assert re.search("TaskError: " + match, reply.error.reason), reply.error.reason
    # one record (the handler may see it twice: directly and through propagation)
    errors = list({id(r): r for r in flwr_log.records if r.levelno >= logging.ERROR}.values())
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is None
    assert "\n" not in errors[0].getMessage()


def test_evaluate_names_a_bad_label_of_the_test_data() -> None:
    """Found by a new-user probe: evaluation raised ``IndexError: Target 9 is out of bounds``."""
    bad = _data(y=_Y + 5)
    app = build_client_app(_task(load_data=lambda ctx: (TRAIN, bad)))
    reply = app(_msg("evaluate"), node_context(NODE))
    assert reply.has_error()
    assert re.search(
        r"label \d+ is outside the model's 4 outputs \(the first batch of test data\)",
        reply.error.reason,
    )


class _Regressor(MLP):
    """One output per sample (a regression with MSELoss): no class logits to score."""

    def __init__(self) -> None:
        super().__init__(in_features=FEATURES, hidden=16, num_classes=CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).sum(dim=1)


def test_evaluate_names_outputs_that_are_not_class_logits() -> None:
    """Found by a new-user probe: a model of 1-D outputs trained (with its own loss) but
    its evaluation raised a raw ``IndexError: Dimension out of range`` from argmax."""
    targets = _data(y=_Y.float())
    task = _task(model_fn=_Regressor, loss_fn=nn.MSELoss, load_data=lambda ctx: (targets, targets))
    app = build_client_app(task)
    assert not app(_msg(**{wire.SAMPLE_SHARE: 32}), node_context(NODE)).has_error()
    reply = app(_msg("evaluate"), node_context(NODE))
    assert reply.has_error()
    assert "evaluate needs the model's logits as [batch, classes], got shape [40]" in (
        reply.error.reason
    )


def test_a_node_recovers_when_its_task_works_again() -> None:
    """The failure leaves no state behind: load_data is called again on the next message."""
    calls: list[int] = []

    def flaky(ctx: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk not mounted yet")
        return TRAIN, TRAIN

    app = build_client_app(_task(load_data=flaky))
    ctx = node_context(NODE)
    first = app(_msg(**{wire.SAMPLE_SHARE: 32}), ctx)
    assert first.has_error()
    assert "load_data raised OSError: disk not mounted yet" in first.error.reason
    second = app(_msg(**{wire.SAMPLE_SHARE: 32}), ctx)
    assert not second.has_error(), second.error
    assert second.content[wire.METRICS][wire.SAMPLES_PROCESSED] == 32


def _nan_global(name: str) -> ArrayRecord:
    torch.manual_seed(0)
    state = _model().state_dict()
    state[name][0] = float("nan")
    return ArrayRecord(state)


@pytest.mark.parametrize("kind", ["job", "plain", "evaluate"])
def test_a_non_finite_global_model_is_refused_naming_the_array(kind: str) -> None:
    """Found by a new-user probe: a train message whose global arrays held NaN was trained and
    answered with NaN arrays."""
    name = next(iter(_model().state_dict()))
    content = RecordDict({wire.ARRAYS: _nan_global(name)})
    if kind != "evaluate":
        cfg = {wire.SAMPLE_SHARE: 32} | (
            {wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0} if kind == "job" else {}
        )
        content[wire.CONFIG] = ConfigRecord(cfg)
    ctx = node_context(NODE)
    msg = instruction(content, "evaluate" if kind == "evaluate" else "train", NODE)
    reply = build_client_app(_task())(msg, ctx)
    assert reply.has_error()
    assert (
        f"InputError: the received global model is not finite: array {name!r} holds NaN or Inf"
        == reply.error.reason
    )
    assert dict(ctx.state) == {}


@pytest.mark.parametrize("slices", [False, True])
def test_nan_features_give_a_diverged_error_not_nan_arrays(slices: bool) -> None:
    """Found by a new-user probe: all-NaN features gave ``train-loss nan`` and non-finite
    arrays in a successful reply."""
    nan = torch.full_like(_X, float("nan"))
    app = build_client_app(_task(load_data=_with(x=nan)))
    ctx = node_context(NODE)
    budget = {wire.SLICE_BUDGET: 1e-9} if slices else {}
    reply = app(_msg(**{wire.SAMPLE_SHARE: 32}, **budget), ctx)
    assert reply.has_error()
    assert reply.error.reason == (
        "TaskError: training diverged: train-loss is nan; check the features and the learning rate"
    )
    assert dict(ctx.state) == {}  # no diverged job kept for the next slice


class NanGradientLoss(nn.Module):
    """Cross-entropy plus ``sqrt(0 * outputs)``: a finite loss whose gradient is NaN."""

    def forward(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y) + torch.sqrt((out * 0.0).sum())


def test_weights_blown_up_by_the_last_step_give_a_diverged_error() -> None:
    """The loss of the last batch is computed before its step: the arrays are checked too."""
    app = build_client_app(_task(loss_fn=NanGradientLoss))
    reply = app(_msg(**{wire.SAMPLE_SHARE: 16}), node_context(NODE))
    assert reply.has_error()
    assert re.fullmatch(
        r"TaskError: training diverged: array '[\w.]+' holds NaN or Inf; check the features "
        r"and the learning rate",
        reply.error.reason,
    ), reply.error.reason
