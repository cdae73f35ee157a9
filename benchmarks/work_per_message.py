"""Accuracy of the real deployment's first aggregations against the work in each message.

Issue 12's real-deployment benchmark (``benchmarks/real_deployment.py``) reads the wall time
at which each strategy's served model first reaches 0.8 on the digits test set. On one host
a message costs tens of seconds of runtime overhead (a ClientApp process per message) and
milliseconds of training, so that time is (number of aggregations before the model crosses
0.8) x (one message round trip), and the number of aggregations is set by how much each
message trains, the same for every strategy given the same work.

This script replays, in process and without a clock, the first two aggregations of that
benchmark for several amounts of local work ``E`` (epochs of a node's partition per
message), on the benchmark's data and model: 8 IID partitions of digits (the bundled
``clients.examples.mlp_app``: 144 training samples each), the digits MLP, SGD with lr 0.1
(the benchmark app's ``learning-rate``), momentum 0.9, batch 32, and 4 updates per
aggregation (edge with K = 3, FedBuff with a buffer of 4):

* aggregation 1: the mean of 4 models trained from the initial model (edge and FedBuff
  alike: with fresh updates and server lr 1 both rules give the mean; edge serves it as is);
* aggregation 2: 3 first-wave models (base: the initial model) and 1 second-wave model
  (base: aggregation 1), combined as deltas with equal weights (FedBuff's rule with
  staleness weights left out: an upper bound on the progress of the step);
* ``served 2``: edge's served model after aggregation 2, the moving average over one pass
  (8 nodes, 4 updates per aggregation: ``b = 0.5``, so the mean of aggregations 1 and 2).

Usage::

    python benchmarks/work_per_message.py --epochs 5 7.5 10 15 --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any

import torch

from clients.data import load_centralized_test, load_partition
from clients.task import evaluate_model
from flower_edge.models import MLP

NODES = 8
PER_AGGREGATION = 4
BATCH = 32
LR = 0.1
MOMENTUM = 0.9

State = dict[str, torch.Tensor]


def train(init: State, data: Any, epochs: float, seed: int) -> State:
    """Return the model trained from ``init`` for ``epochs`` epochs of ``data``."""
    model = MLP(in_features=64)
    model.load_state_dict(init)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss = torch.nn.CrossEntropyLoss()
    x, y = data.tensors
    n = len(y)
    steps = round(epochs * n / BATCH)
    g = torch.Generator().manual_seed(seed)
    order = torch.cat([torch.randperm(n, generator=g) for _ in range(int(epochs) + 2)])
    model.train()
    for s in range(steps):
        idx = order[s * BATCH : (s + 1) * BATCH]
        opt.zero_grad()
        loss(model(x[idx]), y[idx]).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def mean(states: Sequence[State]) -> State:
    """Return the element-wise mean of ``states``."""
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def accuracy(state: State, test: Any) -> float:
    """Return the test accuracy of ``state``."""
    model = MLP(in_features=64)
    model.load_state_dict(state)
    with torch.no_grad():
        return evaluate_model(model, torch.nn.CrossEntropyLoss(), test).accuracy


def replay(epochs: float, seed: int, parts: Sequence[Any], test: Any) -> tuple[float, float, float]:
    """Return the accuracies of aggregation 1, aggregation 2 and edge's served model 2."""
    torch.manual_seed(seed)
    init = {k: v.detach().clone() for k, v in MLP(in_features=64).state_dict().items()}
    first = [train(init, parts[i], epochs, 100 * seed + i) for i in range(NODES)]
    x1 = mean(first[:PER_AGGREGATION])
    second = train(x1, parts[0], epochs, 100 * seed + 50)
    pairs = [(first[i], init) for i in range(PER_AGGREGATION, NODES - 1)] + [(second, x1)]
    step = mean([{k: m[k] - b[k] for k in init} for m, b in pairs])
    x2 = {k: x1[k] + step[k] for k in init}
    return accuracy(x1, test), accuracy(x2, test), accuracy(mean([x1, x2]), test)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--epochs", type=float, nargs="+", default=[5.0, 7.5, 10.0, 15.0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    args = p.parse_args(argv)
    test = load_centralized_test("digits")
    parts = [load_partition("digits", i, NODES)[0] for i in range(NODES)]
    print(f"partitions: {[len(p) for p in parts]} training samples; test {len(test)}")
    print("| epochs per message | aggregation 1 | aggregation 2 | edge served 2 |")
    print("|---|---|---|---|")
    for e in args.epochs:
        rows = [replay(e, s, parts, test) for s in args.seeds]
        cells = [
            f"{statistics.median(c):.3f} ({min(c):.3f}-{max(c):.3f})"
            for c in zip(*rows, strict=True)
        ]
        print(f"| {e:g} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
