"""Benchmark of ``flower-edge plan`` and of the allocation methods (seed 000, issue 3).

Usage: ``.venv/bin/python benchmarks/plan_bench.py [--nodes 10000] [--instances 200]``

1. Wall time of ``flower-edge plan`` for N nodes: the whole command in a fresh process
   (interpreter start and imports included) and ``build_plan`` in-process, without and with
   observations, for both methods.
2. Optimal method vs exhaustive search on small random instances (count of exact matches).
3. Makespan of the seed's pairwise method and of the uniform split relative to the optimum on
   random instances (true linear time models per node; the seed method starts from the
   formula-7 shares of the nodes' match ratios).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from flower_edge.allocation import (
    TimeModel,
    initial_shares,
    predicted_makespan,
    rebalance,
)
from flower_edge.cli_plan import build_plan
from flower_edge.radar import match_ratios


def random_profiles(n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    ev = rng.lognormal(0.0, 0.7, size=(n, 4)) * [100.0, 400.0, 2000.0, 150.0]
    ev[rng.random(n) < 0.5, 1] = 0.0  # half the nodes have no GPU
    caps = rng.integers(50, 400, n)
    nodes: list[dict[str, Any]] = []
    for d in range(n):
        node: dict[str, Any] = {
            "id": f"node-{d:05d}",
            "resources": dict(
                zip(("cpu", "gpu", "memory", "disk"), map(float, ev[d]), strict=True)
            ),
        }
        if d % 3 == 0:
            node["capacity"] = int(caps[d])
        nodes.append(node)
    return nodes


def random_observations(
    nodes: list[dict[str, object]], rng: np.random.Generator
) -> dict[str, list[list[float]]]:
    out: dict[str, list[list[float]]] = {}
    for node in nodes:
        k, b = float(rng.lognormal(-4.0, 0.5)), float(rng.uniform(0.0, 2.0))
        loads = rng.integers(20, 400, 5)
        out[str(node["id"])] = [
            [float(x), k * float(x) + b + float(rng.normal(0, 0.05))] for x in loads
        ]
        for pair in out[str(node["id"])]:
            pair[1] = max(pair[1], 0.0)
    return out


def bench_plan(n: int, total: int, rng: np.random.Generator) -> list[str]:
    lines = [f"## plan for {n} nodes, F = {total}", ""]
    nodes = random_profiles(n, rng)
    obs = random_observations(nodes, rng)
    ids = [str(x["id"]) for x in nodes]
    ev = [list(x["resources"].values()) for x in nodes]
    caps = [x.get("capacity") for x in nodes]
    lines.append("| what | method | wall s (median of 3) | CPU s (median of 3) |")
    lines.append("|---|---|---|---|")
    for label, observations in (("no observations", None), ("5 observations per node", obs)):
        for method in ("seed", "optimal"):
            times, cpu = [], []
            for _ in range(3):
                t0, c0 = time.perf_counter(), time.process_time()
                build_plan(ids, ev, caps, total, 0.3, observations=observations, method=method)  # type: ignore[arg-type]
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            lines.append(
                f"| build_plan in-process, {label} | {method} | {statistics.median(times):.3f} | "
                f"{statistics.median(cpu):.3f} |"
            )
    with tempfile.TemporaryDirectory() as tmp:
        profiles = Path(tmp) / "profiles.json"
        profiles.write_text(json.dumps({"nodes": nodes}))
        observations_file = Path(tmp) / "obs.json"
        observations_file.write_text(json.dumps(obs))
        for label, extra in (
            ("no observations", []),
            ("5 observations per node", ["--observations", str(observations_file)]),
        ):
            for method in ("seed", "optimal"):
                cmd = [
                    sys.executable,
                    "-m",
                    "flower_edge.cli",
                    "plan",
                    "--profiles",
                    str(profiles),
                    "--total-samples",
                    str(total),
                    "--compute-share",
                    "0.3",
                    "--method",
                    method,
                    "--json",
                    *extra,
                ]
                times, cpu = [], []
                for _ in range(3):
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.perf_counter()
                    done = subprocess.run(cmd, capture_output=True, check=True)
                    times.append(time.perf_counter() - t0)
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                doc = json.loads(done.stdout)
                assert sum(x["samples"] for x in doc["nodes"]) == total
                lines.append(
                    f"| `flower-edge plan --json` whole process, {label} | {method} | "
                    f"{statistics.median(times):.3f} | {statistics.median(cpu):.3f} |"
                )
    return lines


def brute_makespan(total: int, models: list[TimeModel]) -> float:
    n = len(models)
    best = float("inf")
    for cut in itertools.combinations(range(total + n - 1), n - 1):
        parts = [b - a - 1 for a, b in zip((-1, *cut), (*cut, total + n - 1), strict=True)]
        best = min(best, predicted_makespan(parts, models))
    return best


def bench_exhaustive(instances: int, rng: np.random.Generator) -> list[str]:
    equal = worse_seed = 0
    for _ in range(instances):
        n = int(rng.integers(2, 5))
        total = int(rng.integers(0, 12))
        models = [
            TimeModel(float(rng.uniform(0.05, 5)), float(rng.uniform(0, 10))) for _ in range(n)
        ]
        start = initial_shares(total, list(rng.uniform(0.01, 1, n)))
        opt = rebalance(start, models, method="optimal").makespan
        seed = rebalance(start, models, method="seed").makespan
        equal += abs(opt - brute_makespan(total, models)) <= 1e-9 * max(1.0, opt)
        worse_seed += seed < opt - 1e-9
    return [
        "## optimal method vs exhaustive search",
        "",
        f"{instances} random instances (2-4 nodes, F <= 11, k in [0.05, 5], b in [0, 10]): "
        f"optimal == exhaustive on {equal}; seed method better than optimal on {worse_seed}.",
    ]


def _instance(
    n: int, scenario: str, rng: np.random.Generator
) -> tuple[np.ndarray, list[TimeModel], int]:
    """Match ratios and true time models of one random federation of ``n`` nodes."""
    total = 100 * n
    if scenario == "wide":
        ev = rng.lognormal(0.0, 0.7, size=(n, 4))
        ev[rng.random(n) < 0.5, 1] = 0.0
        ratios = match_ratios(ev, 0.3)
        speed = np.maximum(ratios, 1e-3) * rng.lognormal(0.0, 0.5, n)
        b = rng.uniform(0.0, 0.2 * total / speed.sum(), n)
    else:  # "mild": speeds within ~2x, the radar tracks them within ~20%
        speed = rng.lognormal(0.0, 0.3, n)
        ratios = np.clip(speed * rng.lognormal(0.0, 0.2, n), 1e-6, None)
        ratios = ratios / ratios.max()
        b = rng.uniform(0.0, 0.1 * total / speed.sum(), n)
    models = [TimeModel(float(1.0 / v), float(bb)) for v, bb in zip(speed, b, strict=True)]
    return ratios, models, total


def bench_distance(instances: int, rng: np.random.Generator) -> list[str]:
    lines = [
        "## distance from the optimum (makespan / optimal makespan - 1)",
        "",
        "Each node has a true time model ``T = f / speed + b``; F = 100 n. *wide*: radar "
        "evaluations log-normal (sigma 0.7), half the nodes without GPU, speed = match ratio "
        "times a log-normal error (sigma 0.5), b ~ U(0, 0.2 x mean iteration time). *mild*: "
        "speeds log-normal (sigma 0.3), match ratio = speed times a log-normal error (sigma 0.2), "
        "b ~ U(0, 0.1 x mean iteration time). seed: formula-7 shares, then the seed's pairwise "
        "transfers; formula 7: no rebalancing; uniform: F / n each, no rebalancing.",
        "",
        "| scenario | nodes | instances | method | mean | median | p90 | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in ("wide", "mild"):
        for n in (5, 20, 100, 1000):
            gaps: dict[str, list[float]] = {"seed": [], "formula 7 only": [], "uniform": []}
            count = instances if n < 1000 else max(10, instances // 10)
            for _ in range(count):
                ratios, models, total = _instance(n, scenario, rng)
                start = initial_shares(total, ratios)
                opt = rebalance(start, models, method="optimal").makespan
                gaps["seed"].append(rebalance(start, models, method="seed").makespan / opt - 1)
                gaps["formula 7 only"].append(predicted_makespan(start, models) / opt - 1)
                uniform = initial_shares(total, [1.0] * n)
                gaps["uniform"].append(predicted_makespan(uniform, models) / opt - 1)
            for name, values in gaps.items():
                arr = np.asarray(values)
                lines.append(
                    f"| {scenario} | {n} | {count} | {name} | {arr.mean():.2%} | "
                    f"{np.median(arr):.2%} | {np.quantile(arr, 0.9):.2%} | {arr.max():.2%} |"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    load = os.getloadavg()
    out = [f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", ""]
    out += bench_plan(args.nodes, 100 * args.nodes, rng) + [""]
    out += bench_exhaustive(args.instances, rng) + [""]
    out += bench_distance(args.instances, rng) + [""]
    load = os.getloadavg()
    out.append(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
