"""The real-deployment benchmark app splits digits as its run config says, server and nodes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from flwr.app import Context, RecordDict

from clients.data import load_partition
from flower_edge.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "deploy_app"))

from benchapp.client_app import load  # noqa: E402
from benchapp.data import partitioning  # noqa: E402


def context(run_config: dict[str, object], partition: int, partitions: int) -> Context:
    return Context(
        run_id=1,
        node_id=partition + 1,
        node_config={"partition-id": partition, "num-partitions": partitions},
        state=RecordDict(),
        run_config=run_config,  # type: ignore[arg-type]
    )


def test_defaults_are_the_iid_split_of_runs_1_to_24() -> None:
    assert partitioning({}) == ("iid", 0.5)
    cfg = {"partitioning": "iid"}
    sizes = [len(load(context(cfg, i, 8))[0]) for i in range(8)]
    assert sizes == [len(load_partition("digits", i, 8)[0]) for i in range(8)]


def test_dirichlet_nodes_hold_the_label_skewed_partitions_the_server_sums() -> None:
    cfg = {"partitioning": "dirichlet", "dirichlet-alpha": 0.5}
    kind, alpha = partitioning(cfg)
    nodes = [load(context(cfg, i, 8))[0] for i in range(8)]
    server = [load_partition("digits", i, 8, partitioning=kind, alpha=alpha)[0] for i in range(8)]
    assert [len(n) for n in nodes] == [len(s) for s in server]
    iid = [len(load_partition("digits", i, 8)[0]) for i in range(8)]
    assert [len(n) for n in nodes] != iid  # a different split, not the IID one relabelled
    # label skew: some node's most common label holds far more than a tenth of its data
    share = max(float(n.tensors[1].bincount().max()) / len(n) for n in nodes)
    assert share > 0.3


@pytest.mark.parametrize(
    ("cfg", "field"),
    [
        ({"partitioning": "skewed"}, "partitioning"),
        ({"partitioning": "dirichlet", "dirichlet-alpha": 0.0}, "dirichlet-alpha"),
        ({"partitioning": "dirichlet", "dirichlet-alpha": "x"}, "dirichlet-alpha"),
    ],
)
def test_a_bad_setting_names_its_key(cfg: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        partitioning(cfg)
