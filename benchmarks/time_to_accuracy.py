"""Time to accuracy (virtual seconds), ablations and scale of the simulations.

Parts (``--part``):

main
    Every strategy in ``--strategies`` on ``--scenario`` for every seed: time to the
    scenario's target accuracy, final accuracy, virtual time, wasted compute.
ablations
    The edge strategy with one seed mechanism off at a time, same devices and data
    (:data:`MECHANISM_ABLATIONS`): equal shares (no profile, no rebalancing), no rebalancing,
    constant weights (no decay), no leave-one-out values, no abandoning (``theta = inf``),
    no convergence stop. ``--ablations`` picks others of :data:`ABLATIONS`.
baselines
    FedBuff's server learning rate and FedAsync's alpha swept (``--baseline-settings``), so
    that the baselines run at their best settings.
scale
    One edge run of ``--scale-clients`` clients and ``--scale-rounds`` aggregations through
    Flower's simulation engine (Ray, ``--cpus`` CPUs): wall time and peak memory of the
    whole process tree (driver and Ray workers), sampled every 0.5 s.

Every run is appended as one JSON line to ``--jsonl`` as soon as it ends (a run cut short
by a deadline loses nothing that finished), and the medians over seeds are printed as
Markdown at the end. ``--engine inprocess`` (the default for main and ablations) runs the
same apps without Ray: the history of a seed is the same on both engines
(``tests/test_sim_app.py``), only the wall time differs.

Example::

    python benchmarks/time_to_accuracy.py --part main --seeds 0 1 2 --jsonl out/tta.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from simulations.app import SimSettings
from simulations.report import RunResult
from simulations.runner import run_experiment

ABLATIONS: dict[str, dict[str, Any]] = {
    "edge": {},
    # one seed mechanism off at a time (issue 10's ablation table)
    "edge-no-shares": {"shares": "uniform"},  # equal shares: no profile, no rebalancing
    "edge-no-rebalancing": {"post": {"rebalance": "off"}},  # match-ratio shares kept fixed
    "edge-no-decay": {"decay": "constant"},  # weights c_i only
    "edge-no-values": {"post": {"valuation": "off"}},  # no leave-one-out, neutral values sent
    "edge-no-abandon": {"theta": math.inf},  # the abandon rule never fires
    "edge-no-stop": {"post": {"stop": "off"}},  # the round budget only
    # the project's additions that use a seed mechanism (the leave-one-out values)
    "edge-no-drop": {"post": {"drop_worst": False}},  # every update aggregated
    "edge-no-serve-better": {"post": {"serve_better": False}},  # always the average served
    "edge-no-step-search": {"post": {"step_search": ()}},  # one step, as the seed
    # earlier explorations
    "edge-uniform-shares": {"shares": "uniform"},
    "edge-abandon-theta-0.15": {"theta": 0.15},
    "edge-abandon-theta-0.05": {"theta": 0.05},
    "edge-constant-weights": {"decay": "constant"},
    "edge-seed-rule": {"aggregate": "models", "server_lr": 1.0},
    "edge-deltas-lr-1": {"server_lr": 1.0},
}
"""Ablations: ``SimSettings`` options, and under ``"post"`` changes made to the built strategy."""

#: the ablations of issue 10's table, one seed mechanism off in each
MECHANISM_ABLATIONS: tuple[str, ...] = (
    "edge-no-shares",
    "edge-no-rebalancing",
    "edge-no-decay",
    "edge-no-values",
    "edge-no-abandon",
    "edge-no-stop",
)

#: settings of the baselines other than their defaults, by label (``--baseline-settings``)
BASELINE_SETTINGS: dict[str, tuple[str, dict[str, float]]] = {
    "fedbuff-lr-0.5": ("fedbuff", {"server_lr": 0.5}),
    "fedbuff-lr-2": ("fedbuff", {"server_lr": 2.0}),
    "fedbuff-lr-3": ("fedbuff", {"server_lr": 3.0}),
    "fedasync-alpha-0.3": ("fedasync", {"alpha": 0.3}),
    "fedasync-alpha-0.9": ("fedasync", {"alpha": 0.9}),
}


def _post_build(post: dict[str, Any]) -> Any:
    """Return a ``build_strategy`` that changes the built strategy as ``post`` says."""
    from strategies.config import StopConfig

    module: Any = sys.modules[run_server_module()]
    original = getattr(module, "_original_build_strategy", module.build_strategy)
    module._original_build_strategy = original

    def build(settings: SimSettings, clock: Any) -> Any:
        strategy = original(settings, clock)
        for key, value in post.items():
            if key == "rebalance":
                strategy.shares = replace(strategy.shares, rebalance=value)
            elif key == "valuation":
                drop = strategy.valuation.drop_worst and value == "loo"
                strategy.valuation = replace(strategy.valuation, mode=value, drop_worst=drop)
            elif key in ("drop_worst", "step_search"):
                strategy.valuation = replace(strategy.valuation, **{key: value})
            elif key == "stop":
                strategy.stop = StopConfig()
            else:
                setattr(strategy, key, value)
        return strategy

    return build


def run_server_module() -> str:
    """Return the name of the module whose ``run_server`` calls ``build_strategy``."""
    import simulations.app as sim_app

    return str(sim_app.run_server.__module__)


def _with_post(post: dict[str, Any] | None) -> None:
    module: Any = sys.modules[run_server_module()]
    original = getattr(module, "_original_build_strategy", None)
    if post:
        module.build_strategy = _post_build(post)
    elif original is not None:
        module.build_strategy = original


def _row(label: str, r: RunResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    row = {
        "label": label,
        "scenario": r.scenario,
        "strategy": r.strategy,
        "seed": r.seed,
        "clients": r.clients,
        "rounds": r.rounds,
        "target_accuracy": r.target_accuracy,
        "time_to_target": r.time_to_target,
        "final_accuracy": r.final_accuracy,
        "best_accuracy": max(h.accuracy for h in r.history),
        "virtual_seconds": r.virtual_seconds,
        "abandoned_jobs": r.abandoned_jobs,
        "wasted_compute_fraction": r.wasted_compute_fraction,
        "wall_seconds": r.wall_seconds,
        "iteration_makespan": r.extras.get("iteration_makespan"),
        "job_balance": r.extras.get("job_balance"),
        "samples_processed": r.extras.get("samples_processed"),
        "dropped_updates": r.extras.get("dropped_updates"),
        "served_global": r.extras.get("served_global"),
        "abandon": dict(getattr(r, "abandon", {}) or {}),
        "description": getattr(r, "description", ""),
        "load_average": os.getloadavg(),
        "curve": [[round(h.virtual_time, 4), round(h.accuracy, 4)] for h in r.history],
    }
    if extra:
        row.update(extra)
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


def _emit(path: Path | None, row: dict[str, Any]) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if path is not None:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _settings(args: argparse.Namespace, strategy: str, seed: int, **options: Any) -> SimSettings:
    s = SimSettings.create(args.scenario, strategy, seed=seed, clients=args.clients, **options)
    if args.budget_fraction != 1.0:
        rounds = max(1, round(s.rounds * args.budget_fraction))
        s = replace(s, rounds=rounds)
    return s


def part_main(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for seed in args.seeds:
        for strategy in args.strategies:
            r = run_experiment(_settings(args, strategy, seed), engine=args.engine, cpus=args.cpus)
            rows.append(_row(strategy, r))
            _emit(args.jsonl, rows[-1])
    return rows


def part_ablations(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    wanted = args.ablations or list(MECHANISM_ABLATIONS)
    for seed in args.seeds:
        for label, options in ABLATIONS.items():
            if label == "edge" and not args.rerun_edge:
                continue
            if label not in wanted and label != "edge":
                continue
            options = dict(options)
            post = options.pop("post", None)
            _with_post(post)
            try:
                s = _settings(args, "edge", seed, **options)
                r = run_experiment(s, engine=args.engine, cpus=args.cpus)
            finally:
                _with_post(None)
            rows.append(_row(label, r))
            _emit(args.jsonl, rows[-1])
    return rows


def part_baselines(args: argparse.Namespace) -> list[dict[str, Any]]:
    """FedBuff's server lr and FedAsync's alpha, swept (``--baseline-settings``)."""
    rows = []
    for seed in args.seeds:
        for label in args.baseline_settings:
            strategy, post = BASELINE_SETTINGS[label]
            _with_post(post)
            try:
                r = run_experiment(
                    _settings(args, strategy, seed), engine=args.engine, cpus=args.cpus
                )
            finally:
                _with_post(None)
            rows.append(_row(label, r, {"setting": post}))
            _emit(args.jsonl, rows[-1])
    return rows


class _PeakMemory:
    """Peak resident memory of this process and all its children (Ray workers), sampled."""

    def __init__(self, interval: float = 0.5) -> None:
        import psutil

        self.proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import psutil

        while not self._stop.is_set():
            total = 0
            for p in [self.proc, *self.proc.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def part_scale(args: argparse.Namespace) -> list[dict[str, Any]]:
    s = SimSettings.create(
        args.scenario,
        "edge",
        seed=args.seeds[0],
        clients=args.scale_clients,
        rounds=args.scale_rounds,
    )
    with _PeakMemory() as mem:
        r = run_experiment(s, engine=args.scale_engine, cpus=args.cpus)
    row = _row(
        "scale",
        r,
        {"engine": args.scale_engine, "peak_rss_mib": mem.peak / 2**20, "cpus": args.cpus},
    )
    _emit(args.jsonl, row)
    return [row]


def _median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _median_time(values: list[float | None]) -> float | None:
    """Median time to target over seeds, a seed that never reached it counting as never.

    ``None`` when more than half of the seeds never reached it (the median is then "never").
    """
    if not values:
        return None
    median = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(median) else median


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def summarise(rows: list[dict[str, Any]]) -> str:
    """Return a Markdown table of medians over seeds, per label."""
    labels = list(dict.fromkeys(r["label"] for r in rows))
    base = _median_time([r["time_to_target"] for r in rows if r["label"] == "fedavg"])
    lines = [
        "| run | seeds | reached | median t→target (virtual s; never = ∞) | vs FedAvg | "
        "final acc | best acc | wasted | abandoned | makespan (s) | balance | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in labels:
        rs = [r for r in rows if r["label"] == label]
        ttt = _median_time([r["time_to_target"] for r in rs])
        reached = sum(r["time_to_target"] is not None for r in rs)
        ratio = ttt / base if ttt is not None and base else None
        lines.append(
            f"| {label} | {len(rs)} | {reached}/{len(rs)} | {_fmt(ttt)} | {_fmt(ratio, '.2f')} | "
            f"{_fmt(_median([r['final_accuracy'] for r in rs]), '.3f')} | "
            f"{_fmt(_median([r['best_accuracy'] for r in rs]), '.3f')} | "
            f"{_fmt(_median([r['wasted_compute_fraction'] for r in rs]), '.3f')} | "
            f"{_fmt(_median([r['abandoned_jobs'] for r in rs]), '.0f')} | "
            f"{_fmt(_median([r['iteration_makespan'] for r in rs]), '.2f')} | "
            f"{_fmt(_median([r['job_balance'] for r in rs]), '.1f')} | "
            f"{_fmt(_median([r['wall_seconds'] for r in rs]))} |"
        )
    return "\n".join(lines)


def _retarget(row: dict[str, Any], target: float) -> dict[str, Any]:
    hit = next((t for t, acc in row["curve"] if acc >= target), None)
    return {**row, "target_accuracy": target, "time_to_target": hit}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--part", choices=["main", "ablations", "baselines", "scale", "all"], default="all"
    )
    p.add_argument("--scenario", default="mnist1d-100")
    p.add_argument("--clients", type=int, default=None)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--strategies", nargs="+", default=["edge", "fedavg", "fedbuff"])
    p.add_argument("--engine", choices=["ray", "inprocess"], default="inprocess")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument(
        "--budget-fraction",
        type=float,
        default=1.0,
        help="fraction of the scenario's update budget to run",
    )
    p.add_argument(
        "--rerun-edge",
        action="store_true",
        help="ablations: run the plain edge strategy again (else take it from main)",
    )
    p.add_argument(
        "--ablations",
        nargs="+",
        default=None,
        choices=list(ABLATIONS),
        help="ablations to run (default: one per seed mechanism)",
    )
    p.add_argument(
        "--baseline-settings",
        nargs="+",
        default=list(BASELINE_SETTINGS),
        choices=list(BASELINE_SETTINGS),
        help="baselines: the settings to sweep",
    )
    p.add_argument("--scale-clients", type=int, default=100)
    p.add_argument("--scale-rounds", type=int, default=200)
    p.add_argument("--scale-engine", choices=["ray", "inprocess"], default="ray")
    p.add_argument("--jsonl", type=Path, default=None, help="append one JSON line per run")
    p.add_argument(
        "--summarise",
        type=Path,
        default=None,
        help="only print the Markdown summary of an existing JSONL file",
    )
    p.add_argument(
        "--target",
        type=float,
        default=None,
        help="with --summarise: time to this accuracy instead (rows with a curve)",
    )
    args = p.parse_args(argv)
    if args.summarise is not None:
        saved = [json.loads(x) for x in args.summarise.read_text().splitlines() if x.strip()]
        if args.target is not None:
            saved = [_retarget(r, args.target) for r in saved if "curve" in r]
        print(summarise([r for r in saved if r["label"] != "scale"]))
        return 0
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()}",
        file=sys.stderr,
    )
    rows: list[dict[str, Any]] = []
    if args.part in ("main", "all"):
        rows += part_main(args)
    if args.part in ("ablations", "all"):
        if not args.rerun_edge and args.part == "all":
            args.rerun_edge = not any(r["label"] == "edge" for r in rows)
        rows += part_ablations(args)
    if args.part == "baselines":
        rows += part_baselines(args)
    if args.part in ("scale", "all"):
        rows += part_scale(args)
    print(summarise([r for r in rows if r["label"] != "scale"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
