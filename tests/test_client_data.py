"""Bundled loaders: partitions are disjoint, cover the pool, have the stated sizes and skew."""

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from clients import data
from flower_edge.errors import InputError


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOWER_EDGE_CACHE", str(tmp_path_factory.getbasetemp() / "fe-cache"))


def _rows(ds: torch.utils.data.TensorDataset) -> set[bytes]:
    x, y = ds.tensors
    return {x[i].numpy().tobytes() + bytes([int(y[i])]) for i in range(len(y))}


def _all_pool_indices(name: str, k: int, partitioning: str, alpha: float = 0.5) -> list[tuple]:
    return list(data._partition_indices(name, k, partitioning, alpha, 0))


@pytest.mark.parametrize("partitioning", ["iid", "dirichlet"])
def test_partitions_are_disjoint_and_cover_the_pool(partitioning: str) -> None:
    (_, y), _ = data._pool_and_test("digits")
    parts = _all_pool_indices("digits", 7, partitioning)
    flat = [i for p in parts for i in p]
    assert len(flat) == len(set(flat)) == len(y)


def test_iid_sizes_differ_by_at_most_one_and_split_train_test() -> None:
    (_, y), _ = data._pool_and_test("digits")
    k = 10
    sizes = [len(p) for p in _all_pool_indices("digits", k, "iid")]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == len(y) == 1797 - 359
    train, test = data.load_partition("digits", 3, k, test_fraction=0.2)
    assert len(test) == int(0.2 * sizes[3])
    assert len(train) + len(test) == sizes[3]
    assert not _rows(train) & _rows(test)
    assert train.tensors[0].dtype == torch.float32
    assert train.tensors[1].dtype == torch.int64
    assert train.tensors[0].shape[1] == 64
    assert float(train.tensors[0].max()) <= 1.0


def test_dirichlet_is_skewed_and_iid_is_not() -> None:
    def skew(partitioning: str, alpha: float) -> float:
        (_, y), _ = data._pool_and_test("digits")
        shares = []
        for p in _all_pool_indices("digits", 10, partitioning, alpha):
            counts = np.bincount(y[list(p)], minlength=10)
            shares.append(counts.max() / counts.sum())
        return float(np.mean(shares))  # mean share of each partition's majority class

    assert skew("iid", 0.5) < 0.25
    assert skew("dirichlet", 0.1) > 0.5
    assert skew("dirichlet", 0.1) > skew("dirichlet", 10.0)


def test_partitioning_is_seeded_and_cached() -> None:
    a = data.load_partition("digits", 1, 5, partitioning="dirichlet", seed=3)
    b = data.load_partition("digits", 1, 5, partitioning="dirichlet", seed=3)
    c = data.load_partition("digits", 1, 5, partitioning="dirichlet", seed=4)
    assert a is b  # the per-process cache
    assert _rows(a[0]) != _rows(c[0])


def test_centralized_test_set_is_disjoint_from_every_partition() -> None:
    central = _rows(data.load_centralized_test("digits"))
    assert len(central) > 300
    for pid in range(4):
        train, test = data.load_partition("digits", pid, 4)
        assert not central & _rows(train)
        assert not central & _rows(test)


def test_mnist1d_is_generated_offline_cached_and_leaves_global_rngs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_EDGE_CACHE", str(tmp_path))
    data._mnist1d_arrays.cache_clear()
    data._pool_and_test.cache_clear()
    np.random.seed(7)
    random.seed(7)
    expected_np, expected_py = np.random.random(), random.random()
    np.random.seed(7)
    random.seed(7)
    arrays = data._mnist1d_arrays()
    assert (np.random.random(), random.random()) == (expected_np, expected_py)
    assert arrays["x"].shape == (4000, 40)
    assert arrays["x_test"].shape == (1000, 40)
    assert (tmp_path / "mnist1d-default-seed42.npz").is_file()
    data._mnist1d_arrays.cache_clear()
    again = data._mnist1d_arrays()  # from the .npz cache
    np.testing.assert_array_equal(again["x"], arrays["x"])
    train, test = data.load_partition("mnist1d", 0, 8, partitioning="dirichlet")
    assert train.tensors[0].shape[1] == 40
    assert len(data.load_centralized_test("mnist1d")) == 1000


def test_dataset_info() -> None:
    assert data.dataset_info("digits") == (64, 10, "mlp")
    assert data.dataset_info("mnist1d") == (40, 10, "cnn1d")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "cifar"}, "unknown dataset 'cifar'; bundled datasets: digits, mnist1d"),
        ({"partition_id": 4}, r"partition_id must be an integer in \[0, 3\], got 4"),
        ({"partition_id": -1}, r"partition_id must be an integer in \[0, 3\]"),
        ({"num_partitions": 0, "partition_id": 0}, "num_partitions must be an integer >= 1"),
        ({"partitioning": "shards"}, "partitioning must be one of iid, dirichlet"),
        ({"alpha": 0.0}, "dirichlet alpha must be > 0"),
        ({"test_fraction": 1.0}, r"test_fraction must be in \[0, 1\)"),
        ({"num_partitions": 5000, "partition_id": 0}, r"num_partitions must be in \[1, 1438\]"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict, match: str) -> None:
    args = {"name": "digits", "partition_id": 0, "num_partitions": 4} | kwargs
    name, pid, k = args.pop("name"), args.pop("partition_id"), args.pop("num_partitions")
    with pytest.raises(InputError, match=match):
        data.load_partition(name, pid, k, **args)


def test_to_tensor_dataset_flattens_and_scales_images() -> None:
    from datasets import Dataset

    table = Dataset.from_dict(
        {"img": [np.full((2, 2), 255, dtype=np.uint8), np.zeros((2, 2), np.uint8)], "y": [3, 1]}
    )
    table = table.with_format("numpy")
    ds = data.to_tensor_dataset(table, feature_key="img", label_key="y")
    assert ds.tensors[0].shape == (2, 4)
    assert ds.tensors[1].tolist() == [3, 1]
    with pytest.raises(InputError, match="column 'label' not in the dataset; columns: img, y"):
        data.to_tensor_dataset(table, feature_key="img")


@pytest.mark.parametrize(("name", "partitioning"), [("digits", "iid"), ("mnist1d", "dirichlet")])
def test_partitions_are_cached_on_disk_and_a_bad_cache_is_recomputed(
    name: str, partitioning: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWER_EDGE_CACHE", str(tmp_path))
    data._partition_indices.cache_clear()
    first = data._partition_indices(name, 8, partitioning, 0.5, 3)
    (path,) = tmp_path.glob("partitions-*.npz")
    from importlib.metadata import version

    assert f"fds{version('flwr-datasets')}" in path.name  # an upgrade computes them again
    data._partition_indices.cache_clear()
    calls: list[int] = []
    original = data._flwr_datasets_partitions
    monkeypatch.setattr(
        data, "_flwr_datasets_partitions", lambda *a: calls.append(1) or original(*a)
    )
    assert data._partition_indices(name, 8, partitioning, 0.5, 3) == first  # from the file
    assert calls == []
    path.write_bytes(b"not an npz")  # a broken file is ignored and rewritten
    data._partition_indices.cache_clear()
    assert data._partition_indices(name, 8, partitioning, 0.5, 3) == first
    assert calls == [1]
    np.savez(path, indices=np.arange(3), offsets=np.array([0, 3]))  # not the whole pool
    data._partition_indices.cache_clear()
    assert data._partition_indices(name, 8, partitioning, 0.5, 3) == first
    assert calls == [1, 1]
    data._partition_indices.cache_clear()


def test_digits_are_cached_on_disk_as_scikit_learn_gives_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sklearn.datasets import load_digits

    monkeypatch.setenv("FLOWER_EDGE_CACHE", str(tmp_path))
    data._digits_arrays.cache_clear()
    first = data._digits_arrays()
    (path,) = tmp_path.glob("digits-sklearn*.npz")
    data._digits_arrays.cache_clear()
    monkeypatch.setattr(data, "_load_digits", lambda: pytest.fail("read from the cache"))
    again = data._digits_arrays()
    bunch = load_digits()
    for arrays in (first, again):
        np.testing.assert_array_equal(arrays["data"], bunch.data)
        np.testing.assert_array_equal(arrays["target"], bunch.target)
    assert path.stat().st_size > 0
    data._digits_arrays.cache_clear()
