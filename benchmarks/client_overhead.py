"""Client overhead beyond training, as a fraction of one local epoch (digits, MLP).

What is measured, per configuration (number of partitions of the digits pool -> local size):

- ``epoch``: one local epoch of the bare torch loop (same batches, same model), no Flower.
- ``message``: one ``train`` message through the ClientApp that runs the same epoch as one job
  (share = local size, no slicing): parse, data cache, model and optimizer build, arrays in
  and out, state, reply. ``overhead = message - reported train-seconds``.
- ``sliced``: the same job in 3 slices (each slice stores and restores model, optimizer and
  RNG state in ``context.state``): the extra cost of slicing.
- ``decision``: one preemption point with a newer global (the abandon rule and its inputs).
- ``serde``: the reply Message serialised and parsed as on the wire (Flower's protobuf
  round trip via ``message_to_proto`` / ``message_from_proto``).
- ``profile``: the real host quick profile (``HostProbe().profile("quick")``), run once per
  node and cached, amortised over ``--rounds`` rounds.

Peak memory: ``ru_maxrss`` of this process (a client process: torch, flwr, data, app) at the
end, and its RSS after imports.

Usage::

    .venv/bin/python benchmarks/client_overhead.py --reps 15 --rounds 30
    .venv/bin/python benchmarks/client_overhead.py --skip-profile   # no real host profile
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil
import torch

RSS_AFTER_IMPORT = psutil.Process().memory_info().rss


def _median_time(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(partitions: int, reps: int) -> dict[str, float]:
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict
    from flwr.common.serde import message_from_proto, message_to_proto

    from clients.app import build_client_app
    from clients.data import load_partition
    from clients.task import Task, build_optimizer, stream_indices, stream_key
    from clients.testing import instruction, node_context
    from flower_edge import wire
    from flower_edge.models import MLP

    train, test = load_partition("digits", 0, partitions)
    n = len(train)
    task = Task(model_fn=lambda: MLP(in_features=64), load_data=lambda ctx: (train, test))
    torch.manual_seed(0)
    global_arrays = ArrayRecord(MLP(in_features=64).state_dict())

    # bare torch epoch, same batches
    def bare_epoch() -> None:
        model = MLP(in_features=64)
        model.load_state_dict(global_arrays.to_torch_state_dict())
        opt = build_optimizer("sgd", model.parameters(), task.learning_rate, task.momentum, 0.0)
        loss_fn = torch.nn.CrossEntropyLoss()
        idx = stream_indices(stream_key(0, 1, 1), 0, n, n)
        x_all, y_all = train.tensors
        for start in range(0, n, task.batch_size):
            b = idx[start : start + task.batch_size]
            opt.zero_grad()
            loss_fn(model(x_all[b]), y_all[b]).backward()
            opt.step()

    epoch = _median_time(bare_epoch, reps)

    app = build_client_app(task, availability_fn=lambda: 1.0)
    job = iter(range(1, 10**9))

    def message(budget: float = 0.0, slices: int = 1) -> tuple[float, float]:
        ctx = node_context(1, num_partitions=partitions)
        jid = next(job)
        cfg = {wire.JOB_ID: jid, wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: n}
        if budget:
            cfg[wire.SLICE_BUDGET] = budget
        t0 = time.perf_counter()
        reply = app(
            instruction(
                RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: global_arrays}), "train", 1
            ),
            ctx,
        )
        for _ in range(slices - 1):
            reply = app(instruction(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), "train", 1), ctx)
        wall = time.perf_counter() - t0
        m = reply.content[wire.METRICS]
        assert m[wire.DONE] == 1, dict(m)
        return wall, float(m[wire.TRAIN_SECONDS])

    message()  # warm-up: data cache, lazy imports
    runs = [message() for _ in range(reps)]
    msg_wall = statistics.median(w for w, _ in runs)
    overhead = statistics.median(w - t for w, t in runs)

    # the same job in 3 slices: wall budget that fits about a third of the epoch
    third = max(epoch / 3.0, 1e-6)
    sliced_runs = []
    for _ in range(reps):
        ctx = node_context(1, num_partitions=partitions)
        jid = next(job)
        cfg = {
            wire.JOB_ID: jid,
            wire.GLOBAL_VERSION: 0,
            wire.SAMPLE_SHARE: n,
            wire.SLICE_BUDGET: third,
        }
        t0 = time.perf_counter()
        reply = app(
            instruction(
                RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: global_arrays}), "train", 1
            ),
            ctx,
        )
        count = 1
        while reply.content[wire.METRICS][wire.DONE] == 0:
            reply = app(instruction(RecordDict({wire.CONFIG: ConfigRecord(cfg)}), "train", 1), ctx)
            count += 1
        wall = time.perf_counter() - t0
        sliced_runs.append((wall - float(reply.content[wire.METRICS][wire.TRAIN_SECONDS]), count))
    sliced_overhead = statistics.median(o for o, _ in sliced_runs)
    sliced_count = statistics.median(c for _, c in sliced_runs)

    # one preemption point with a newer global (decision), minus a plain resume of one batch
    def preempt(newer: bool) -> float:
        ctx = node_context(1, num_partitions=partitions)
        jid = next(job)
        cfg = {
            wire.JOB_ID: jid,
            wire.GLOBAL_VERSION: 0,
            wire.SAMPLE_SHARE: 10 * n,
            wire.SLICE_BUDGET: 1e-9,
        }
        app(
            instruction(
                RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: global_arrays}), "train", 1
            ),
            ctx,
        )
        cfg2 = dict(cfg)
        content = RecordDict()
        if newer:
            cfg2[wire.GLOBAL_VERSION] = 1
            cfg2[wire.MATCH_RATIO] = 0.1
            cfg2[wire.VALUE_NODE_IDS] = list(range(2, 102))
            cfg2[wire.VALUES] = [0.01] * 100
            content[wire.ARRAYS] = global_arrays
        content[wire.CONFIG] = ConfigRecord(cfg2)
        t0 = time.perf_counter()
        reply = app(instruction(content, "train", 1), ctx)
        wall = time.perf_counter() - t0
        assert reply.content[wire.METRICS][wire.ABANDONED] == 0
        return wall - float(reply.content[wire.METRICS][wire.TRAIN_SECONDS])

    decision = statistics.median(preempt(True) - preempt(False) for _ in range(reps))

    # wire (de)serialisation of the finished reply
    ctx = node_context(1, num_partitions=partitions)
    cfg = {wire.JOB_ID: next(job), wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: 1}
    reply = app(
        instruction(
            RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: global_arrays}), "train", 1
        ),
        ctx,
    )
    serde = _median_time(lambda: message_from_proto(message_to_proto(reply)), reps)
    return {
        "local samples": float(n),
        "epoch s": epoch,
        "message s": msg_wall,
        "overhead s": overhead,
        "sliced overhead s": sliced_overhead,
        "slices": float(sliced_count),
        "decision s": decision,
        "serde s": serde,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=30, help="rounds to amortise the profile")
    parser.add_argument("--skip-profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    print(f"# client overhead, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"torch threads 1; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    profile_s = float("nan")
    if not args.skip_profile:
        from flower_edge.profiling import HostProbe

        t0 = time.perf_counter()
        HostProbe().profile("quick")
        profile_s = time.perf_counter() - t0
        print(f"real host quick profile: {profile_s:.2f} s (once per node, cached)")
    header = (
        "| partitions | local samples | epoch ms | message ms | overhead ms | overhead % "
        "| 3-slice extra ms | decision ms | serde ms | profile/round ms | total % |"
    )
    print()
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for k in args.partitions:
        r = run(k, args.reps)
        per_round_profile = profile_s / args.rounds if profile_s == profile_s else 0.0
        total = r["overhead s"] + per_round_profile
        print(
            f"| {k} | {r['local samples']:.0f} | {1e3 * r['epoch s']:.2f} "
            f"| {1e3 * r['message s']:.2f} | {1e3 * r['overhead s']:.2f} "
            f"| {100 * r['overhead s'] / r['epoch s']:.1f} "
            f"| {1e3 * (r['sliced overhead s'] - r['overhead s']):.2f} ({r['slices']:.0f} slices) "
            f"| {1e3 * r['decision s']:.3f} | {1e3 * r['serde s']:.3f} "
            f"| {1e3 * per_round_profile:.1f} | {100 * total / r['epoch s']:.1f} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    load1 = os.getloadavg()
    print()
    print(
        f"RSS after imports: {RSS_AFTER_IMPORT / 2**20:.0f} MiB; peak RSS (ru_maxrss): "
        f"{peak:.0f} MiB"
    )
    print(f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
