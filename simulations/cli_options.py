"""The options of ``flower-edge simulate``: its argument parser, and which options were given.

:func:`build_parser` registers the sub-command's options (:mod:`simulations.cli` adds its
``run``). Every option given on the command line is recorded, in order, under its name in
``args.given`` (:func:`given_options`), whatever its value: ``--seed 0`` is given, although 0
is the default. ``--list`` runs nothing and refuses the options that it would ignore
(:data:`LIST_OPTIONS` are the ones it honours).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

__all__ = ["LIST_OPTIONS", "build_parser", "given_options"]

#: the options that ``--list`` honours: ``--scenario`` shows that scenario only, ``--json``
#: prints a JSON object; any other option is bad input with ``--list``
LIST_OPTIONS: Final = ("--list", "--scenario", "--json")


def given_options(args: argparse.Namespace) -> list[str]:
    """Return the options given on the command line, each once, in the order given."""
    return list(dict.fromkeys(getattr(args, "given", ())))


def _record(action: argparse.Action, namespace: argparse.Namespace) -> None:
    namespace.given = (*getattr(namespace, "given", ()), action.option_strings[-1])


class _Store(argparse.Action):
    """``store``, and the option recorded in ``args.given`` (its const with ``nargs=0``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        _record(self, namespace)


class _StoreTrue(_Store):
    """``store_true``, and the option recorded in ``args.given``."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: bool = False,
        required: bool = False,
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings, dest, nargs=0, const=True, default=default, required=required, help=help
        )


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
    p.register("action", None, _Store)  # the action of an option that names none
    p.register("action", "store", _Store)
    p.register("action", "store_true", _StoreTrue)
    p.set_defaults(given=())
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
        "(FedAvg and FedAsync have none); one K for all three; 1 <= K < clients (default: the "
        "scenario's, lowered with --clients; digits-20: 1 for edge, 4 for edge-seed and FedBuff)",
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
        help="list the scenarios (--scenario: that one; --json: as JSON) and exit; it takes "
        "no other option",
    )
    p.add_argument("--verbose", action="store_true", help="keep Flower's INFO logs")
    return p


def _folder(text: str) -> Path:
    """``--out``'s type: a folder name (an empty one would write into the current folder)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be a folder name, got ''")
    return Path(text).expanduser()
