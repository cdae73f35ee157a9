"""clients.data: the ``client-dirichlet`` partitioning (equal sizes, a Dirichlet label mix each)."""

from __future__ import annotations

import numpy as np
import pytest

from clients.data import _partition_indices, _pool_and_test, load_flwr_dataset
from flower_edge.errors import ConfigError


def test_client_dirichlet_partitions_cover_the_pool_in_equal_sizes() -> None:
    (_, y), _ = _pool_and_test("mnist1d")
    parts = _partition_indices("mnist1d", 200, "client-dirichlet", 0.1, 0)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(len(y)))  # disjoint and covering
    assert {len(p) for p in parts} == {len(y) // 200}
    assert parts == _partition_indices.__wrapped__("mnist1d", 200, "client-dirichlet", 0.1, 0)
    assert parts != _partition_indices.__wrapped__("mnist1d", 200, "client-dirichlet", 0.1, 1)


def test_client_dirichlet_small_alpha_skews_labels_more_than_iid() -> None:
    (_, y), _ = _pool_and_test("mnist1d")

    def top_share(parts: tuple[tuple[int, ...], ...]) -> float:
        return float(np.median([np.bincount(y[list(p)]).max() / len(p) for p in parts]))

    skewed = top_share(_partition_indices("mnist1d", 100, "client-dirichlet", 0.1, 0))
    mild = top_share(_partition_indices("mnist1d", 100, "client-dirichlet", 100.0, 0))
    iid = top_share(_partition_indices("mnist1d", 100, "iid", 1.0, 0))
    assert skewed > 0.6
    assert mild < 0.45
    assert iid < 0.45


def test_client_dirichlet_is_for_bundled_data_only() -> None:
    with pytest.raises(ConfigError, match="client-dirichlet' is for the bundled data sets only"):
        load_flwr_dataset("any/name", 0, 2, partitioning="client-dirichlet")
