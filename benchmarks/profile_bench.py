"""Benchmark of ``flower-edge profile`` (issue 2's figures).

Runs the profile command in fresh processes, as a user would:

* quick mode ``--runs`` times: wall time of the whole command and the report's
  ``elapsed_seconds`` (target <= 3 s), peak RSS of the process;
* full mode ``--runs`` times back to back: wall time (target <= 15 s), peak RSS
  (target <= 1.5 GiB), and the coefficient of variation (sample stdev / mean) of each
  resource's evaluation N (target <= 10 % on a quiet machine).

The load average is recorded before and after every run; the figures mean little on a host
that others are loading, so read them next to it.

Usage::

    .venv/bin/python benchmarks/profile_bench.py [--runs 5] [--disk-dir PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

RESOURCES = ("cpu", "gpu", "memory", "disk")


def run_once(mode: str, disk_dir: str | None) -> dict[str, Any]:
    """Run one profile in a fresh process; return its report, wall time, peak RSS, loads."""
    cmd = [sys.executable, "-m", "flower_edge.cli", "profile", "--json"]
    if mode == "quick":
        cmd.append("--quick")
    if disk_dir:
        cmd += ["--disk-dir", disk_dir]
    load_before = os.getloadavg()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    report = json.loads(out)
    return {
        "report": report,
        "wall": wall,
        "elapsed": report["elapsed_seconds"],
        "peak_rss_mib": usage.ru_maxrss / 1024,  # kilobytes on Linux
        "cpu": usage.ru_utime + usage.ru_stime,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def cv(values: list[float]) -> float:
    """Coefficient of variation (sample stdev / mean); 0 for a constant zero series."""
    mean = statistics.fmean(values)
    if mean == 0:
        return 0.0
    return statistics.stdev(values) / mean if len(values) > 1 else 0.0


def fmt_load(load: tuple[float, ...]) -> str:
    return " ".join(f"{v:.2f}" for v in load)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--disk-dir", default=None)
    parser.add_argument("--out", default=None, help="also write the markdown here")
    args = parser.parse_args()

    lines = [
        f"date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}",
        f"host: {os.cpu_count()} cores, {platform.platform()}, load average at start "
        f"{fmt_load(os.getloadavg())}",
        "",
    ]
    print("\n".join(lines), flush=True)
    for mode in ("quick", "full"):
        runs = [run_once(mode, args.disk_dir) for _ in range(args.runs)]
        lines += [
            f"### {mode}: {args.runs} runs back to back",
            "",
            "| run | command wall s | command CPU s | profile elapsed s | peak RSS MiB | N cpu "
            "| N gpu | N memory | N disk | load before | load after |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for i, r in enumerate(runs, 1):
            n = {k: r["report"]["resources"][k]["evaluation"] for k in RESOURCES}
            lines.append(
                f"| {i} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['elapsed']:.2f} | "
                f"{r['peak_rss_mib']:.0f} | "
                + " | ".join(f"{n[k]:.4g}" for k in RESOURCES)
                + f" | {fmt_load(r['load_before'])} | {fmt_load(r['load_after'])} |"
            )
        walls = [r["wall"] for r in runs]
        elapsed = [r["elapsed"] for r in runs]
        rss = [r["peak_rss_mib"] for r in runs]
        cvs = {k: cv([r["report"]["resources"][k]["evaluation"] for r in runs]) for k in RESOURCES}
        lines += [
            "",
            f"- command wall: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s",
            f"- profile elapsed: median {statistics.median(elapsed):.2f} s, "
            f"max {max(elapsed):.2f} s",
            f"- peak RSS: max {max(rss):.0f} MiB",
            "- coefficient of variation of N: "
            + ", ".join(f"{k} {100 * v:.1f} %" for k, v in cvs.items()),
            "",
        ]
        print("\n".join(lines[-(args.runs + 10) :]), flush=True)
    text = "\n".join(lines)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
