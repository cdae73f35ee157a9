"""The options of ``flower-edge simulate``: its argument parser.

:func:`build_parser` registers the sub-command's options (:mod:`simulations.cli` adds its
``run``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["build_parser"]


def build_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``simulate`` sub-command and its options; return its parser."""
    from simulations.scenarios import ENGINES, SCENARIOS, STRATEGIES

    p: argparse.ArgumentParser = subparsers.add_parser(
        "simulate",
        help="simulate heterogeneous edge devices with Flower's simulation engine",
        description=(
            "Run a scenario on virtual edge devices through Flower's simulation engine and "
            "report time to the target accuracy in virtual seconds."
        ),
    )
    p.add_argument(
        "--scenario",
        default="digits-20",
        metavar="NAME",
        help=f"scenario: {', '.join(SCENARIOS)} (default: digits-20)",
    )
    p.add_argument(
        "--strategy",
        default="all",
        metavar="NAME",
        help=f"{'|'.join(STRATEGIES)}|all (default: all)",
    )
    p.add_argument(
        "--clients",
        type=int,
        default=None,
        metavar="N",
        help="virtual clients, >= 2 and at most the scenario's data allows (default: the "
        "scenario's)",
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed, 0 to 2**64 - 1 (default: 0)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        metavar="R",
        help="aggregations per strategy, at most 1,000,000 (default: the scenario's update budget)",
    )
    p.add_argument(
        "--heterogeneity",
        type=float,
        default=None,
        metavar="H",
        help="fastest / slowest device compute speed, 1 to 1,000,000 (default: the scenario's)",
    )
    p.add_argument(
        "--threshold",
        type=int,
        default=None,
        metavar="K",
        help="edge and edge-seed aggregate when more than K updates are in, FedBuff at K "
        "(FedAvg and FedAsync have none); 1 <= K < clients (default: the scenario's, lowered "
        "with --clients)",
    )
    p.add_argument(
        "--out",
        type=_folder,
        default=None,
        metavar="DIR",
        help="folder for results.json, the plots and summary.txt (default: "
        "runs/<scenario>-<UTC time>; with --json, no files unless given)",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument(
        "--engine",
        default="ray",
        choices=ENGINES,
        help="ray: Flower's simulation engine (default); inprocess: one process, no Ray",
    )
    p.add_argument(
        "--cpus", type=int, default=None, metavar="N", help="CPUs for Ray (default: all)"
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="attach to a running Ray cluster (e.g. auto, or HEAD_IP:6379) instead of "
        "starting a local Ray",
    )
    p.add_argument(
        "--list",
        action="store_true",
        help="list the scenarios and exit",
    )
    p.add_argument("--verbose", action="store_true", help="keep Flower's INFO logs")
    return p


def _folder(text: str) -> Path:
    """``--out``'s type: a folder name (an empty one would write into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a folder name, got ''")
    return Path(text).expanduser()
