"""The CUDA path of the client (``Task(device="auto")``); skipped cleanly without a GPU."""

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict
from torch.utils.data import TensorDataset

from clients.app import build_client_app
from clients.task import Task
from clients.testing import instruction, node_context
from flower_edge import wire
from flower_edge.models import CNN


def _task(device: str) -> Task:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(80, 64, generator=g)
    y = torch.randint(0, 10, (80,), generator=g)
    data = TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])
    return Task(model_fn=lambda: CNN(image_size=8), load_data=lambda ctx: data, device=device)  # type: ignore[arg-type]


def _run(task: Task, budget: float) -> tuple[dict, ArrayRecord]:
    torch.manual_seed(1)
    arrays = ArrayRecord(CNN(image_size=8).state_dict())
    app = build_client_app(task)
    ctx = node_context(3)
    cfg = {wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 96, wire.SLICE_BUDGET: budget}
    reply = app(
        instruction(RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: arrays}), "train", 3),
        ctx,
    )
    while not reply.has_error() and reply.content[wire.METRICS][wire.DONE] == 0:
        reply = app(instruction(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), "train", 3), ctx)
    assert not reply.has_error(), reply.error
    return dict(reply.content[wire.METRICS]), reply.content[wire.ARRAYS]


def test_auto_device_falls_back_to_the_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    task = _task("auto")
    assert task.torch_device() == torch.device("cpu")
    metrics, _ = _run(task, 0.0)
    assert metrics[wire.SAMPLES_PROCESSED] == 96


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_job_in_slices_matches_one_message() -> None:
    task = _task("auto")
    assert task.torch_device().type == "cuda"
    one_metrics, one = _run(task, 0.0)
    sliced_metrics, sliced = _run(task, 1e-9)  # one batch per slice
    assert one_metrics[wire.SAMPLES_PROCESSED] == sliced_metrics[wire.SAMPLES_PROCESSED] == 96
    a, b = one.to_torch_state_dict(), sliced.to_torch_state_dict()
    for k in a:
        assert a[k].device.type == "cpu"
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    evaluated = build_client_app(task)(
        instruction(RecordDict({wire.ARRAYS: one}), "evaluate", 3), node_context(3)
    )
    assert evaluated.content[wire.METRICS][wire.NUM_EXAMPLES] == 16
