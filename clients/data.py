"""Bundled data: scikit-learn's digits and MNIST-1D, partitioned with flwr-datasets.

Both data sets are available offline: digits ships with scikit-learn, MNIST-1D is *generated*
by the ``mnist1d`` package (never downloaded). Each data set is split once, with a fixed seed,
into a **centralized test set** (for the server's evaluation and valuation) and a **federated
pool**; the pool is partitioned across nodes with flwr-datasets' :class:`IidPartitioner` (after
a seeded shuffle) or :class:`DirichletPartitioner` (label skew), applied to a local
``datasets.Dataset``. Each partition is then split into the node's local train and test sets.

=============  ==========  =========  ===============  =============================
name           features    classes    default model    centralized test / pool
=============  ==========  =========  ===============  =============================
``digits``     64 (8x8)    10         ``mlp``          20 % of 1 797 / the rest
``mnist1d``    40          10         ``cnn1d``        the package's 1 000 / 4 000
=============  ==========  =========  ===============  =============================

Loading is cached per process (simulations build up to 100 clients repeatedly): the raw
arrays, the partition index lists and the tensors of each partition are computed once.
Generated MNIST-1D arrays, scikit-learn's digits and the partition index lists of
flwr-datasets' partitioners are also cached on disk as ``.npz`` under ``$FLOWER_EDGE_CACHE``
(default ``~/.cache/flower-edge``; the file names hold the versions of the libraries that made
them, so an upgrade builds them again), so that a new process (every Ray actor of a
simulation) imports neither scikit-learn nor ``datasets`` to rebuild them; an unwritable cache
folder is skipped with a warning.
"""

from __future__ import annotations

import os
import random
import tempfile
import warnings
from collections.abc import Callable
from functools import cache, lru_cache
from logging import WARNING
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
import torch
from flwr.common.logger import log
from torch.utils.data import TensorDataset

from flower_edge import validate
from flower_edge.errors import ConfigError, InputError

__all__ = [
    "DATASETS",
    "Partitioning",
    "dataset_info",
    "load_centralized_test",
    "load_flwr_dataset",
    "load_partition",
    "to_tensor_dataset",
]

DATASETS: tuple[str, ...] = ("digits", "mnist1d")
Partitioning = Literal["iid", "dirichlet", "client-dirichlet"]
"""``dirichlet``: Flower's per-class Dirichlet split (partition sizes vary; with many partitions
and a small alpha it cannot give every partition a few samples); ``client-dirichlet``: equal
partition sizes, each with its own class mix drawn from ``Dir(alpha)`` (Hsu et al., 2019)."""

_INFO: dict[str, tuple[int, int, str]] = {
    "digits": (64, 10, "mlp"),
    "mnist1d": (40, 10, "cnn1d"),
}
_DIGITS_TEST_FRACTION = 0.2
_DIGITS_SPLIT_SEED = 1234  # fixed: the centralized test set never depends on the run seed
_VALIDATION_SEED = 20_000  # the server-held validation sample: rng(_VALIDATION_SEED + seed)
_CACHE_ENV = "FLOWER_EDGE_CACHE"

Arrays = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]


def _check_name(name: str) -> str:
    if name not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; bundled datasets: {', '.join(DATASETS)}")
    return name


def dataset_info(name: str) -> tuple[int, int, str]:
    """Return ``(num_features, num_classes, default model name)`` of a bundled data set.

    Raises
    ------
    InputError
        If ``name`` is not in :data:`DATASETS`.
    """
    return _INFO[_check_name(name)]


# ---------------------------------------------------------------- raw arrays


def _cache_dir() -> Path:
    root = os.environ.get(_CACHE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "flower-edge"


def _generate_mnist1d() -> dict[str, np.ndarray[Any, Any]]:
    from mnist1d.data import get_dataset_args, make_dataset

    # make_dataset seeds the global ``random`` and ``numpy`` RNGs: restore them afterwards
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        data = make_dataset(get_dataset_args())
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {k: np.asarray(data[k]) for k in ("x", "y", "x_test", "y_test")}


Named = dict[str, np.ndarray[Any, Any]]


def _disk_cached(path: Path, keys: tuple[str, ...], make: Callable[[], Named], what: str) -> Named:
    """Return the arrays ``keys`` of the ``.npz`` at ``path``, or ``make()`` and save them."""
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as npz:
                return {k: npz[k] for k in keys}
        except (OSError, ValueError, KeyError) as exc:
            log(WARNING, "ignoring unreadable %s cache %s (%s); rebuilding it", what, path, exc)
    data = make()
    _save_npz(path, {k: data[k] for k in keys}, what)
    return data


def _save_npz(path: Path, arrays: dict[str, Any], what: str) -> None:
    """Write ``arrays`` to ``path`` atomically; an unwritable folder is logged and skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".npz", delete=False) as tmp:
            np.savez(tmp, **arrays)
        os.replace(tmp.name, path)
    except OSError as exc:
        log(WARNING, "could not cache %s under %s (%s); keeping it in memory", what, path, exc)


@lru_cache(maxsize=1)
def _mnist1d_arrays() -> dict[str, np.ndarray[Any, Any]]:
    path = _cache_dir() / "mnist1d-default-seed42.npz"
    return _disk_cached(path, ("x", "y", "x_test", "y_test"), _generate_mnist1d, "MNIST-1D")


def _load_digits() -> dict[str, np.ndarray[Any, Any]]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return {"data": np.asarray(bunch.data), "target": np.asarray(bunch.target)}


@lru_cache(maxsize=1)
def _digits_arrays() -> dict[str, np.ndarray[Any, Any]]:
    """scikit-learn's digits, cached on disk (a new process need not import scikit-learn)."""
    from importlib.metadata import version

    path = _cache_dir() / f"digits-sklearn{version('scikit-learn')}.npz"
    return _disk_cached(path, ("data", "target"), _load_digits, "digits")


@cache
def _pool_and_test(name: str) -> tuple[Arrays, Arrays]:
    """Return ``((x_pool, y_pool), (x_test, y_test))`` as float32 / int64 arrays."""
    if name == "digits":
        digits = _digits_arrays()
        x = (np.asarray(digits["data"], dtype=np.float32) / 16.0).astype(np.float32)
        y = np.asarray(digits["target"], dtype=np.int64)
        order = np.random.default_rng(_DIGITS_SPLIT_SEED).permutation(len(y))
        n_test = round(_DIGITS_TEST_FRACTION * len(y))
        test, pool = order[:n_test], order[n_test:]
        return (x[pool], y[pool]), (x[test], y[test])
    data = _mnist1d_arrays()
    return (
        (data["x"].astype(np.float32), data["y"].astype(np.int64)),
        (data["x_test"].astype(np.float32), data["y_test"].astype(np.int64)),
    )


# ---------------------------------------------------------------- partitioning


def _min_partition_size(pool: int, num_partitions: int) -> int:
    return max(1, min(10, pool // (5 * num_partitions)))


#: format of the cached partition files; bump it when the partitioning below changes
_PARTITIONS_FORMAT = 1


def _partitions_path(
    name: str, num_partitions: int, partitioning: str, alpha: float, seed: int
) -> Path:
    from importlib.metadata import version

    libs = f"fds{version('flwr-datasets')}-ds{version('datasets')}"
    key = f"{name}-{num_partitions}-{partitioning}-a{alpha!r}-s{seed}-{libs}"
    return _cache_dir() / f"partitions-v{_PARTITIONS_FORMAT}-{key}.npz"


def _cached_partitions(
    path: Path, num_partitions: int, pool: int
) -> tuple[tuple[int, ...], ...] | None:
    """Return the partitions cached at ``path`` if they are whole (else ``None``)."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            indices, offsets = np.asarray(npz["indices"]), np.asarray(npz["offsets"])
    except (OSError, ValueError, KeyError):
        return None
    if len(offsets) != num_partitions + 1 or offsets[0] != 0 or offsets[-1] != len(indices):
        return None
    if len(indices) != pool or len(np.unique(indices)) != pool or indices.max(initial=0) >= pool:
        return None
    return tuple(
        tuple(int(i) for i in indices[offsets[k] : offsets[k + 1]]) for k in range(num_partitions)
    )


def _cache_partitions(path: Path, parts: tuple[tuple[int, ...], ...]) -> None:
    offsets = np.cumsum([0] + [len(p) for p in parts])
    indices = np.fromiter((i for p in parts for i in p), dtype=np.int64)
    _save_npz(path, {"indices": indices, "offsets": offsets}, "partitions")


@lru_cache(maxsize=32)
def _partition_indices(
    name: str, num_partitions: int, partitioning: str, alpha: float, seed: int
) -> tuple[tuple[int, ...], ...]:
    """Return the pool indices of every partition (disjoint, covering the pool)."""
    (_, y), _ = _pool_and_test(name)
    if num_partitions > len(y):
        raise InputError(
            f"num_partitions must be in [1, {len(y)}] for dataset {name!r}, got {num_partitions}"
        )
    if partitioning == "client-dirichlet":
        return _client_dirichlet(np.asarray(y), num_partitions, alpha, seed)
    path = _partitions_path(name, num_partitions, partitioning, alpha, seed)
    cached = _cached_partitions(path, num_partitions, len(y))
    if cached is not None:
        return cached
    parts = _flwr_datasets_partitions(
        name, np.asarray(y), num_partitions, partitioning, alpha, seed
    )
    _cache_partitions(path, parts)
    return parts


def _flwr_datasets_partitions(
    name: str,
    y: np.ndarray[Any, Any],
    num_partitions: int,
    partitioning: str,
    alpha: float,
    seed: int,
) -> tuple[tuple[int, ...], ...]:
    """Partition the pool with flwr-datasets' IID or Dirichlet partitioner."""
    from datasets import Dataset
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    table = Dataset.from_dict({"idx": np.arange(len(y)), "label": y})
    partitioner: IidPartitioner | DirichletPartitioner
    if partitioning == "iid":
        table = table.shuffle(seed=seed)
        partitioner = IidPartitioner(num_partitions=num_partitions)
    else:
        partitioner = DirichletPartitioner(
            num_partitions=num_partitions,
            partition_by="label",
            alpha=alpha,
            min_partition_size=_min_partition_size(len(y), num_partitions),
            self_balancing=False,
            shuffle=True,
            seed=seed,
        )
    partitioner.dataset = table
    out: list[tuple[int, ...]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Dirichlet retries are reported below
        try:
            for pid in range(num_partitions):
                out.append(tuple(int(i) for i in partitioner.load_partition(pid)["idx"]))
        except ValueError as exc:
            raise InputError(
                f"could not partition {name!r} into {num_partitions} partitions with "
                f"dirichlet alpha={alpha}: {exc} (increase alpha or use fewer partitions)"
            ) from exc
    return tuple(out)


def _client_dirichlet(
    y: npt.NDArray[Any], num_partitions: int, alpha: float, seed: int
) -> tuple[tuple[int, ...], ...]:
    """Equal-size partitions, each drawing its labels from its own mix ``q ~ Dir(alpha)``.

    Hsu, Qi and Brown (2019), "Measuring the effects of non-identical data distribution for
    federated visual classification": partition i gets ``len(y) // n`` samples (the first
    ``len(y) % n`` one more), each drawn without replacement from class ``c`` with
    probability ``q_c`` renormalised over the classes that still have samples.
    """
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    pools = [list(rng.permutation(np.flatnonzero(y == c))) for c in classes]
    n = len(y)
    out: list[tuple[int, ...]] = []
    for pid in range(num_partitions):
        size = n // num_partitions + (1 if pid < n % num_partitions else 0)
        mix = rng.dirichlet([alpha] * len(classes))
        taken: list[int] = []
        for _ in range(size):
            left = np.array([len(pool) > 0 for pool in pools], dtype=np.float64)
            probs = mix * left if (mix * left).sum() > 0 else left
            c = int(rng.choice(len(classes), p=probs / probs.sum()))
            taken.append(int(pools[c].pop()))
        out.append(tuple(sorted(taken)))
    return tuple(out)


def _validate(
    name: str,
    partition_id: int,
    num_partitions: int,
    partitioning: str,
    alpha: float,
    test_fraction: float,
) -> None:
    _check_name(name)
    validate.integer("num_partitions", num_partitions, low=1, error=InputError)
    validate.integer("partition_id", partition_id, low=0, high=num_partitions - 1, error=InputError)
    validate.choice("partitioning", partitioning, get_args(Partitioning))
    validate.number("dirichlet alpha", alpha, low=0.0, low_inclusive=False)
    validate.probability("test_fraction", test_fraction, allow_one=False)


@lru_cache(maxsize=512)
def _partition_tensors(
    name: str,
    partition_id: int,
    num_partitions: int,
    partitioning: str,
    alpha: float,
    seed: int,
    test_fraction: float,
) -> tuple[TensorDataset, TensorDataset]:
    (x, y), _ = _pool_and_test(name)
    idx = np.asarray(
        _partition_indices(name, num_partitions, partitioning, float(alpha), seed)[partition_id],
        dtype=np.int64,
    )
    # local train/test split, seeded per partition; the train set keeps at least one sample
    idx = np.random.default_rng([seed, partition_id]).permutation(idx)
    n_test = min(int(test_fraction * len(idx)), max(len(idx) - 1, 0))
    test, train = idx[:n_test], idx[n_test:]
    return (
        TensorDataset(torch.from_numpy(x[train]), torch.from_numpy(y[train])),
        TensorDataset(torch.from_numpy(x[test]), torch.from_numpy(y[test])),
    )


def load_partition(
    name: str,
    partition_id: int,
    num_partitions: int,
    *,
    partitioning: Partitioning = "iid",
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = 0.2,
) -> tuple[TensorDataset, TensorDataset]:
    """Return ``(train, test)`` of one node's partition of a bundled data set.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    partition_id : int
        This node's partition, in ``[0, num_partitions)``.
    num_partitions : int
        Number of partitions of the federated pool (>= 1, at most the pool size).
    partitioning : {"iid", "dirichlet", "client-dirichlet"} (default: "iid")
        IID (seeded shuffle, then equal contiguous shards), label-skewed Dirichlet per class
        (Flower's partitioner), or equal shards with a Dirichlet label mix per partition.
    alpha : float (default: 0.5)
        Dirichlet concentration (> 0; smaller is more skewed). Ignored for IID.
    seed : int (default: 0)
        Seed of the partitioning and of the local train/test split.
    test_fraction : float (default: 0.2)
        Fraction of the partition kept as the node's local test set, in ``[0, 1)``.

    Returns
    -------
    tuple[TensorDataset, TensorDataset]
        ``(features float32, labels int64)`` of the local train and test sets. The tensors are
        shared by the per-process cache: treat them as read-only.

    Raises
    ------
    InputError
        If a parameter is out of range (the message names it and its range).
    """
    _validate(name, partition_id, num_partitions, partitioning, alpha, test_fraction)
    return _partition_tensors(
        name, partition_id, num_partitions, partitioning, float(alpha), seed, float(test_fraction)
    )


def load_centralized_test(name: str, *, seed: int = 0) -> TensorDataset:
    """Return the server-side held-out test set, disjoint from every partition.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    seed : int (default: 0)
        Accepted for symmetry with :func:`load_partition`; the held-out set is fixed per data
        set so that every run is evaluated on the same samples.
    """
    del seed
    _, (x, y) = _pool_and_test(_check_name(name))
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def load_server_validation(name: str, *, size: int, seed: int = 0) -> TensorDataset:
    """Return a server-held validation set: ``size`` samples of the training pool.

    The server's own small labelled sample (as FLTrust's root data set, Cao et al., NDSS
    2021), drawn per ``seed`` from the pool the clients' partitions come from, never from
    the held-out test set: it is what the ``edge`` preset values participants, drops updates
    and stops on, so that the test set only scores the run.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    size : int
        Samples (``>= 1``; at most the pool's size).
    seed : int (default: 0)
        Which samples.
    """
    (x, y), _ = _pool_and_test(_check_name(name))
    size = validate.integer("size", size, low=1, high=len(y), error=InputError)
    idx = np.sort(
        np.random.default_rng(_VALIDATION_SEED + seed).choice(len(y), size, replace=False)
    )
    return TensorDataset(torch.from_numpy(x[idx]), torch.from_numpy(y[idx]))


# ---------------------------------------------------------------- any flwr-datasets data set


def to_tensor_dataset(
    table: Any, *, feature_key: str = "image", label_key: str = "label"
) -> TensorDataset:
    """Convert a ``datasets.Dataset`` into a flat float32 / int64 :class:`TensorDataset`.

    Images (PIL or nested lists) become float arrays scaled to ``[0, 1]`` when their values are
    8-bit; every sample is flattened to one feature vector.

    Raises
    ------
    InputError
        If ``feature_key`` or ``label_key`` is not a column of ``table``.
    """
    for key in (feature_key, label_key):
        if key not in table.column_names:
            raise InputError(
                f"column {key!r} not in the dataset; columns: {', '.join(table.column_names)}"
            )
    if len(table) == 0:
        return TensorDataset(torch.zeros((0, 0)), torch.zeros((0,), dtype=torch.int64))
    feats = np.stack([np.asarray(v) for v in table[feature_key]])
    scale = 255.0 if feats.dtype == np.uint8 else 1.0
    x = (feats.reshape(len(feats), -1).astype(np.float32) / scale).astype(np.float32)
    y = np.asarray(table[label_key], dtype=np.int64)
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def load_flwr_dataset(
    dataset: str,
    partition_id: int,
    num_partitions: int,
    *,
    partitioning: Partitioning = "iid",
    alpha: float = 0.5,
    seed: int = 0,
    test_fraction: float = 0.2,
    feature_key: str = "image",
    label_key: str = "label",
) -> tuple[TensorDataset, TensorDataset]:
    """Load one partition of any Hugging Face data set through flwr-datasets (needs a network).

    Example: ``load_flwr_dataset("ylecun/mnist", 0, 10)``. The ``train`` split is partitioned
    (IID or Dirichlet on ``label_key``) and each partition split into local train and test.

    Parameters
    ----------
    dataset : str
        Hugging Face data set name, as accepted by ``flwr_datasets.FederatedDataset``.
    partition_id, num_partitions, partitioning, alpha, seed, test_fraction
        As in :func:`load_partition`.
    feature_key : str (default: "image")
        Column holding the inputs.
    label_key : str (default: "label")
        Column holding the integer class labels.

    Returns
    -------
    tuple[TensorDataset, TensorDataset]
        Local train and test sets, flattened features (see :func:`to_tensor_dataset`).
    """
    from flwr_datasets import FederatedDataset
    from flwr_datasets.partitioner import DirichletPartitioner, IidPartitioner

    validate.choice("partitioning", partitioning, get_args(Partitioning))
    if partitioning == "client-dirichlet":
        raise ConfigError("partitioning 'client-dirichlet' is for the bundled data sets only")
    partitioner = (
        IidPartitioner(num_partitions=num_partitions)
        if partitioning == "iid"
        else DirichletPartitioner(
            num_partitions=num_partitions, partition_by=label_key, alpha=alpha, seed=seed
        )
    )
    fds = FederatedDataset(dataset=dataset, partitioners={"train": partitioner}, seed=seed)
    part = fds.load_partition(partition_id, "train")
    if test_fraction > 0:
        split = part.train_test_split(test_size=test_fraction, seed=seed)
        train, test = split["train"], split["test"]
    else:
        train, test = part, part.select([])
    return (
        to_tensor_dataset(train, feature_key=feature_key, label_key=label_key),
        to_tensor_dataset(test, feature_key=feature_key, label_key=label_key),
    )
