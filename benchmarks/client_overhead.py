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
  node and run, amortised over ``--rounds`` rounds; and the same report read back from the
  opt-in disk cache (``clients.profile_cache``) by a later run.

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

import clients.app  # noqa: F401  (a client process has torch, flwr and the app loaded)

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

    bare_epoch()  # warm-up: the first optimizer build initialises torch.optim (seconds)
    epoch = _median_time(bare_epoch, reps)

    app = build_client_app(task, availability_fn=lambda: 1.0)
    job = iter(range(1, 10**9))

    def message(share: int = n) -> tuple[float, float, float]:
        """Return (wall s, CPU s, reported train-seconds) of one whole-job train message."""
        ctx = node_context(1, num_partitions=partitions)
        cfg = {wire.JOB_ID: next(job), wire.GLOBAL_VERSION: 0, wire.SAMPLE_SHARE: share}
        content = RecordDict({wire.CONFIG: ConfigRecord(cfg), wire.ARRAYS: global_arrays})
        msg = instruction(content, "train", 1)
        t0, c0 = time.perf_counter(), time.process_time()
        reply = app(msg, ctx)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        m = reply.content[wire.METRICS]
        assert m[wire.DONE] == 1, dict(m)
        return wall, cpu, float(m[wire.TRAIN_SECONDS])

    message()  # warm-up: data cache, lazy imports
    runs, empty = [], []
    for _ in range(reps):  # interleaved, so that both see the same load
        runs.append(message())
        empty.append(message(0))
    msg_wall = statistics.median(w for w, _, _ in runs)
    in_app_epoch = statistics.median(t for _, _, t in runs)
    overhead = statistics.median(w - t for w, _, t in runs)
    # CPU time, which other processes' load does not inflate: a share-0 message does all the
    # per-message work but no training
    cpu_overhead = statistics.median(c for _, c, _ in empty)
    cpu_epoch = statistics.median(c for _, c, _ in runs) - cpu_overhead

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
        extra = wall - float(reply.content[wire.METRICS][wire.TRAIN_SECONDS])
        sliced_runs.append((extra, count))
    # extra cost of each additional slice (state saved and restored, one more message)
    per_slice = (
        statistics.median((o - overhead) / (c - 1) for o, c in sliced_runs if c > 1)
        if any(c > 1 for _, c in sliced_runs)
        else float("nan")
    )
    sliced_count = statistics.median(c for _, c in sliced_runs)

    # the abandon decision at a preemption point: value lookup in 100 results, availability
    # (psutil, wall clock), the rule itself
    from clients.app import host_availability
    from flower_edge.decision import decide, node_value

    ids, vals = list(range(2, 102)), [0.01] * 100

    def decision_once() -> None:
        value, took_part = node_value(1, ids, vals, 0.2)
        decide(0.5, 0.6, 0.8 * host_availability(), value, took_part)

    decision = _median_time(lambda: [decision_once() for _ in range(100)], reps) / 100

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
        "bare epoch s": epoch,
        "epoch s": in_app_epoch,
        "message s": msg_wall,
        "overhead s": overhead,
        "cpu overhead s": cpu_overhead,
        "cpu epoch s": cpu_epoch,
        "per slice s": per_slice,
        "slices": float(sliced_count),
        "decision s": decision,
        "serde s": serde,
    }


def memory_stages(messages: int) -> None:
    """Print RSS after each stage of a fresh client process (run it as its own process)."""
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict

    from clients.data import load_partition
    from clients.examples import client_app
    from clients.testing import instruction, node_context
    from flower_edge import wire
    from flower_edge.models import MLP

    proc = psutil.Process()

    def show(stage: str) -> None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| {stage} | {proc.memory_info().rss / 2**20:.0f} | {peak:.0f} |")

    print("| stage | RSS MiB | peak MiB |")
    print("|---|---|---|")
    show("torch + flwr + clients imported")
    load_partition("digits", 0, 20)
    show("digits partition loaded (datasets, flwr-datasets, scikit-learn)")
    ctx = node_context(1, num_partitions=20)
    arrays = ArrayRecord(MLP().state_dict())
    for done in range(1, messages + 1):
        cfg = ConfigRecord({wire.JOB_ID: done, wire.GLOBAL_VERSION: 0})
        content = RecordDict({wire.CONFIG: cfg, wire.ARRAYS: arrays})
        client_app(instruction(content, "train", 1), ctx)
        if done in (1, messages // 2, messages):
            show(f"after {done} train messages (one local epoch each)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 5, 20])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=30, help="rounds to amortise the profile")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument(
        "--memory", type=int, metavar="N", help="only: RSS by stage of a client, N messages"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.memory:
        print(f"# client memory, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
        print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        memory_stages(args.memory)
        return 0
    load0 = os.getloadavg()
    print(f"# client overhead, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"torch threads 1; load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}")
    profile_s = profile_cpu = float("nan")
    if not args.skip_profile:
        import tempfile

        from clients.profile_cache import CachedProbe
        from flower_edge.profiling import HostProbe

        with tempfile.TemporaryDirectory() as folder:
            t0, c0 = time.perf_counter(), time.process_time()
            CachedProbe(HostProbe(), folder).profile("quick")
            profile_s = time.perf_counter() - t0
            profile_cpu = time.process_time() - c0
            t0 = time.perf_counter()
            CachedProbe(HostProbe(), folder).profile("quick")
            reuse_s = time.perf_counter() - t0
        print(
            f"real host quick profile: {profile_s:.2f} s wall, {profile_cpu:.2f} s CPU "
            "(once per node and run)"
        )
        print(f"the same report reused from disk (clients.profile_cache): {1e3 * reuse_s:.2f} ms")
    header = (
        "| partitions | local samples | epoch ms (in app) | bare epoch ms | overhead ms "
        "| overhead % | CPU epoch ms | CPU overhead ms | CPU overhead % "
        "| per extra slice ms | slices | decision us | wire serde ms |"
    )
    print()
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    rows = []
    for k in args.partitions:
        r = run(k, args.reps)
        rows.append(r)
        print(
            f"| {k} | {r['local samples']:.0f} | {1e3 * r['epoch s']:.2f} "
            f"| {1e3 * r['bare epoch s']:.2f} | {1e3 * r['overhead s']:.2f} "
            f"| {100 * r['overhead s'] / r['epoch s']:.1f} "
            f"| {1e3 * r['cpu epoch s']:.2f} | {1e3 * r['cpu overhead s']:.2f} "
            f"| {100 * r['cpu overhead s'] / r['cpu epoch s']:.1f} "
            f"| {1e3 * r['per slice s']:.2f} | {r['slices']:.0f} "
            f"| {1e6 * r['decision s']:.1f} | {1e3 * r['serde s']:.3f} |"
        )
    rss_data = psutil.Process().memory_info().rss
    if profile_s == profile_s:
        print()
        print("profile amortised (once per node and run), CPU time, % of an epoch per round:")
        for k, r in zip(args.partitions, rows, strict=True):
            budget = 0.05 * r["cpu epoch s"] - r["cpu overhead s"]
            rounds = profile_cpu / budget if budget > 0 else float("inf")
            print(
                f"- {k} partition(s): {100 * profile_cpu / args.rounds / r['cpu epoch s']:.0f} % "
                f"over {args.rounds} rounds; total overhead <= 5 % after {rounds:.0f} rounds"
            )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB on Linux
    load1 = os.getloadavg()
    print()
    print(
        f"RSS after importing torch + flwr + clients: {RSS_AFTER_IMPORT / 2**20:.0f} MiB; "
        f"after data and all runs: {rss_data / 2**20:.0f} MiB; peak RSS (ru_maxrss): "
        f"{peak:.0f} MiB (the host profile allocates its own buffers)"
    )
    print(f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
