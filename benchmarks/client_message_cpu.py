"""CPU of one ClientApp message in a fresh process, as a real deployment runs it.

Flower's SuperNode starts a ClientApp process for each message, so every message pays the
imports and every one-off cost of the first training step. This benchmark runs one digits
MLP ``train`` message (8 partitions, a share of 720 samples: five epochs of a node's data, as
``benchmarks/real_deployment.py``) through the bundled ClientApp (``clients.examples.mlp_app``)
in a fresh interpreter, ``--reps`` times per optimizer, and reports the process's CPU time by
phase (``time.process_time``; torch on one thread):

- ``torch``: ``import torch``;
- ``flwr+clients``: Flower's message types and the ClientApp;
- ``message``: the message itself (data from the on-disk cache, the model, the optimizer, the
  training, the reply);
- ``process``: the interpreter's whole CPU time up to the reply, start-up included.

Optimizers: ``local`` is the client's :class:`clients.optim.LocalSGD` (the default for
parameters on the CPU); ``torch`` patches the client to build ``torch.optim.SGD``, whose
first use in a process imports ``torch._dynamo``. Both train bit for bit the same model
(``tests/test_client_optim.py``); the script checks that the two replies are equal.

Usage::

    .venv/bin/python benchmarks/client_message_cpu.py --reps 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent(
    """
    import hashlib, json, os, resource, sys, time
    t0 = time.process_time()
    import torch
    torch.set_num_threads(1)
    t1 = time.process_time()
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict
    from clients import examples, task
    from clients.testing import instruction, node_context
    from flower_edge import wire
    if sys.argv[1] == "torch":
        def torch_sgd(params, lr, momentum, weight_decay):
            return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
        task.build_sgd = torch_sgd
    t2 = time.process_time()
    torch.manual_seed(0)
    arrays = ArrayRecord(examples.digits_mlp_task().model_fn().state_dict())
    ctx = node_context(5, partition_id=1, num_partitions=8)
    cfg = ConfigRecord({wire.JOB_ID: 1, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 720})
    content = RecordDict({wire.CONFIG: cfg, wire.ARRAYS: arrays})
    reply = examples.mlp_app(instruction(content, "train", 5), ctx)
    t3 = time.process_time()
    assert not reply.has_error(), reply.error
    digest = hashlib.sha256()
    for name, arr in reply.content[wire.ARRAYS].items():
        digest.update(name.encode() + arr.numpy().tobytes())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({
        "torch": t1 - t0, "flwr+clients": t2 - t1, "message": t3 - t2,
        "process": usage.ru_utime + usage.ru_stime,
        "dynamo": "torch._dynamo" in sys.modules, "digest": digest.hexdigest(),
    }))
    """
)

PHASES = ("torch", "flwr+clients", "message", "process")


def run_child(optimizer: str, cache: str) -> dict[str, object]:
    """Run one message in a fresh interpreter; return its phases' CPU seconds."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FLOWER_EDGE_CACHE": cache,
        "OMP_NUM_THREADS": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, optimizer],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Measure both optimizers, interleaved, and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7, help="fresh processes per optimizer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        run_child("local", cache)  # fills the data cache, as a node's first run does
        rows: dict[str, list[dict[str, object]]] = {"torch": [], "local": []}
        for _ in range(args.reps):
            for optimizer in rows:
                rows[optimizer].append(run_child(optimizer, cache))
    digests = {str(r["digest"]) for runs in rows.values() for r in runs}
    print(f"load average {os.getloadavg()[0]:.2f}; {args.reps} fresh processes per optimizer")
    print("same trained weights from both optimizers:", len(digests) == 1)
    print()
    print("| optimizer | torch._dynamo imported | " + " | ".join(PHASES) + " (CPU s, median) |")
    print("|---|---|" + "---|" * len(PHASES))
    for optimizer, runs in rows.items():
        dynamo = {bool(r["dynamo"]) for r in runs}
        medians = [statistics.median(float(str(r[p])) for r in runs) for p in PHASES]
        cells = " | ".join(f"{m:.3f}" for m in medians)
        label = "torch.optim.SGD" if optimizer == "torch" else "LocalSGD (default)"
        print(f"| {label} | {'/'.join(str(d) for d in sorted(dynamo))} | {cells} |")


if __name__ == "__main__":
    main()
