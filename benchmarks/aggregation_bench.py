"""Benchmark of seed 001's aggregation and leave-one-out valuation (issue 4's figures).

K local updates of a ~1M-parameter MLP (float32) are aggregated with
``flower_edge.aggregation.WeightedSum``; then every participant is valued by

* exact leave-one-out: K re-aggregations by subtraction (``mean_without``) and K evaluations of
  the test set, and
* the first-order approximation (``first_order_contributions``): one gradient of the test loss
  at the new global and K dot products,

each reported in multiples of the cost of one evaluation of the test set. Memory is measured
with tracemalloc (numpy allocations) against the model size; the subtraction is checked
against a full re-aggregation (``weighted_average``).

The updates are realistic rather than random: each client takes SGD steps from the same global
model on its own data, labelled by a fixed random teacher; the first ``--bad`` clients have
random labels. Weights are ``c_i * g(dt_i)`` with random shares and delays, polynomial decay.

Run::

    .venv/bin/python benchmarks/aggregation_bench.py            # K = 100, 2,000 test samples
    .venv/bin/python benchmarks/aggregation_bench.py --k 20     # quicker
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from flower_edge.aggregation import WeightedSum, weighted_average
from flower_edge.models import MLP
from flower_edge.staleness import Decay
from flower_edge.valuation import first_order_contributions, leave_one_out_values

Arrays = list[np.ndarray]
MIB = 2**20


CPU_TIMES: dict[str, float] = {}


def timed(fn: Callable[[], object], repeats: int, name: str = "") -> tuple[float, float]:
    """Return (median, min) wall seconds over ``repeats`` calls; CPU seconds into CPU_TIMES.

    On a loaded machine wall time counts the waits for a core; the process CPU time (median
    over the calls) does not, so both are reported.
    """
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    if name:
        CPU_TIMES[name] = statistics.median(cpu)
    return statistics.median(times), min(times)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


@dataclass
class Setup:
    """The model, test set, updates and weights of one benchmark run."""

    model: torch.nn.Module
    x_test: torch.Tensor
    y_test: torch.Tensor
    base: Arrays
    updates: list[Arrays]
    weights: list[float]

    def set_params(self, arrays: Arrays) -> None:
        with torch.no_grad():
            for p, a in zip(self.model.parameters(), arrays, strict=True):
                p.copy_(torch.from_numpy(a))

    def evaluate(self, arrays: Arrays) -> tuple[float, float]:
        """One evaluation of the test set: (loss, accuracy)."""
        self.set_params(arrays)
        with torch.no_grad():
            logits = self.model(self.x_test)
            loss = torch.nn.functional.cross_entropy(logits, self.y_test)
            acc = (logits.argmax(dim=1) == self.y_test).float().mean()
        return float(loss), float(acc)

    def gradient(self, arrays: Arrays, x: torch.Tensor, y: torch.Tensor) -> Arrays:
        self.set_params(arrays)
        params = list(self.model.parameters())
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        return [g.numpy().copy() for g in torch.autograd.grad(loss, params)]

    def aggregate(self, checked: bool = False) -> WeightedSum:
        total = WeightedSum(self.base)
        for i, (u, w) in enumerate(zip(self.updates, self.weights, strict=True)):
            total.add(i, u, w, checked=checked)
        return total


def make_setup(args: argparse.Namespace) -> Setup:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    in_features, classes = 784, 10
    model = MLP(in_features=in_features, hidden=args.hidden, num_classes=classes)
    teacher = torch.nn.Linear(in_features, classes)

    def data(n: int, wrong: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(n, in_features)
        with torch.no_grad():
            y = teacher(x).argmax(dim=1)
        return x, (torch.randint(0, classes, (n,)) if wrong else y)

    x_test, y_test = data(args.test)
    base = [p.detach().numpy().copy() for p in model.parameters()]
    setup = Setup(model, x_test, y_test, base, [], [])
    start = time.perf_counter()
    for i in range(args.k):
        x, y = data(64, wrong=i < args.bad)
        update = [a.copy() for a in base]
        for _ in range(2):
            grads = setup.gradient(update, x, y)
            update = [u - 0.5 * g for u, g in zip(update, grads, strict=True)]
        setup.updates.append(update)
    decay = Decay("polynomial", a=0.5)
    delays = rng.exponential(scale=5.0, size=args.k)
    shares = rng.integers(50, 500, size=args.k)
    setup.weights = [float(c) * decay(float(d)) for c, d in zip(shares, delays, strict=True)]
    n_params = sum(a.size for a in base)
    print(
        f"model: MLP 784-{args.hidden}-{args.hidden}-10, {n_params:,} float32 params "
        f"({4 * n_params / MIB:.2f} MiB) in {len(base)} arrays; K = {args.k} updates "
        f"({args.bad} with random labels) made in {time.perf_counter() - start:.1f} s; "
        f"test set {args.test} samples; weights c_i * (1 + dt_i)^-0.5 from "
        f"{min(setup.weights):.1f} to {max(setup.weights):.1f}"
    )
    return setup


def bench_aggregation(s: Setup, args: argparse.Namespace) -> float:
    total = s.aggregate()
    add_med, add_min = timed(s.aggregate, args.repeats, "adds")
    mean_med, mean_min = timed(total.mean, args.repeats, "mean")
    print(
        f"[aggregation] {args.k} adds (validation included): median {add_med * 1e3:.1f} ms "
        f"(min {add_min * 1e3:.1f}) = {add_med / args.k * 1e3:.2f} ms per update, paid as "
        f"each update arrives; mean() at the trigger: median {mean_med * 1e3:.2f} ms "
        f"(min {mean_min * 1e3:.2f})"
    )
    cpu = CPU_TIMES["adds"] + CPU_TIMES["mean"]
    print(
        f"[aggregation] adds + mean: {(add_med + mean_med) * 1e3:.1f} ms wall, "
        f"{cpu * 1e3:.1f} ms CPU; {load()}"
    )
    checked_med, _ = timed(lambda: s.aggregate(checked=True), args.repeats, "checked")
    print(
        f"[aggregation] {args.k} adds with checked=True (NaN/Inf pass skipped, the caller ran "
        f"check_update at arrival): median {checked_med * 1e3:.1f} ms wall, "
        f"{CPU_TIMES['checked'] * 1e3:.1f} ms CPU"
    )
    brute_med, _ = timed(lambda: weighted_average(s.updates, s.weights), 1)
    print(
        f"[aggregation] brute-force weighted_average (stack + tensordot): {brute_med * 1e3:.0f} ms"
    )
    return brute_med


def bench_valuation(s: Setup, args: argparse.Namespace, brute_s: float) -> None:
    total = s.aggregate()
    xbar = total.mean()
    s.evaluate(xbar)  # warm up
    eval_med, eval_min = timed(lambda: s.evaluate(xbar), max(args.repeats, 5), "eval")
    print(
        f"[evaluation] one evaluation of {args.test} test samples: median "
        f"{eval_med * 1e3:.1f} ms (min {eval_min * 1e3:.1f}), CPU "
        f"{CPU_TIMES['eval'] * 1e3:.1f} ms; {load()}"
    )

    sub_med, _ = timed(lambda: [None for _ in total.means_without()], args.repeats)
    start, start_cpu = time.perf_counter(), time.process_time()
    loss_full, acc_full = s.evaluate(total.mean())
    results = [s.evaluate(without) for _, without in total.means_without()]
    _, acc_values = leave_one_out_values(acc_full, [r[1] for r in results])
    exact, _ = leave_one_out_values(loss_full, [r[0] for r in results], higher_is_better=False)
    exact_s = time.perf_counter() - start
    exact_cpu = time.process_time() - start_cpu
    print(
        f"[exact LOO] {args.k} subtractions alone: median {sub_med * 1e3:.0f} ms "
        f"({sub_med / args.k * 1e3:.2f} ms each; all {args.k} = {sub_med / eval_med:.2f} "
        f"evaluations)"
    )
    print(
        f"[exact LOO] subtractions + {args.k + 1} evaluations: {exact_s * 1e3:.0f} ms = "
        f"{exact_s / eval_med:.1f} x one evaluation (naive, K full re-aggregations + K "
        f"evaluations: ~{args.k * (brute_s + eval_med) / eval_med:.0f} x); in CPU time "
        f"{exact_cpu / CPU_TIMES['eval']:.1f} x; {load()}"
    )

    def first_order() -> np.ndarray:
        g = s.gradient(total.mean(), s.x_test, s.y_test)
        return first_order_contributions(g, total)

    approx = first_order()
    fo_med, fo_min = timed(first_order, args.repeats, "first-order")
    g_med, _ = timed(lambda: s.gradient(xbar, s.x_test, s.y_test), args.repeats)
    g = s.gradient(xbar, s.x_test, s.y_test)
    dots_med, _ = timed(lambda: first_order_contributions(g, total), args.repeats)
    print(
        f"[first order] gradient + {args.k} dot products: median {fo_med * 1e3:.0f} ms "
        f"(min {fo_min * 1e3:.0f}) = {fo_med / eval_med:.2f} x one evaluation (gradient "
        f"alone {g_med / eval_med:.2f} x, the {args.k} dot products {dots_med * 1e3:.0f} ms "
        f"= {dots_med / eval_med:.2f} x); in CPU time "
        f"{CPU_TIMES['first-order'] / CPU_TIMES['eval']:.2f} x; {load()}"
    )
    rank_exact = np.argsort(np.argsort(exact))
    rank_approx = np.argsort(np.argsort(approx))
    print(
        f"[first order] vs exact loss-based LOO: Pearson "
        f"{np.corrcoef(exact, approx)[0, 1]:.4f}, Spearman "
        f"{np.corrcoef(rank_exact, rank_approx)[0, 1]:.4f}, max |error| / max |exact| "
        f"{np.max(np.abs(approx - exact)) / np.max(np.abs(exact)):.3f}"
    )
    bad = slice(0, args.bad)
    good = slice(args.bad, None)
    print(
        f"[first order] mean contribution, {args.bad} random-label clients: exact "
        f"{exact[bad].mean():+.2e}, first order {approx[bad].mean():+.2e}; the others: exact "
        f"{exact[good].mean():+.2e}, first order {approx[good].mean():+.2e}"
    )
    print(
        f"[values] accuracy of the new global {acc_full:.4f}; accuracy-based values: "
        f"{np.count_nonzero(acc_values)} of {args.k} non-zero, max {acc_values.max():.3f}"
    )


def check_subtraction(s: Setup, args: argparse.Namespace) -> None:
    total = s.aggregate()
    rng = np.random.default_rng(1)
    heaviest = int(np.argmax(s.weights))
    picked = rng.choice(args.k, size=min(args.check, args.k), replace=False)
    keys = sorted({heaviest, *(int(k) for k in picked)})
    worst = 0.0
    for key in keys:
        others = [u for j, u in enumerate(s.updates) if j != key]
        other_w = [w for j, w in enumerate(s.weights) if j != key]
        brute = weighted_average(others, other_w)
        for got, want in zip(total.mean_without(key), brute, strict=True):
            worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - want))))
    verdict = "OK" if worst <= 1e-6 else "FAILED"
    print(
        f"[check] mean_without vs full re-aggregation on {len(keys)} keys (the heaviest "
        f"included): max |difference| = {worst:.2e} (bound 1e-6: {verdict})"
    )


def measure_memory(s: Setup, args: argparse.Namespace) -> None:
    model_bytes = sum(a.nbytes for a in s.base)
    buffered = sum(a.nbytes for u in s.updates for a in u)
    tracemalloc.start()
    total = s.aggregate()
    xbar = total.mean()
    _, agg_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    before, _ = tracemalloc.get_traced_memory()
    for _, without in total.means_without():
        del without
    _, loo_peak = tracemalloc.get_traced_memory()
    g = s.gradient(xbar, s.x_test, s.y_test)
    tracemalloc.reset_peak()
    before_fo, _ = tracemalloc.get_traced_memory()
    first_order_contributions(g, total)
    _, fo_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(
        f"[memory] model {model_bytes / MIB:.2f} MiB; buffered updates (kept as received, "
        f"not copied) {buffered / MIB:.0f} MiB = K x model"
    )
    print(
        f"[memory] tracemalloc peak of new allocations: aggregation (running sum + mean) "
        f"{agg_peak / MIB:.1f} MiB = {agg_peak / model_bytes:.2f} x model; all {args.k} "
        f"leave-one-out models {(loo_peak - before) / MIB:.1f} MiB = "
        f"{(loo_peak - before) / model_bytes:.2f} x model; first-order dot products "
        f"{(fo_peak - before_fo) / MIB:.1f} MiB = {(fo_peak - before_fo) / model_bytes:.2f} "
        f"x model"
    )
    print(
        f"[memory] process peak RSS {rss / MIB:.0f} MiB (torch, test set, the K updates and "
        f"weighted_average's brute-force float64 stacks included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--k", type=int, default=100, help="number of updates K")
    parser.add_argument("--hidden", type=int, default=678, help="MLP width (678: ~1.0M params)")
    parser.add_argument("--test", type=int, default=2000, help="test-set size")
    parser.add_argument("--bad", type=int, default=10, help="clients with random labels")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--check", type=int, default=10, help="keys checked by brute force")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    now = dt.datetime.now(dt.UTC)
    print(
        f"date {now:%Y-%m-%d %H:%M} UTC; {platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"threads {args.threads}; python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"torch {torch.__version__}"
    )
    print(f"command: {' '.join(sys.argv)}; {load()}")
    setup = make_setup(args)
    print()
    brute_s = bench_aggregation(setup, args)
    print()
    bench_valuation(setup, args, brute_s)
    print()
    check_subtraction(setup, args)
    measure_memory(setup, args)
    print(load())


if __name__ == "__main__":
    main()
