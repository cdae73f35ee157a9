"""A ServerApp's evaluations on a host whose cores its SuperNodes share: 2 torch threads or 1.

Edge scores 6-7 models per aggregation (its leave-one-out values, the served average,
``serve_better``) through the ServerApp's ``evaluate_fn``, between the aggregation and the
next jobs. In the real-deployment benchmark (``benchmarks/real_deployment.py``) 8 SuperNodes'
ClientApps share the server's 2 cores. A multithreaded torch op then waits for its
descheduled threads. This script measures that cost (``docs/benchmarks/deployment.md``,
runs 16-20).

It starts ``--busy`` processes that each keep torch busy on matrix products (the
ClientApps' stand-in), then times ``--models`` evaluations of the digits MLP on the
centralised test set and the server's validation set (the bench app's ``evaluate_fn``), on
2 threads and on 1, alternately, ``--rounds`` times. Usage::

    python benchmarks/eval_threads.py                # 8 busy processes
    python benchmarks/eval_threads.py --busy 0       # an idle host
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

from clients.data import load_centralized_test, load_server_validation
from clients.task import evaluate_model
from flower_edge.models import MLP

BUSY = "import torch\nx = torch.randn(256, 256)\nwhile True:\n    x @ x\n"


def main(argv: list[str] | None = None) -> int:
    """Print the wall and CPU seconds of the evaluations on each thread count."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=8, help="busy processes beside the server")
    parser.add_argument("--models", type=int, default=7, help="models scored per aggregation")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    try:
        time.sleep(3.0 if busy else 0.0)  # let them start
        model = MLP(in_features=64)
        test = load_centralized_test("digits")
        validation = load_server_validation("digits", size=300, seed=0)
        loss = nn.CrossEntropyLoss()
        walls: dict[int, list[float]] = {2: [], 1: []}
        for _ in range(args.rounds):
            for threads in walls:
                torch.set_num_threads(threads)
                start, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.models):
                    evaluate_model(model, loss, test)
                    evaluate_model(model, loss, validation)
                walls[threads].append(time.perf_counter() - start)
                print(
                    f"threads {threads}: {2 * args.models} evaluations, wall "
                    f"{walls[threads][-1]:.3f} s, CPU {time.process_time() - cpu:.3f} s",
                    flush=True,
                )
        print(
            f"median wall with {args.busy} busy processes: "
            + ", ".join(f"{t} thread(s) {statistics.median(w):.3f} s" for t, w in walls.items())
        )
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
