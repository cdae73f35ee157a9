"""Wall-clock benchmark on Flower's real deployment runtime: a SuperLink and 8 SuperNodes.

Everything runs on 127.0.0.1 through the repository's own ``deploy/`` scripts (via
``tests/deploy_harness.py``). One SuperNode is slowed in fact, not by a sleep the profiler
cannot see: a duty-cycle throttle stops its whole process tree (the SuperNode, every
``flwr-clientapp`` process it starts, so its training loop and its profiling probe alike)
with SIGSTOP and lets it run with SIGCONT (``benchmarks/duty_cycle.py``). Since the
twenty-third session the default throttle (``--throttle paced``) holds the CPU rate of the
node's ClientApp processes (its training, its profile's probe, their start-up) at
``1 / slow_factor`` of a busy peer ClientApp's steady rate, after each ClientApp's first
``--grace`` CPU seconds (its start-up, which Flower needs to end in its first task heartbeat
within 30 s). The SuperNode's runtime keeps a peer's speed, as pacing it too broke Flower's
heartbeats (:class:`duty_cycle.PacedThrottle`). Its jobs then take as many times longer as
Flower's runtime allows on one host: 3.8-4.9x the others' in runs 29-30 (each result records
the ratio measured, ``slowdown``). Runs 1-27 used ``--throttle duty``: the
node's whole tree runs for ``1 / slow_factor`` of every 10 ms (100 ms until the twenty-first
session), a CPU 10x slower than a whole core; with 8 nodes sharing 2 cores that made its jobs
only about 2x as long as the others'. The enrollment profile (``--enroll``) rates the node
alone, under the duty cycle in both modes: alone, a peer would have the whole core.

Each strategy (edge, FedBuff, FedAsync, Flower's FedAvg) runs as one ``flwr run`` of
``benchmarks/deploy_app`` on the same SuperNodes, FedAvg first: its wall time becomes the time
budget of the others. Before each run the benchmark waits until no SuperNode runs a ClientApp
any more (the jobs a previous run left out finish first; the wait is recorded as
``idle_wait``), so that no run starts on nodes still busy with another's work; a ClientApp
left hanging by a run that ended as its message was pulled is killed (``orphans_killed``).
A run still going after ``--run-limit`` is stopped and recorded as stalled. The app
measures the per-message overhead of the runtime first (one evaluate message per node) and
picks edge's slice budget from it (:func:`flower_edge.slicing.slice_budget_for_overhead`).

Usage::

    source scripts/env.sh
    nice -n 5 .venv/bin/python benchmarks/real_deployment.py --out /tmp/real.json

Prints one line per strategy and a summary against the targets of issue 12.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, get_args

import psutil

from clients.data import Partitioning

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from deploy_harness import VENV_BIN, Deployment, Proc, RunTimeoutError, deployment  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from deploy_curves import curve_from_log, final_within, job_slowdown, rhythm, time_to  # noqa: E402
from duty_cycle import DutyCycle, PacedThrottle  # noqa: E402

APP = REPO / "benchmarks" / "deploy_app"
RESULT = re.compile(r"REAL-DEPLOYMENT-RESULT (\{.*\})")


def node_id(proc: Proc, timeout: float = 60.0) -> int:
    """Return the SuperNode ID that a SuperNode logged."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.findall(r"SuperNode ID: (\d+)", proc.text())
        if found:
            return int(found[-1])
        time.sleep(0.2)
    raise TimeoutError(f"{proc.name} logged no SuperNode ID within {timeout:.0f} s")


def profile_cpu(throttle: float, cache: Path | None = None) -> dict[str, Any]:
    """Run ``flower-edge profile --quick`` under a throttle; return CPU N and its seconds.

    Under a throttle (``> 1``) the result also holds the throttle's measured run windows
    (``run_windows``, :meth:`duty_cycle.DutyCycle.windows`).

    With ``cache`` the report is also stored there (``--cache``), where the node's ClientApp
    reuses it (node config ``profile-cache``): the node's enrollment.
    """
    with tempfile.TemporaryDirectory() as tmp:
        argv = [str(VENV_BIN / "flower-edge"), "profile", "--quick", "--json", "--disk-dir", tmp]
        argv += [] if cache is None else ["--cache", str(cache)]
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        with DutyCycle(proc.pid, throttle) as duty:
            out, _ = proc.communicate(timeout=900)
        report = json.loads(out)
    rated: dict[str, Any] = {
        "cpu_N": float(report["resources"]["cpu"]["evaluation"]),
        "seconds": time.monotonic() - start,
    }
    if throttle > 1:
        rated["run_windows"] = duty.windows()
    return rated


def clientapp_procs(dep: Deployment) -> list[psutil.Process]:
    """Return the ClientApp processes the SuperNodes are running now."""
    found = []
    for proc in dep.nodes.values():
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            continue
        for child in tree:
            with contextlib.suppress(psutil.Error):
                if any("flwr-clientapp" in part for part in child.cmdline()):
                    found.append(child)
    return found


def _cpu_seconds(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


#: CPU seconds a ClientApp must use to count as working (``wait_idle``): a training one,
#: even on the node throttled 10x, uses far more in ``stuck_after``; an orphan that polls
#: the SuperLink uses about 0.1 % of a core (run 27: one made every wait run out its 180 s)
MIN_PROGRESS = 0.05


def wait_idle(
    dep: Deployment, timeout: float = 180.0, quiet: float = 10.0, stuck_after: float = 30.0
) -> tuple[float, list[int]]:
    """Wait until no SuperNode has run a ClientApp for ``quiet`` s (at most ``timeout`` s).

    A run that ends with jobs out leaves their ClientApp processes training on the nodes;
    without this wait they would take CPU from the first seconds of the next strategy's run.
    The quiet period covers the SuperNode's own work after its ClientApp exits (sending the
    reply, pulling a message still queued): a Flower 1.42 SuperNode that received the next
    run's first message while it was still replying to the previous run lost that message
    (eleventh run, node 6), and FedAvg then waited out its round timeout every round.

    Between runs no ClientApp has anything to wait for, so one whose CPU time has not grown
    by :data:`MIN_PROGRESS` s in ``stuck_after`` s is an orphan and is killed by its pid: a
    SuperNode that pulls a message just as its run ends starts a ClientApp that retries
    ``pull_objects`` for a run the SuperLink no longer serves, for up to Flower's
    ``PULL_MAX_TIME`` of 7,200 s (twelfth run: node 4's, 591 s old, made the next wait run
    out its 180 s; run 27: one that polled at 0.1 % of a core did the same).

    Returns
    -------
    tuple[float, list[int]]
        The seconds waited and the pids of the orphans killed.
    """
    start = time.monotonic()
    idle_since: float | None = None
    progress: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, when last moved)
    killed: list[int] = []
    while time.monotonic() - start < timeout:
        now = time.monotonic()
        apps = clientapp_procs(dep)
        for app in apps:
            cpu = _cpu_seconds(app)
            if cpu is None:
                continue
            seen = progress.get(app.pid)
            if seen is None or cpu >= seen[0] + MIN_PROGRESS:
                progress[app.pid] = (cpu, now)
            elif now - seen[1] >= stuck_after:
                with contextlib.suppress(psutil.Error):
                    app.kill()
                killed.append(app.pid)
                progress.pop(app.pid)
        if apps:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        elif now - idle_since >= quiet:
            break
        time.sleep(0.5)
    return time.monotonic() - start, killed


def enroll(configs: list[dict[str, object]], folder: Path, slow_factor: float) -> list[Any]:
    """Rate each node in turn into its own profile folder; point its node config at it.

    The last node (the one the benchmark slows) is rated under the same throttle. Returns
    per node the CPU N and the seconds its profile took (not part of any strategy's time).
    """
    done = []
    for index, config in enumerate(configs):
        cache = folder / f"node-{index}"
        throttle = slow_factor if index == len(configs) - 1 else 1.0
        rated = profile_cpu(throttle, cache)
        config["profile-cache"] = str(cache)
        done.append({"node": index, "throttle": throttle, **rated})
        windows = rated.get("run_windows")
        note = (
            ""
            if windows is None or not windows["count"]
            else f" (run windows: median {windows['median'] * 1e3:.1f} ms, longest "
            f"{windows['max'] * 1e3:.1f} ms, target {windows['target'] * 1e3:.1f} ms; "
            f"{'boosted' if windows['boosted'] else 'not boosted'})"
        )
        print(
            f"enrolled node {index}: CPU N {rated['cpu_N']:.1f} in {rated['seconds']:.1f} s" + note
        )
    return done


def rotated(names: list[str], shift: int) -> list[str]:
    """``names`` with FedAvg first and the others rotated by ``shift`` (spreads drift)."""
    rest = [n for n in names if n != "fedavg"]
    if rest:
        k = shift % len(rest)
        rest = rest[k:] + rest[:k]
    return (["fedavg"] if "fedavg" in names else []) + rest


def run_strategy(
    dep: Deployment, name: str, config: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """Run one strategy with ``flwr run`` and return its parsed result line."""
    start = time.monotonic()
    log = dep.run_app(APP, {"strategy": name, **config}, timeout=timeout)
    found = RESULT.findall(log)
    if not found:
        raise RuntimeError(f"{name}: no result line:\n{log[-4000:]}")
    result: dict[str, Any] = json.loads(found[-1])
    result["submit_to_end"] = time.monotonic() - start
    shares = re.findall(r"shares (\{[^}]*\})", log)
    result["shares_log"] = shares[:2]
    return result


def stalled_result(
    name: str, err: RunTimeoutError, limit: float, overhead: float
) -> dict[str, Any]:
    """The record of a run stopped at the benchmark's ``--run-limit``.

    Its curve holds the aggregations the log shows (FedAvg prints none); the repeat it
    belongs to is left out of the medians (:func:`median_verdicts`).
    """
    return {
        "strategy": name,
        "stalled": True,
        "run_id": err.run_id,
        "wall": limit,
        "curve": curve_from_log(err.log),
        "overhead": overhead,
        "slice_budget": None,
        "events": {},
    }


def summary_line(name: str, res: dict[str, Any], target: float, first: int = 4) -> str:
    """One line per strategy: wall time, aggregations, time to target, last accuracy, and
    with a job timeline its rhythm (:func:`rhythm`)."""
    curve = res["curve"]
    reached = time_to(curve, target)
    stalled = "  STALLED at the run limit, stopped" if res.get("stalled") else ""
    killed = res.get("orphans_killed") or []
    orphans = f" ({len(killed)} orphaned ClientApp killed before it)" if killed else ""
    pace = ""
    if res.get("timeline"):
        nth, gap = rhythm(res["timeline"], curve, first)
        pace = "  reply {} of the first wave {}  gap to the next job {}".format(
            first,
            "none" if nth is None else f"{nth:.1f} s",
            "none" if gap is None else f"{gap:.2f} s",
        )
    slowdown = res.get("slowdown")
    if slowdown:
        pace += "  slowed node's jobs {:.1f} s, the others' {:.1f} s ({:.1f}x)".format(
            slowdown["slow_job"], slowdown["other_job"], slowdown["ratio"]
        )
    return (
        f"{name:14s} wall {res['wall']:6.1f} s  aggregations {len(curve):3d}  "
        f"time to {target}: {'never' if reached is None else f'{reached:.1f} s'}  "
        f"last {curve[-1][1] if curve else math.nan:.4f}  "
        f"overhead {res['overhead']:.1f} s  slice {res['slice_budget']}  events {res['events']}"
        f"  idle wait {res.get('idle_wait', 0.0):.1f} s{pace}{orphans}{stalled}"
    )


def verdicts(results: dict[str, dict[str, Any]], target: float) -> list[str]:
    """Check the targets of issue 12 and return one line per target.

    A stalled run (stopped at ``--run-limit``) is named first: its figures are those of the
    part that ran, and a stalled FedAvg's wall time is the limit, not a round's end.
    """
    t = {k: time_to(v["curve"], target) for k, v in results.items()}
    budget = float(results["fedavg"]["wall"]) if "fedavg" in results else math.inf
    final = {k: final_within(v["curve"], budget) for k, v in results.items()}
    stalled = sorted(k for k, v in results.items() if v.get("stalled"))
    head = [f"stalled (stopped at the run limit): {', '.join(stalled)}"] if stalled else []
    return head + verdict_lines(t, final, target)


def median_verdicts(runs: dict[str, list[dict[str, Any]]], target: float) -> list[str]:
    """The targets of issue 12 on the medians over repeats (never reaching counts as never).

    Each repeat's final accuracy is read within that repeat's FedAvg wall time. A repeat in
    which any strategy stalled (stopped at ``--run-limit``) is left out of every median, so
    that all medians are over the same repeats; the lines say how many were left out.
    """
    t: dict[str, float | None] = {}
    final: dict[str, float] = {}
    repeats = min(len(v) for v in runs.values())
    kept = [r for r in range(repeats) if not any(v[r].get("stalled") for v in runs.values())]
    left = repeats - len(kept)
    head = f"median over {len(kept)} repeats" + (f" ({left} stalled, left out)" if left else "")
    if not kept:
        return [f"{head}: no repeat finished without a stall"]
    budgets = {r: float(runs["fedavg"][r]["wall"]) if "fedavg" in runs else math.inf for r in kept}
    for name, results in runs.items():
        times = [time_to(results[r]["curve"], target) for r in kept]
        mid = statistics.median([math.inf if x is None else x for x in times])
        t[name] = None if math.isinf(mid) else mid
        final[name] = statistics.median(final_within(results[r]["curve"], budgets[r]) for r in kept)
    return [f"{head}: {line}" for line in verdict_lines(t, final, target)]


def verdict_lines(t: dict[str, float | None], final: dict[str, float], target: float) -> list[str]:
    """One line per target of issue 12, from times to ``target`` and final accuracies."""
    lines = []

    def ratio(a: str, b: str, bound: float) -> None:
        if a not in t or b not in t:
            return
        ta, tb = t[a], t[b]
        if ta is None:
            lines.append(f"{a} <= {bound}x {b} time to {target}: NOT MET ({a} never reached it)")
        elif tb is None:
            lines.append(f"{a} <= {bound}x {b} time to {target}: MET ({b} never reached it)")
        else:
            verdict = "MET" if ta <= bound * tb else "NOT MET"
            lines.append(f"{a} <= {bound}x {b} time to {target}: {verdict} ({ta / tb:.2f}x)")

    ratio("edge", "fedavg", 0.5)
    ratio("edge", "fedbuff", 0.9)
    ratio("edge-noprofile", "fedavg", 0.5)
    ratio("edge-noprofile", "fedbuff", 0.9)
    for edge in ("edge", "edge-noprofile"):
        if edge in final and "fedavg" in final:
            gap = final["fedavg"] - final[edge]
            verdict = "MET" if gap <= 0.01 else "NOT MET"
            lines.append(
                f"{edge} final within 1 point of fedavg: {verdict} "
                f"({final[edge]:.4f} vs {final['fedavg']:.4f})"
            )
    return lines


def reanalyze(workdir: Path, target: float) -> dict[str, dict[str, Any]]:
    """Rebuild every run's curve from the logs of a finished benchmark in ``workdir``.

    FedAvg's curve is its result line (one evaluation per round); the asynchronous
    strategies' curves are their round lines (:func:`curve_from_log`).
    """
    results: dict[str, dict[str, Any]] = {}
    for path in sorted(workdir.glob("flwr-run-*.log")):
        log = path.read_text(encoding="utf-8", errors="replace")
        found = RESULT.findall(log)
        if not found:
            continue
        res: dict[str, Any] = json.loads(found[-1])
        if res["strategy"] != "fedavg":
            res["curve"] = curve_from_log(log)
        results[res["strategy"]] = res
    return results


def _at_least_one(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the command line of the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--slow-factor", type=float, default=10.0)
    parser.add_argument(
        "--throttle",
        choices=("paced", "duty"),
        default="paced",
        help="paced: the slowed node's ClientApps get 1/slow-factor of a busy peer's CPU rate "
        "after their --grace (runs 29-30: its jobs took 3.8-4.9x the others'); duty (runs "
        "1-27): its whole tree runs 1/slow-factor of the time (about 2x the others' jobs)",
    )
    parser.add_argument("--strategies", default="fedavg,edge,fedbuff,fedasync")
    parser.add_argument("--fedavg-rounds", type=int, default=6)
    parser.add_argument("--budget", type=float, default=0.0, help="s; 0 = FedAvg's wall time")
    parser.add_argument("--threshold", type=int, default=3)
    parser.add_argument("--local-epochs", type=int, default=5)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument(
        "--partitioning",
        choices=get_args(Partitioning),
        default="iid",
        help="the nodes' digits split (runs 1-24: iid); dirichlet is label-skewed",
    )
    parser.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration")
    parser.add_argument(
        "--min-epochs", type=float, default=0.0, help="edge: ShareConfig.min_epochs; 0 = none"
    )
    parser.add_argument("--slice-budget", type=float, default=-1.0, help="< 0: from overhead")
    parser.add_argument("--profile-check", action="store_true", help="profile CPU N 1x vs slow")
    parser.add_argument(
        "--enroll",
        action="store_true",
        help="rate each node once before its SuperNode starts (flower-edge profile --quick "
        "--cache, one node at a time, the slowed one under its throttle); the nodes' "
        "ClientApps answer the profile request from that report (node config profile-cache)",
    )
    parser.add_argument(
        "--run-limit",
        type=float,
        default=900.0,
        help="s; a strategy's run still going after this long is stopped (flwr stop) and "
        "recorded as stalled, and the benchmark goes on; its repeat is left out of the medians",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=1.5,
        help="paced: CPU seconds of each ClientApp left unpaced, its start-up up to its "
        "first task heartbeat (Flower revokes a task whose heartbeat is 30 s late)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=180.0,
        help="s; the longest wait before a run for the previous run's jobs to finish (a job "
        "of the node slowed 10x by the paced throttle can take minutes)",
    )
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--reanalyze", type=Path, default=None, help="workdir of a past run")
    parser.add_argument(
        "--repeats",
        type=_at_least_one,
        default=1,
        help="run the strategies this many times, FedAvg "
        "first each time and the others in rotated order; verdicts on the medians",
    )
    return parser


def print_reanalysis(args: argparse.Namespace) -> None:
    """Print (and with ``--out`` store) the verdicts rebuilt from a past run's logs."""
    found = reanalyze(args.reanalyze, args.target)
    for name, res in found.items():
        print(summary_line(name, res, args.target, args.threshold + 1))
    for line in verdicts(found, args.target):
        print(line)
    if args.out:
        args.out.write_text(json.dumps({"results": found}, indent=1, sort_keys=True))


def exit_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit(143)``, so that the deployment and the throttle unwind.

    Without it a SIGTERM ended the script at once: the SuperLink, the SuperNodes and their
    SuperExecs stayed up, and the throttled node's processes stayed stopped (SIGSTOP).
    """

    def _exit(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    exit_on_sigterm()
    if args.reanalyze is not None:
        print_reanalysis(args)
        return 0
    names = [s.strip() for s in args.strategies.split(",") if s.strip()]
    record: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}

    if args.profile_check:
        record["profile"] = {
            "normal": profile_cpu(1.0),
            "throttled": profile_cpu(args.slow_factor),
        }
        print("profile (quick) CPU N:", json.dumps(record["profile"]), flush=True)

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="real-deployment-"))
    results: dict[str, dict[str, Any]] = {}
    t_start = time.monotonic()
    with deployment(workdir) as dep:
        dep.start_superlink()
        configs: list[dict[str, object]] = [
            {"partition-id": i, "num-partitions": args.nodes} for i in range(args.nodes)
        ]
        if args.enroll:
            record["enrollment"] = enroll(configs, workdir / "enrolled", args.slow_factor)
        dep.start_supernodes(configs, timeout=180)
        slow = dep.nodes[args.nodes - 1]
        record["slow_node"] = node_id(slow)
        print(f"{args.nodes} SuperNodes up; slowed {args.slow_factor}x: {record['slow_node']}")
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        peers = [proc.pid for index, proc in dep.nodes.items() if index != args.nodes - 1]
        throttle = (
            PacedThrottle(
                slow.pid, peers, args.slow_factor, match="flwr-clientapp", grace=args.grace
            )
            if args.throttle == "paced"
            else DutyCycle(slow.pid, args.slow_factor)
        )
        with throttle as duty:
            budget = args.budget
            overhead = -1.0  # measured by the first run, passed on to the others
            plan = [(r, name) for r in range(args.repeats) for name in rotated(names, r)]
            for repeat, name in plan:
                config: dict[str, Any] = {
                    "num-server-rounds": args.fedavg_rounds,
                    "threshold": args.threshold,
                    "min-nodes": args.nodes,
                    "slice-budget": args.slice_budget,
                    "time-budget": budget,
                    "overhead": overhead,
                    "local-epochs": args.local_epochs,
                    "partitioning": args.partitioning,
                    "dirichlet-alpha": args.alpha,
                    "min-epochs": args.min_epochs,
                }
                # the previous run's jobs still out finish first; its orphans are killed
                idle, orphans = wait_idle(dep, timeout=args.idle_timeout)
                try:
                    res = run_strategy(dep, name, config, timeout=args.run_limit)
                except RunTimeoutError as err:  # recorded; the other strategies and repeats go on
                    res = stalled_result(name, err, args.run_limit, overhead)
                res["idle_wait"] = idle
                res["orphans_killed"] = orphans
                res["repeat"] = repeat
                res["slowdown"] = job_slowdown(res.get("timeline") or [], record["slow_node"])
                runs[name].append(res)
                results.setdefault(name, res)  # the first repeat, as a single run records it
                overhead = float(res["overhead"])
                if name == "fedavg" and budget <= 0 and not res.get("stalled"):
                    budget = float(res["wall"])
                print(
                    f"[repeat {repeat + 1}] "
                    + summary_line(name, res, args.target, args.threshold + 1),
                    flush=True,
                )
        record["slow_node_run_windows"] = duty.windows()
        if isinstance(duty, PacedThrottle):
            # every 20th sample (10 s): time, reference, paced ClientApps, CPU used, earned
            record["slow_node_pace"] = [list(row) for row in list(duty.trace)[::20]]
    record["results"] = results
    record["verdicts"] = verdicts(results, args.target)
    if args.repeats > 1:
        record["runs"] = runs
        record["verdicts_per_repeat"] = [
            verdicts({k: v[r] for k, v in runs.items()}, args.target) for r in range(args.repeats)
        ]
        record["verdicts"] = median_verdicts(runs, args.target)
        for r, lines in enumerate(record["verdicts_per_repeat"]):
            print(f"repeat {r + 1}: " + "; ".join(lines))
    record["total_seconds"] = time.monotonic() - t_start
    for line in record["verdicts"]:
        print(line)
    print(f"total {record['total_seconds']:.0f} s; logs in {workdir}")
    if args.out:
        args.out.write_text(json.dumps(record, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    raise SystemExit(main())
