"""What one node's data is worth: the digits MLP trained centrally with and without it.

Prints each partition's label counts, then the test accuracy (overall and per label) of the
MLP trained on the union of all partitions and on the union without ``--leave-out``. Run 25 of
the real deployment (``docs/benchmarks/deployment.md``) gave the node slowed 10x 1-3 samples
per job after its profile; this measures what leaving its partition out costs at convergence.

Usage::

    python benchmarks/partition_holdout.py --partitioning dirichlet --alpha 0.5 --leave-out 7
"""

from __future__ import annotations

import argparse
import sys
from typing import get_args

import torch
from torch import nn

from clients.data import Partitioning, load_centralized_test, load_partition
from flower_edge.models import MLP


def train_and_score(
    xs: torch.Tensor, ys: torch.Tensor, test: tuple[torch.Tensor, torch.Tensor], epochs: int
) -> tuple[float, list[float]]:
    """Train the MLP with SGD (lr 0.1, batch 32, seed 0); return (accuracy, per-label)."""
    torch.manual_seed(0)
    model = MLP(in_features=64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(epochs):
        order = torch.randperm(len(xs))
        for start in range(0, len(xs), 32):
            idx = order[start : start + 32]
            opt.zero_grad()
            nn.functional.cross_entropy(model(xs[idx]), ys[idx]).backward()
            opt.step()
    x_test, y_test = test
    with torch.no_grad():
        pred = model(x_test).argmax(1)
    right = pred == y_test
    per = [float(right[y_test == c].float().mean()) for c in range(10)]
    return float(right.float().mean()), per


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--partitioning", choices=get_args(Partitioning), default="dirichlet")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--leave-out", type=int, default=7)
    p.add_argument("--epochs", type=int, default=30)
    args = p.parse_args(argv)
    kind: Partitioning = args.partitioning
    parts = [
        load_partition("digits", i, args.partitions, partitioning=kind, alpha=args.alpha)[0]
        for i in range(args.partitions)
    ]
    for i, part in enumerate(parts):
        counts = torch.bincount(part.tensors[1], minlength=10).tolist()
        print(f"partition {i}: {len(part):4d} samples, labels 0-9 {counts}")
    test = load_centralized_test("digits").tensors
    for label, keep in (
        ("all partitions", range(args.partitions)),
        (
            f"without partition {args.leave_out}",
            [i for i in range(args.partitions) if i != args.leave_out],
        ),
    ):
        xs = torch.cat([parts[i].tensors[0] for i in keep])
        ys = torch.cat([parts[i].tensors[1] for i in keep])
        acc, per = train_and_score(xs, ys, (test[0], test[1]), args.epochs)
        print(f"{label}: accuracy {acc:.3f}; per label {[round(a, 2) for a in per]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
