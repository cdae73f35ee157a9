"""Resumable sliced training on the assigned share, driven through the ClientApp."""

from collections.abc import Callable
from typing import Any

import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils.data import Dataset, TensorDataset

from clients.app import build_client_app
from clients.jobs import MAX_SHARE_EPOCHS, check_share
from clients.task import Task, stream_indices, stream_key
from clients.testing import instruction, node_context
from flower_edge import wire
from flower_edge.errors import InputError
from flower_edge.models import MLP

NODE = 7


def _data(n_train: int = 50, n_test: int = 20, seed: int = 0) -> tuple[TensorDataset, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_train + n_test, 8, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return (TensorDataset(x[:n_train], y[:n_train]), TensorDataset(x[n_train:], y[n_train:]))


class DropoutMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CountingData(Dataset):
    """A generic map-style dataset (no tensor fast path) that counts the samples read."""

    def __init__(self, base: TensorDataset) -> None:
        self.tensors = base.tensors
        self.reads = 0

    def __len__(self) -> int:
        return len(self.tensors[1])

    def __getitem__(self, i: int) -> Any:
        self.reads += 1
        return tuple(t[i] for t in self.tensors)


def _task(model_fn: Callable[[], nn.Module] | None = None, **kw: Any) -> Task:
    train, test = _data()
    return Task(
        model_fn=model_fn or (lambda: MLP(in_features=8, hidden=16, num_classes=4)),
        load_data=lambda ctx: (train, test),
        batch_size=16,
        **kw,
    )


def _global(model_fn: Callable[[], nn.Module] | None = None) -> ArrayRecord:
    torch.manual_seed(123)
    model = (model_fn or (lambda: MLP(in_features=8, hidden=16, num_classes=4)))()
    return ArrayRecord(model.state_dict())


def _train_msg(cfg: dict, arrays: ArrayRecord | None) -> Message:
    content = RecordDict({wire.CONFIG: ConfigRecord(cfg)})
    if arrays is not None:
        content[wire.ARRAYS] = arrays
    return instruction(content, "train", NODE)


class FixedRateTimer:
    """Virtual device: ``rate`` samples per virtual second, transfers at ``bw`` bytes/s."""

    def __init__(self, rate: float = 10.0, bw: float = 1e6) -> None:
        self.rate, self.bw = rate, bw
        self.calls: list[tuple] = []

    def samples_within(self, start: float, budget: float) -> int:
        return int(budget * self.rate)

    def slice_seconds(self, start: float, samples: int, down: int, up: int) -> float:
        self.calls.append((start, samples, down, up))
        return samples / self.rate + (down + up) / self.bw


def _metrics(reply: Message) -> dict:
    assert not reply.has_error(), reply.error
    return dict(reply.content[wire.METRICS])


def _weights(reply: Message) -> dict[str, torch.Tensor]:
    return dict(reply.content[wire.ARRAYS].to_torch_state_dict())


class BatchNormMLP(nn.Module):
    """BatchNorm has versioned buffers: its state dict is loaded the slow, general way."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@pytest.mark.parametrize("kind", ["sgd-momentum", "adam", "dropout", "batchnorm"])
def test_three_slices_equal_one(kind: str) -> None:
    torch.set_num_threads(1)
    model_fn = {"dropout": DropoutMLP, "batchnorm": BatchNormMLP}.get(kind)
    task = _task(model_fn, optimizer="adam" if kind == "adam" else "sgd")
    g = _global(model_fn)
    timer = FixedRateTimer(rate=10.0)
    cfg = {wire.JOB_ID: 4, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 100, wire.SEND_TIME: 0.0}

    one_app = build_client_app(task, timer_fn=lambda ctx: timer)
    one = one_app(_train_msg(cfg, g), node_context(NODE))
    m_one = _metrics(one)
    assert m_one[wire.DONE] == 1

    sliced_app = build_client_app(task, timer_fn=lambda ctx: timer)
    ctx = node_context(NODE)
    replies = []
    # grants of 40 samples: 32 (+8 credit), 48 (credit 0), the last 20 (16 + partial 4)
    first = {**cfg, wire.SLICE_BUDGET: 4.0}
    replies.append(sliced_app(_train_msg(first, g), ctx))
    later = {k: v for k, v in first.items() if k != wire.SAMPLE_SHARE}
    replies.append(sliced_app(_train_msg(later, None), ctx))
    replies.append(sliced_app(_train_msg(later, None), ctx))
    progress = [_metrics(r) for r in replies]
    assert [p[wire.SAMPLES_PROCESSED] for p in progress] == [32, 80, 100]
    assert [p[wire.DONE] for p in progress] == [0, 0, 1]
    assert not replies[0].content.array_records
    assert not replies[1].content.array_records
    a, b = _weights(one), _weights(replies[2])
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert progress[2][wire.TRAIN_LOSS] == pytest.approx(m_one[wire.TRAIN_LOSS], rel=1e-6)
    # the job left no state behind once done
    assert "flower-edge.job" not in ctx.state


def test_share_is_honoured_and_counted() -> None:
    train, test = _data(n_train=50)
    counting = CountingData(train)
    task = Task(
        model_fn=lambda: MLP(in_features=8, hidden=16, num_classes=4),
        load_data=lambda ctx: (counting, test),
        batch_size=16,
    )
    app = build_client_app(task)
    reply = app(
        _train_msg({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 37}, _global()),
        node_context(NODE),
    )
    m = _metrics(reply)
    assert m[wire.SAMPLES_PROCESSED] == 37
    assert m[wire.NUM_EXAMPLES] == 37
    assert counting.reads == 37


def test_share_larger_than_local_data_runs_more_epochs() -> None:
    n = 50
    share = 2 * n + 10
    # the stream: each epoch a permutation of all samples, concatenated
    idx = stream_indices(stream_key(0, NODE, 1), 0, share, n)
    for e in range(2):
        assert sorted(idx[e * n : (e + 1) * n].tolist()) == list(range(n))
    assert len(set(idx[2 * n :].tolist())) == 10
    reply = build_client_app(_task())(
        _train_msg({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: share}, _global()),
        node_context(NODE),
    )
    assert _metrics(reply)[wire.SAMPLES_PROCESSED] == share


def test_share_zero_trains_nothing_and_replies_the_global_model() -> None:
    g = _global()
    timer = FixedRateTimer()
    reply = build_client_app(_task(), timer_fn=lambda ctx: timer)(
        _train_msg(
            {wire.JOB_ID: 9, wire.GLOBAL_VERSION: 2, wire.SAMPLE_SHARE: 0, wire.SEND_TIME: 5.0},
            g,
        ),
        node_context(NODE),
    )
    m = _metrics(reply)
    assert (m[wire.DONE], m[wire.SAMPLES_PROCESSED], m[wire.NUM_EXAMPLES]) == (1, 0, 0)
    assert (m[wire.JOB_ID], m[wire.BASE_VERSION], m[wire.TRAIN_LOSS]) == (9, 2, 0.0)
    for k, v in _weights(reply).items():
        assert torch.equal(v, g.to_torch_state_dict()[k])
    # charged 0 samples; download and upload of the model
    assert timer.calls == [(5.0, 0, g.count_bytes(), reply.content[wire.ARRAYS].count_bytes())]


@pytest.mark.parametrize("share", [10**9, 2**63 - 1])
def test_a_share_beyond_the_epoch_bound_is_refused(share: int) -> None:
    """Found by a new-user probe: ``sample-share=10**9`` trained for ever (no slice budget) and
    ``2**63-1`` was accepted with slices; the bound is MAX_SHARE_EPOCHS epochs of local data."""
    app = build_client_app(_task())
    ctx = node_context(NODE)
    cfg = {
        wire.JOB_ID: 1,
        wire.GLOBAL_VERSION: 0,
        wire.SAMPLE_SHARE: share,
        wire.SLICE_BUDGET: 1e-9,
    }
    reply = app(_train_msg(cfg, _global()), ctx)
    assert reply.has_error()
    assert (
        f"config 'sample-share' must be at most {MAX_SHARE_EPOCHS} epochs of the node's 50 local "
        f"training samples ({MAX_SHARE_EPOCHS * 50}), got {share}"
    ) in reply.error.reason
    assert dict(ctx.state) == {}  # nothing kept: the node stays usable
    plain = app(_train_msg({wire.SAMPLE_SHARE: share}, _global()), ctx)  # a plain Flower server
    assert "'sample-share' must be at most" in plain.error.reason


def test_the_share_bound_is_inclusive_and_spares_an_empty_node() -> None:
    check_share(MAX_SHARE_EPOCHS * 50, 50)
    with pytest.raises(InputError, match="'sample-share' must be at most"):
        check_share(MAX_SHARE_EPOCHS * 50 + 1, 50)
    check_share(10**9, 0)  # no samples: the job ends at once, whatever its share


def test_virtual_seconds_come_from_the_timer() -> None:
    g = _global()
    timer = FixedRateTimer(rate=10.0, bw=1000.0)
    app = build_client_app(_task(), timer_fn=lambda ctx: timer)
    ctx = node_context(NODE)
    cfg = {
        wire.JOB_ID: 1,
        wire.GLOBAL_VERSION: 0,
        wire.SAMPLE_SHARE: 40,
        wire.SLICE_BUDGET: 3.0,
        wire.SEND_TIME: 100.0,
    }
    m1 = _metrics(app(_train_msg(cfg, g), ctx))
    # 30 granted: 16 processed, 14 carried; charged the whole grant; download only
    assert m1[wire.SAMPLES_PROCESSED] == 16
    assert m1[wire.VIRTUAL_SECONDS] == pytest.approx(3.0 + g.count_bytes() / 1000.0)
    cfg[wire.SEND_TIME] = 104.0
    reply = app(_train_msg(cfg, None), ctx)
    m2 = _metrics(reply)
    # 14 + 30 available, 24 needed; charged 24 - 14 = 10 samples; upload of the update
    assert m2[wire.DONE] == 1
    assert m2[wire.SAMPLES_PROCESSED] == 40
    up = reply.content[wire.ARRAYS].count_bytes()
    assert timer.calls[-1] == (104.0, 10, 0, up)
    assert m2[wire.VIRTUAL_SECONDS] == pytest.approx(1.0 + up / 1000.0)


def test_wall_clock_slices_train_at_least_one_batch_each() -> None:
    app = build_client_app(_task())
    ctx = node_context(NODE)
    cfg = {wire.JOB_ID: 2, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 48, wire.SLICE_BUDGET: 1e-9}
    seen = [_metrics(app(_train_msg(cfg, _global()), ctx))[wire.SAMPLES_PROCESSED]]
    while seen[-1] < 48:
        seen.append(_metrics(app(_train_msg(cfg, None), ctx))[wire.SAMPLES_PROCESSED])
    assert seen == [16, 32, 48]


def test_plain_flower_message_trains_local_epochs() -> None:
    app = build_client_app(_task())
    content = RecordDict({wire.ARRAYS: _global(), wire.CONFIG: ConfigRecord({"lr": 0.1})})
    reply = app(
        instruction(content, "train", NODE), node_context(NODE, run_config={"local-epochs": 3})
    )
    m = _metrics(reply)
    assert m[wire.NUM_EXAMPLES] == 50  # Flower's convention: the local data size
    assert m[wire.SAMPLES_PROCESSED] == 150
    assert wire.JOB_ID not in m
    assert reply.content[wire.ARRAYS].keys() == _global().keys()


def test_positional_arrays_from_a_numpy_list_are_accepted() -> None:
    g = _global()
    positional = ArrayRecord([a.numpy() for a in g.values()])
    reply = build_client_app(_task())(
        _train_msg({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 16}, positional),
        node_context(NODE),
    )
    assert _metrics(reply)[wire.DONE] == 1


def test_sample_order_follows_the_partition_not_the_random_node_id() -> None:
    cfg = {wire.JOB_ID: 3, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 48}
    app = build_client_app(_task())

    def trained(node_id: int, partition: int) -> dict[str, torch.Tensor]:
        ctx = node_context(node_id, partition_id=partition, num_partitions=2)
        return _weights(
            app(
                instruction(
                    RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: _global()}),
                    "train",
                    node_id,
                ),
                ctx,
            )
        )

    a, b, c = trained(11, 0), trained(2**63 + 99, 0), trained(11, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)  # same partition, another run's node id
    assert not all(torch.equal(a[k], c[k]) for k in a)  # same data, another partition


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    start=st.integers(0, 120),
    count=st.integers(0, 120),
    cut=st.integers(0, 120),
)
def test_stream_is_consistent_however_it_is_cut(n: int, start: int, count: int, cut: int) -> None:
    key = stream_key(3, 5, 8)
    whole = stream_indices(key, start, count, n)
    k = min(cut, count)
    parts = torch.cat(
        [stream_indices(key, start, k, n), stream_indices(key, start + k, count - k, n)]
    )
    assert torch.equal(whole, parts)
    assert len(whole) == count
    # every epoch of the stream is a permutation of the local samples
    epochs = stream_indices(key, 0, 3 * n, n).view(3, n)
    for row in epochs:
        assert sorted(row.tolist()) == list(range(n))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model_fn": None}, "model_fn must be callable, got None"),
        ({"learning_rate": 0.0}, "learning_rate must be > 0, got 0.0"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"local_epochs": 1.5}, "local_epochs must be an integer >= 1, got 1.5"),
        ({"optimizer": "lbfgs"}, "optimizer must be one of sgd, adam, got 'lbfgs'"),
        ({"momentum": 1.0}, r"momentum must be in \[0, 1\), got 1.0"),
        ({"weight_decay": -0.1}, "weight_decay must be >= 0"),
        ({"device": "tpu"}, "device must be one of cpu, auto, got 'tpu'"),
    ],
)
def test_task_validates_its_defaults(kwargs: dict, match: str) -> None:
    from flower_edge.errors import ConfigError

    args = {"model_fn": MLP, "load_data": lambda ctx: _data()} | kwargs
    with pytest.raises(ConfigError, match=match):
        Task(**args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model_fn": MLP()}, r"model_fn must be a factory .*\(e.g. model_fn=MyNet\).* MLP inst"),
        (
            {"loss_fn": nn.CrossEntropyLoss()},
            r"loss_fn must be a factory .*loss_fn=torch.nn.CrossEntropyLoss.* CrossEntropyLoss",
        ),
    ],
)
def test_task_refuses_a_module_instance_for_a_factory(kwargs: dict, match: str) -> None:
    """Found by a new-user probe: modules are callable, so an instance passed for ``model_fn``
    or ``loss_fn`` was accepted and the first train message failed in ``forward()``."""
    from flower_edge.errors import ConfigError

    args = {"model_fn": MLP, "load_data": lambda ctx: _data()} | kwargs
    with pytest.raises(ConfigError, match=match):
        Task(**args)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_job_does_not_inherit_the_previous_jobs_optimizer_state(optimizer: str) -> None:
    def job(app: Any, job_id: int, lr: float) -> dict[str, torch.Tensor]:
        cfg = {wire.JOB_ID: job_id, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 48}
        ctx = node_context(NODE, run_config={"learning-rate": lr})
        return _weights(app(_train_msg(cfg, _global()), ctx))

    busy = build_client_app(_task(optimizer=optimizer))
    job(busy, 1, 0.01)  # leaves momentum / moments behind in the reused optimizer
    after = job(busy, 2, 0.1)
    fresh = job(build_client_app(_task(optimizer=optimizer)), 2, 0.1)
    assert all(torch.equal(after[k], fresh[k]) for k in fresh)


@pytest.mark.parametrize("epochs", [10**9, 10_001])
def test_local_epochs_are_bounded_like_a_share(epochs: int) -> None:
    """Found by a new-user probe: ``local-epochs = 10**9`` trained for ever (a share is
    bounded at MAX_SHARE_EPOCHS epochs; the run config's epochs now are too)."""
    from clients.settings import ClientSettings
    from clients.task import MAX_LOCAL_EPOCHS
    from flower_edge.errors import ConfigError, InputError

    assert MAX_LOCAL_EPOCHS == 10_000
    task = Task(model_fn=lambda: nn.Linear(2, 2), load_data=lambda ctx: ([], []))
    with pytest.raises((ConfigError, InputError), match=r"local-epochs.*10000"):
        ClientSettings.from_run_config({"local-epochs": epochs}, task)
    with pytest.raises(ConfigError, match="local_epochs"):
        Task(model_fn=lambda: nn.Linear(2, 2), load_data=lambda ctx: ([], []), local_epochs=epochs)


@pytest.mark.parametrize(("share", "local_samples"), [(33, 50), (None, 33)])
def test_batchnorm_job_never_trains_a_one_sample_batch(
    share: int | None, local_samples: int
) -> None:
    # a share (or local data) of k*B + 1 samples left a last batch of one sample, on which
    # BatchNorm1d raises in training mode: the whole job failed
    train, test = _data(n_train=local_samples)
    task = Task(model_fn=BatchNormMLP, load_data=lambda ctx: (train, test), batch_size=32)
    cfg = {wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: share}
    if share is None:
        cfg = {}  # a plain Flower message: one epoch of the local data
    reply = build_client_app(task)(_train_msg(cfg, _global(BatchNormMLP)), node_context(NODE))
    assert _metrics(reply)[wire.NUM_EXAMPLES] == 33


def test_batchnorm_tail_keeps_three_slices_equal_one() -> None:
    torch.set_num_threads(1)
    task = _task(BatchNormMLP)
    g = _global(BatchNormMLP)
    timer = FixedRateTimer(rate=10.0)
    cfg = {wire.JOB_ID: 2, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 49, wire.SEND_TIME: 0.0}
    one = build_client_app(task, timer_fn=lambda ctx: timer)(_train_msg(cfg, g), node_context(NODE))
    sliced_app = build_client_app(task, timer_fn=lambda ctx: timer)
    ctx = node_context(NODE)
    first = {**cfg, wire.SLICE_BUDGET: 2.0}  # grants of 20 samples: batches 16, then 16 + 17
    later = {k: v for k, v in first.items() if k != wire.SAMPLE_SHARE}
    replies = [sliced_app(_train_msg(first, g), ctx)]
    while _metrics(replies[-1])[wire.DONE] == 0:
        replies.append(sliced_app(_train_msg(later, None), ctx))
    assert [_metrics(r)[wire.SAMPLES_PROCESSED] for r in replies] == [16, 32, 49]
    a, b = _weights(one), _weights(replies[-1])
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _lazy_model() -> nn.Module:
    return nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.LazyLinear(4))


def test_a_model_with_lazy_parameters_trains_and_evaluates() -> None:
    """Found by a new-user probe: a model of ``nn.LazyLinear`` layers raised a raw
    RuntimeError ("Can't access the shape of an uninitialized parameter") out of the
    ClientApp: the arrays' shapes were checked against parameters that had none yet."""
    torch.manual_seed(0)
    initialised = _lazy_model()
    initialised(torch.zeros(2, 8))
    g = ArrayRecord(initialised.state_dict())
    app = build_client_app(_task(_lazy_model))
    ctx = node_context(NODE)
    cfg = {wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 50}
    trained = _weights(app(_train_msg(cfg, g), ctx))
    assert not torch.equal(trained["0.weight"], torch.from_numpy(g["0.weight"].numpy()))
    evaluated = app(instruction(RecordDict({wire.ARRAYS: g}), "evaluate", NODE), ctx)
    assert _metrics(evaluated)[wire.NUM_EXAMPLES] == 20
    # a fresh process (another slot) again, with arrays of the wrong width: a clear error
    wide = _lazy_model()
    wide(torch.zeros(2, 9))
    bad = build_client_app(_task(_lazy_model))(
        _train_msg(cfg, ArrayRecord(wide.state_dict())), node_context(NODE)
    )
    assert bad.has_error()
    assert "features of shape [16, 8]" in bad.error.reason


def test_a_slice_that_fits_no_sample_still_charges_one_and_progresses() -> None:
    """A device offline for the whole slice (or slower than a sample per budget) makes
    progress: each slice charges one sample, reports virtual-seconds > 0 and carries it as
    credit until a batch of 16 fits (before: a 0-second report the server rejected, forever)."""
    torch.set_num_threads(1)
    task = _task()
    timer = FixedRateTimer(rate=0.1)  # 0.1 samples per virtual second: 0 in a 4 s budget
    app = build_client_app(task, timer_fn=lambda ctx: timer)
    ctx = node_context(NODE)
    cfg = {
        wire.JOB_ID: 5,
        wire.GLOBAL_VERSION: 0,
        wire.SAMPLE_SHARE: 20,
        wire.SEND_TIME: 0.0,
        wire.SLICE_BUDGET: 4.0,
    }
    later = {k: v for k, v in cfg.items() if k != wire.SAMPLE_SHARE}
    replies = [app(_train_msg(cfg, _global()), ctx)]
    replies += [app(_train_msg(later, None), ctx) for _ in range(16)]
    metrics = [_metrics(r) for r in replies]
    # one sample at 0.1 samples/s each time (the first slice also downloads the model)
    assert all(m[wire.VIRTUAL_SECONDS] == pytest.approx(10.0, abs=0.01) for m in metrics)
    processed = [m[wire.SAMPLES_PROCESSED] for m in metrics]
    assert processed[:15] == [0] * 15  # credit 1, 2, ..., 15: no batch of 16 yet
    assert processed[15] == 16  # the 16th slice's grant (15 credit + 1) holds a batch
    assert processed[16] == 16  # credit 1 again: the tail of 4 does not fit yet
    assert [m[wire.DONE] for m in metrics] == [0] * 17
