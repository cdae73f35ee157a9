"""Soak test of EdgeStrategy: many clients, random crashes and silences, hundreds of aggregations.

Runs ``EdgeStrategy.start`` on :class:`strategies.InProcessGrid` with a manual clock (waits cost
nothing, so 500 aggregations take a minute or two) and numpy clients that speak flower-edge's
wire protocol (``tests/fault_clients.py``). Every time an aggregation happens, the nodes that
were down come back (crashed ones restart with an empty state, silent ones answer again) and a
fresh random ``--fault-rate`` of the nodes goes down: half crash (unregistered; their queued
replies are lost), half go silent (registered, but swallow every message).

Checks (exit status 1 if any fails):

- the server never stops: ``--rounds`` aggregations, stop reason "round budget";
- every accepted update is counted exactly once: the audit log has no (node, job) twice,
  ``K + 1`` updates per round, rounds 1..N once each, and every update the strategy accepted
  ("finished" events) is in the audit, except those still buffered when the run ended;
- memory after warm-up grows by at most ``--max-growth`` (RSS, sampled every few rounds).

Usage: ``.venv/bin/python benchmarks/soak.py [--clients 100] [--rounds 500] [--json FILE]``
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fault_clients import ScriptedClock  # noqa: E402
from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)

from flower_edge import wire  # noqa: E402
from strategies import CheckpointStore, EdgeStrategy, InProcessGrid, LoopConfig  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--rounds", type=int, default=500, help="aggregations")
    p.add_argument("--threshold", type=int, default=10, help="K (aggregate when > K updates)")
    p.add_argument("--fault-rate", type=float, default=0.2, help="share of nodes down per round")
    p.add_argument("--model-size", type=int, default=20_000, help="float32 parameters")
    p.add_argument("--warmup", type=int, default=50, help="aggregations before the baseline")
    p.add_argument("--max-growth", type=float, default=0.10, help="allowed RSS growth")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the figures here")
    p.add_argument(
        "--drop-events",
        action="store_true",
        help="diagnostic: empty strategy.events every 10 aggregations (after counting them), "
        "to show how much of the growth is that per-message event list",
    )
    args = p.parse_args(argv)
    if args.clients < 2 or not 1 <= args.threshold < args.clients:
        p.error("need --clients >= 2 and 1 <= --threshold < --clients")
    if not 0 <= args.fault_rate < 1:
        p.error("--fault-rate must be in [0, 1)")
    return args


def make_client(size: int, seed: int) -> Callable[[Message, Context], Message]:
    """Return a client that moves the model 10% towards a fixed target, plus noise."""
    target = np.random.default_rng(seed).normal(size=size).astype(np.float32)

    def app(msg: Message, context: Context) -> Message:
        rng = np.random.default_rng([seed, context.node_id, int(msg.metadata.message_id[3:])])
        if msg.metadata.message_type == wire.PROFILE_MESSAGE_TYPE or (
            wire.PROFILE_MODE in msg.content.config_records.get(wire.CONFIG, {})
        ):
            speed = float(rng.uniform(0.5, 2.0))
            rec = ConfigRecord(
                {
                    wire.EVAL_CPU: speed,
                    wire.EVAL_GPU: 0.0,
                    wire.EVAL_MEMORY: float(rng.uniform(0.5, 2.0)),
                    wire.EVAL_DISK: float(rng.uniform(0.5, 2.0)),
                    wire.LOCAL_SAMPLES: 100,
                }
            )
            return Message(RecordDict({wire.PROFILE: rec}), reply_to=msg)
        cfg = msg.content[wire.CONFIG]
        assert isinstance(cfg, ConfigRecord)
        record = msg.content[wire.ARRAYS]
        assert isinstance(record, ArrayRecord)
        x = record["x"].numpy()
        noise = rng.normal(scale=0.01, size=x.shape).astype(np.float32)
        out = x + np.float32(0.1) * (target - x) + noise
        share = int(cfg.get(wire.SAMPLE_SHARE, 0)) or 10
        metrics = MetricRecord(
            {
                wire.NUM_EXAMPLES: share,
                wire.DONE: 1,
                wire.JOB_ID: int(cfg[wire.JOB_ID]),
                wire.BASE_VERSION: int(cfg[wire.GLOBAL_VERSION]),
                wire.SAMPLES_PROCESSED: share,
            }
        )
        arrays = ArrayRecord({"x": Array(out)})
        return Message(RecordDict({wire.ARRAYS: arrays, wire.METRICS: metrics}), reply_to=msg)

    app.target = target  # type: ignore[attr-defined]
    return app


class Chaos:
    """After each aggregation: bring the downed nodes back, take a fresh random share down."""

    def __init__(self, grid: InProcessGrid, nodes: list[int], rate: float, seed: int) -> None:
        self.grid, self.nodes, self.rate = grid, nodes, rate
        self.rng = np.random.default_rng(seed)
        self.crashed: list[int] = []
        self.silent: list[int] = []
        self.seen_rounds = 0
        self.crashes = 0
        self.silences = 0

    def step(self, rounds: int) -> None:
        if rounds == self.seen_rounds:
            return
        self.seen_rounds = rounds
        for node in self.crashed:
            self.grid.restart(node)
        for node in self.silent:
            self.grid.silence(node, False)
        down = self.rng.choice(self.nodes, size=round(self.rate * len(self.nodes)), replace=False)
        half = len(down) // 2
        self.crashed = [int(n) for n in down[:half]]
        self.silent = [int(n) for n in down[half:]]
        for node in self.crashed:
            self.grid.kill(node)
        for node in self.silent:
            self.grid.silence(node)
        self.crashes += len(self.crashed)
        self.silences += len(self.silent)


class SoakClock(ScriptedClock):
    """Manual clock that runs a hook on every wait of the loop."""

    def __init__(self, hook: Callable[[], None]) -> None:
        super().__init__()
        self.hook = hook
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.sleeps += 1
        self.hook()


def rss_mib() -> float:
    return float(psutil.Process().memory_info().rss) / 2**20


def run(args: argparse.Namespace) -> dict[str, Any]:
    nodes = list(range(1001, 1001 + args.clients))
    rng = np.random.default_rng(args.seed + 1)
    speed = {n: float(rng.uniform(1.0, 10.0)) for n in nodes}

    def latency(node: int, msg: Message) -> float:  # seconds of (manual) clock per message
        return speed[node] * float(rng.uniform(0.8, 1.25))

    client = make_client(args.model_size, args.seed)
    samples: list[tuple[int, float]] = []
    strategy_ref: list[EdgeStrategy] = []

    event_counts: Counter[tuple[str, int, int]] = Counter()

    def drain_events() -> None:
        events = strategy_ref[0].events
        event_counts.update((e.kind, e.node_id, e.job_id) for e in events)
        events.clear()

    def hook() -> None:
        rounds = len(strategy_ref[0].history)
        chaos.step(rounds)
        if args.drop_events and rounds % 10 == 0:
            drain_events()
        if rounds and rounds % 10 == 0 and (not samples or samples[-1][0] != rounds):
            gc.collect()
            samples.append((rounds, rss_mib()))

    clock = SoakClock(hook)
    grid = InProcessGrid(client, node_ids=nodes, clock=clock, latency=latency)
    grid.pushed = deque(maxlen=8)  # type: ignore[assignment]  (the test grid keeps every message)
    chaos = Chaos(grid, nodes, args.fault_rate, args.seed + 2)
    target = client.target  # type: ignore[attr-defined]

    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        x = arrays["x"].numpy()
        err = float(np.sqrt(np.mean((x - target) ** 2)))
        return MetricRecord({"accuracy": 1.0 / (1.0 + err), "rmse": err})

    with tempfile.TemporaryDirectory(prefix="soak-") as ckpt:
        strategy = EdgeStrategy(
            threshold=args.threshold,
            clock=clock,
            loop=LoopConfig(deadline=25.0, poll_interval=0.5),
            checkpoint_dir=ckpt,
        )
        strategy_ref.append(strategy)
        initial = ArrayRecord({"x": Array(np.zeros(args.model_size, dtype=np.float32))})
        logging.getLogger("flwr").setLevel(logging.ERROR)  # 500 rounds of INFO lines otherwise
        start_rss = rss_mib()
        t0 = time.perf_counter()
        result = strategy.start(
            grid, initial, num_rounds=args.rounds, timeout=60.0, evaluate_fn=evaluate
        )
        wall = time.perf_counter() - t0
        audit = CheckpointStore(ckpt).audit()

    drain_events()
    pairs = [(int(e["node"]), int(e["job"])) for e in audit]
    per_round = Counter(int(e["round"]) for e in audit)
    finished = Counter(
        (n, j) for (kind, n, j), c in event_counts.items() for _ in range(c) if kind == "finished"
    )
    audited = Counter(pairs)
    not_audited = sum((finished - audited).values())
    kinds: Counter[str] = Counter()
    for (kind, _, _), count in event_counts.items():
        kinds[kind] += count
    warm = [m for r, m in samples if r >= args.warmup]
    base = warm[0] if warm else float("nan")
    growth = (max(warm) - base) / base if warm else float("nan")
    final_metrics = result.evaluate_metrics_serverapp.get(len(strategy.history), {})
    figures: dict[str, Any] = {
        "clients": args.clients,
        "threshold": args.threshold,
        "fault_rate": args.fault_rate,
        "model_size": args.model_size,
        "drop_events": args.drop_events,
        "aggregations": len(strategy.history),
        "wall_seconds": round(wall, 1),
        "clock_seconds": round(clock.real_now(), 1),
        "crashes": chaos.crashes,
        "silences": chaos.silences,
        "events": dict(sorted(kinds.items())),
        "audit_lines": len(audit),
        "audit_duplicates": len(pairs) - len(set(pairs)),
        "audit_rounds_ok": sorted(per_round) == list(range(1, len(strategy.history) + 1))
        and all(c == args.threshold + 1 for c in per_round.values()),
        "audit_extra": sum((audited - finished).values()),
        "accepted_not_audited": not_audited,
        "rss_start_mib": round(start_rss, 1),
        "rss_after_warmup_mib": round(base, 1),
        "rss_max_after_warmup_mib": round(max(warm), 1) if warm else None,
        "rss_end_mib": round(samples[-1][1], 1) if samples else None,
        "rss_growth_after_warmup": round(growth, 4),
        "rss_samples": [(r, round(m, 1)) for r, m in samples],
        "final_rmse": float(final_metrics.get("rmse", float("nan"))),
    }
    checks = {
        "server never stopped": figures["aggregations"] == args.rounds,
        "audit: no update counted twice": figures["audit_duplicates"] == 0,
        "audit: rounds 1..N, K+1 updates each": figures["audit_rounds_ok"],
        "audit: only accepted updates": figures["audit_extra"] == 0,
        "audit: every accepted update except the final buffer": not_audited <= args.threshold,
        f"memory growth after warm-up <= {args.max_growth:.0%}": growth <= args.max_growth,
    }
    figures["checks"] = checks
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    figures = run(args)
    for key, value in figures.items():
        if key not in ("checks", "rss_samples"):
            print(f"{key:28s} {value}")
    print("rss_samples (aggregation, MiB):", figures["rss_samples"])
    ok = True
    for name, passed in figures["checks"].items():
        print(f"{'PASS' if passed else 'FAIL'}  {name}")
        ok = ok and passed
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
