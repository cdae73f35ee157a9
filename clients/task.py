"""The user's task (model factory, data loader, training defaults) and the local loops.

Local training runs on a deterministic *sample stream*: the node's training samples in a fresh
seeded permutation per epoch, epochs concatenated as needed. A job of ``share`` samples consumes
the first ``share`` samples of its stream in batches of ``batch_size``; batch ``k`` always covers
stream positions ``[k*B, min((k+1)*B, share))``, so a job trained in several slices sees exactly
the batches of a job trained at once. In a model with BatchNorm layers (which cannot train on a
single sample), a last batch of one sample is trained with the batch before it (``B + 1``).
The stream depends only on (seed, node, job key); the ClientApp uses the node's partition id as
"node" when it has one (node ids are random per run).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

import torch
from flwr.app import Context
from torch import nn
from torch.utils.data import Dataset, TensorDataset
from torch.utils.data.dataloader import default_collate

from clients.optim import LocalOptimizer, build_sgd
from clients.user_code import describe, forward_loss
from flower_edge import validate
from flower_edge.errors import ConfigError, TaskError

__all__ = [
    "MAX_LOCAL_EPOCHS",
    "OPTIMIZERS",
    "EvalResult",
    "Optimizer",
    "SliceResult",
    "Task",
    "build_optimizer",
    "evaluate_model",
    "sized",
    "stream_key",
    "stream_indices",
    "train_slice",
]

#: the most epochs a node trains when the server sends no share (``local-epochs``); a share
#: is bounded alike (:data:`clients.jobs.MAX_SHARE_EPOCHS`)
MAX_LOCAL_EPOCHS: Final = 10_000

Optimizer = Literal["sgd", "adam"]
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
Device = Literal["cpu", "auto"]


@dataclass(frozen=True)
class Task:
    """What the user brings: a model factory, a data loader, and training defaults.

    Every default below may be overridden per run by the run config (see
    ``clients.settings``).

    Parameters
    ----------
    model_fn : Callable[[], nn.Module]
        Returns a classification model (logits out): a factory such as the class ``MyNet``,
        not a module instance. The ClientApp builds one instance per process and thread and
        overwrites all of its weights and buffers before every use.
    load_data : Callable[[Context], tuple[Dataset, Dataset]]
        Returns this node's ``(train, test)`` data sets; items are ``(features, label)``.
        Called at most once per node and process (the result is cached by the ClientApp).
    learning_rate : float (default: 0.05)
        Step size, ``> 0``.
    batch_size : int (default: 32)
        Training batch size, ``>= 1``.
    local_epochs : int (default: 1)
        Epochs per round when the server assigns no sample share (a plain Flower server).
    optimizer : {"sgd", "adam"} (default: "sgd")
        Local optimizer; its state is kept across the slices of a job.
    momentum : float (default: 0.9)
        SGD momentum in ``[0, 1)``.
    weight_decay : float (default: 0.0)
        L2 penalty, ``>= 0``.
    loss_fn : Callable[[], nn.Module] (default: nn.CrossEntropyLoss)
        Factory of the training/evaluation loss (mean reduction over a batch), such as the
        class ``nn.CrossEntropyLoss``, not a module instance.
    eval_batch_size : int (default: 512)
        Batch size of evaluation.
    device : {"cpu", "auto"} (default: "cpu")
        ``"auto"`` trains on CUDA when available, else on the CPU.
    """

    model_fn: Callable[[], nn.Module]
    load_data: Callable[[Context], tuple[Dataset[Any], Dataset[Any]]]
    learning_rate: float = 0.05
    batch_size: int = 32
    local_epochs: int = 1
    optimizer: Optimizer = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    loss_fn: Callable[[], nn.Module] = field(default=nn.CrossEntropyLoss)
    eval_batch_size: int = 512
    device: Device = "cpu"

    def __post_init__(self) -> None:
        """Validate the defaults."""
        for name in ("model_fn", "load_data", "loss_fn"):
            if not callable(getattr(self, name)):
                raise ConfigError(f"{name} must be callable, got {getattr(self, name)!r}")
        for name, example in (("model_fn", "MyNet"), ("loss_fn", "torch.nn.CrossEntropyLoss")):
            value = getattr(self, name)
            if isinstance(value, nn.Module):  # callable, but forward() is not a factory
                raise ConfigError(
                    f"{name} must be a factory that builds the module (e.g. "
                    f"{name}={example}), not a module instance: got a "
                    f"{type(value).__name__} instance"
                )
        validate.number("learning_rate", self.learning_rate, low=0.0, low_inclusive=False)
        for name in ("batch_size", "local_epochs", "eval_batch_size"):
            validate.integer(name, getattr(self, name), low=1)
        validate.integer("local_epochs", self.local_epochs, high=MAX_LOCAL_EPOCHS)
        validate.choice("optimizer", self.optimizer, OPTIMIZERS)
        validate.probability("momentum", self.momentum, allow_one=False)
        validate.number("weight_decay", self.weight_decay, low=0.0)
        validate.choice("device", self.device, get_args(Device))

    def torch_device(self) -> torch.device:
        """Return the device to train on (CUDA only when asked for and present)."""
        if self.device == "auto" and torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")


def sized(data: Dataset[Any]) -> int:
    """Return ``len(data)`` (a map-style data set must define ``__len__``)."""
    return len(data)  # type: ignore[arg-type]


def build_optimizer(
    name: Optimizer,
    params: Any,
    learning_rate: float,
    momentum: float,
    weight_decay: float,
) -> LocalOptimizer:
    """Build the local optimizer by name (SGD on the CPU: :class:`clients.optim.LocalSGD`)."""
    if name == "sgd":
        return build_sgd(params, learning_rate, momentum, weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=learning_rate, weight_decay=weight_decay)
    validate.choice("optimizer", name, OPTIMIZERS)
    raise AssertionError(f"optimizer {name!r} is listed in OPTIMIZERS but not built")


# ---------------------------------------------------------------- the sample stream


def stream_key(seed: int, node_id: int, job: int | str) -> int:
    """Return a 63-bit key of the sample stream of one job on one node (stable across runs)."""
    digest = hashlib.blake2b(f"{seed}|{node_id}|{job}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _epoch_order(key: int, epoch: int, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed((key + 0x9E3779B97F4A7C15 * (epoch + 1)) % 2**63)
    return torch.randperm(n, generator=gen)


def stream_indices(key: int, start: int, count: int, n: int) -> torch.Tensor:
    """Return stream positions ``[start, start + count)`` as indices into ``n`` samples.

    Position ``p`` is sample ``perm_e[p mod n]`` of epoch ``e = p // n``, each epoch a fresh
    permutation seeded from ``key`` and ``e``.
    """
    if n <= 0 or count <= 0:
        return torch.zeros(0, dtype=torch.int64)
    parts: list[torch.Tensor] = []
    pos, end = start, start + count
    while pos < end:
        epoch, offset = divmod(pos, n)
        take = min(n - offset, end - pos)
        parts.append(_epoch_order(key, epoch, n)[offset : offset + take])
        pos += take
    return torch.cat(parts)


def _batch(data: Dataset[Any], idx: torch.Tensor, where: str) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        if isinstance(data, TensorDataset):
            return data.tensors[0][idx], data.tensors[1][idx]
        items = default_collate([data[int(i)] for i in idx])
    except Exception as exc:
        raise TaskError(f"reading {where} from load_data's data raised {describe(exc)}") from exc
    if isinstance(items, Mapping) or not isinstance(items, Sequence) or len(items) < 2:
        got = (
            f"dicts with keys {sorted(map(str, items))}"
            if isinstance(items, Mapping)
            else f"single {type(items).__name__}s"
            if not isinstance(items, Sequence)
            else f"{len(items)}-item {type(items).__name__}s"
        )
        raise TaskError(
            f"the items of load_data's data must be (features, label) pairs, got {got} "
            f"({where}); return (features, label) from __getitem__"
        )
    x, y = items[0], items[1]
    if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TaskError(
            f"the items of load_data's data must be (features, label) tensors or numbers, "
            f"got {type(x).__name__} and {type(y).__name__} ({where})"
        )
    return x, y


def _has_batch_norm(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _where(kind: str, start: int) -> str:
    if start == 0:
        return f"the first batch of {kind} data"
    return f"the {kind} batch from {'stream position' if kind == 'train' else 'sample'} {start}"


# ---------------------------------------------------------------- training and evaluation


@dataclass(frozen=True)
class SliceResult:
    """What one training slice did.

    Attributes
    ----------
    position : int
        Stream position after the slice (samples of the job processed so far).
    samples : int
        Samples processed in this slice.
    loss_sum : float
        Sum over the slice's samples of the per-sample training loss.
    seconds : float
        Host wall-clock seconds spent training.
    credit : int
        Samples granted but not yet processed (less than one batch), carried to the next slice.
    """

    position: int
    samples: int
    loss_sum: float
    seconds: float
    credit: int


def _train_step(
    model: nn.Module,
    optimizer: LocalOptimizer,
    loss_fn: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    where: str,
) -> float:
    """Take one optimizer step on ``batch``; return its mean loss (TaskError if it fails)."""
    optimizer.zero_grad()
    _, loss = forward_loss(model, loss_fn, batch[0], batch[1], where)
    try:
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    except Exception as exc:  # e.g. an output cut off the graph, sparse grads with Adam
        raise TaskError(f"training step failed: {describe(exc)} ({where})") from exc
    return float(loss.detach())


def train_slice(
    model: nn.Module,
    optimizer: LocalOptimizer,
    loss_fn: nn.Module,
    data: Dataset[Any],
    *,
    key: int,
    share: int,
    position: int,
    batch_size: int,
    grant: int | None = None,
    deadline: float | None = None,
    device: torch.device | None = None,
) -> SliceResult:
    """Train whole batches of the job's stream from ``position`` towards ``share``.

    Parameters
    ----------
    model, optimizer, loss_fn
        The job's model, optimizer (state restored) and loss.
    data : Dataset
        The node's training data.
    key : int
        The job's stream key (:func:`stream_key`).
    share : int
        Samples of the whole job.
    position : int
        Samples already processed (a batch boundary).
    batch_size : int
        Batch size ``B``.
    grant : int | None (default: None)
        Samples this slice may process (virtual clock; includes carried credit): whole batches
        are trained while the next batch fits in what is left. ``None`` = no limit.
    deadline : float | None (default: None)
        ``time.perf_counter()`` value after which no new batch starts (wall clock); at least one
        batch is trained. ``None`` = no deadline.
    device : torch.device | None (default: None)
        Where to train; ``None`` = the CPU.

    Returns
    -------
    SliceResult
        Progress of the slice.
    """
    n = sized(data)
    if not model.training:  # switching modes walks every submodule: only when needed
        model.train()
    start_time = time.perf_counter()
    pos, loss_sum, left = position, 0.0, grant
    trained_batches = 0
    if n == 0:
        share = position  # nothing to sample from: the job ends with what it has
    orders: dict[int, torch.Tensor] = {}  # epoch -> permutation, built once per slice

    def indices(start: int, count: int) -> torch.Tensor:
        parts = []
        while count > 0:
            epoch, offset = divmod(start, n)
            if epoch not in orders:
                orders.clear()
                orders[epoch] = _epoch_order(key, epoch, n)
            take = min(n - offset, count)
            parts.append(orders[epoch][offset : offset + take])
            start, count = start + take, count - take
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    move = device is not None and device.type != "cpu"
    while pos < share:
        size = min(batch_size, share - pos)
        if share - pos - size == 1 and size > 1 and _has_batch_norm(model):
            size += 1  # BatchNorm cannot train on a batch of one sample: the tail joins it
        if left is not None and size > left:
            break
        if deadline is not None and trained_batches > 0 and time.perf_counter() >= deadline:
            break
        where = _where("train", pos)
        x, y = _batch(data, indices(pos, size), where)
        if move:
            x, y = x.to(device), y.to(device)
        loss_sum += _train_step(model, optimizer, loss_fn, (x, y), where) * size
        pos += size
        trained_batches += 1
        if left is not None:
            left -= size
    credit = 0 if (left is None or pos >= share) else left
    return SliceResult(
        position=pos,
        samples=pos - position,
        loss_sum=loss_sum,
        seconds=time.perf_counter() - start_time,
        credit=credit,
    )


@dataclass(frozen=True)
class EvalResult:
    """Evaluation of a model on a data set: ``num_examples``, mean ``loss``, ``accuracy``."""

    num_examples: int
    loss: float
    accuracy: float


@torch.no_grad()
def evaluate_model(
    model: nn.Module,
    loss_fn: nn.Module,
    data: Dataset[Any],
    *,
    batch_size: int = 512,
    device: torch.device | None = None,
) -> EvalResult:
    """Return the mean loss and the accuracy of ``model`` on ``data`` (0 and 0 when empty)."""
    n = sized(data)
    if n == 0:
        return EvalResult(0, 0.0, 0.0)
    if model.training:
        model.eval()
    loss_sum, correct = 0.0, 0
    for start in range(0, n, batch_size):
        idx = torch.arange(start, min(start + batch_size, n))
        where = _where("test", start)
        x, y = _batch(data, idx, where)
        if device is not None:
            x, y = x.to(device), y.to(device)
        logits, loss = forward_loss(model, loss_fn, x, y, where)
        if logits.dim() != 2:
            raise TaskError(
                f"evaluate needs the model's logits as [batch, classes], got shape "
                f"{list(logits.shape)} ({where})"
            )
        loss_sum += float(loss) * len(idx)
        correct += int((logits.argmax(dim=1) == y).sum())
    return EvalResult(n, loss_sum / n, correct / n)
