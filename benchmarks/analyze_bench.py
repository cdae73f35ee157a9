"""Benchmark of ``flower-edge analyze`` (operator intensity, seed 000 issue 3).

Usage: ``.venv/bin/python benchmarks/analyze_bench.py [--threads 2]``

Times :func:`flower_edge.operators.analyze_model` on the bundled models, shapes-only on the
``meta`` device (the default) and, for the smaller inputs, executed for real on the CPU; and
the whole ``flower-edge analyze resnet18 --input-shape 32,3,224,224 --json`` command in a
fresh process. Prints a Markdown table with wall and CPU seconds, operator counts, shares and
total FLOPs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import torch

from flower_edge.models import build_model
from flower_edge.operators import analyze_model

CASES: list[tuple[str, tuple[int, ...], dict[str, object], bool]] = [
    ("resnet18", (32, 3, 224, 224), {"small_input": False}, False),
    ("resnet18", (32, 3, 32, 32), {}, False),
    ("resnet18", (8, 3, 32, 32), {}, True),
    ("transformer", (32, 64), {}, False),
    ("transformer", (32, 64), {}, True),
    ("cnn", (32, 1, 28, 28), {"image_size": 28}, False),
    ("cnn", (32, 1, 28, 28), {"image_size": 28}, True),
    ("mlp", (32, 64), {}, False),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"torch {torch.__version__}, {args.threads} threads\n")
    print("| model | input | run | wall s | CPU s | ops | p_c count | p_c flops | GFLOP | GB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, shape, kwargs, execute in CASES:
        model = build_model(name, **kwargs)
        x = torch.zeros(shape)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # every op must have a formula
            t0, c0 = time.perf_counter(), time.process_time()
            count = analyze_model(model, x, execute=execute)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        flops = analyze_model(model, x, execute=execute, share="flops")
        run = "CPU" if execute else "meta"
        print(
            f"| {name} {kwargs or ''} | {','.join(map(str, shape))} | {run} | {wall:.2f} | "
            f"{cpu:.2f} | {len(count.operators)} | {count.compute_share:.3f} | "
            f"{flops.compute_share:.3f} | {count.total_flops / 1e9:.2f} | "
            f"{count.total_bytes / 1e9:.3f} |"
        )
    cmd = [sys.executable, "-m", "flower_edge.cli", "analyze", "resnet18", "--input-shape",
           "32,3,224,224", "--json"]  # fmt: skip
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
    doc = json.loads(done.stdout)
    print(
        f"\n`flower-edge analyze resnet18 --input-shape 32,3,224,224 --json` (whole process, "
        f"imports included): {wall:.2f} s wall, {cpu:.2f} s CPU, "
        f"{len(doc['operators'])} operators, p_c = {doc['compute_share']:.3f}"
    )
    load = os.getloadavg()
    print(f"\nload average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
