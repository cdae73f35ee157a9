"""The ``flower-edge`` command line.

Each sub-command lives in its own module, which exposes ``add_parser(subparsers)`` and
``run(args) -> int``. Those modules import their heavy dependencies (torch, flwr, ray) inside
``run`` so that ``flower-edge --help`` stays fast. ``simulate`` belongs to the top layer
(``simulations``), which this module may not import statically; it is looked up by name.

Exit codes: 0 success, 1 the run failed, 2 bad input (usage, invalid option or file),
130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from flower_edge.errors import FlowerEdgeError, InputError

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

#: sub-command name -> module implementing ``add_parser`` and ``run``
COMMAND_MODULES: dict[str, str] = {
    "profile": "flower_edge.cli_profile",
    "analyze": "flower_edge.cli_plan",
    "plan": "flower_edge.cli_plan",
    "simulate": "simulations.cli",
}


def _modules() -> dict[str, ModuleType]:
    seen: dict[str, ModuleType] = {}
    for name in dict.fromkeys(COMMAND_MODULES.values()):
        try:
            seen[name] = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # a layer not built yet: leave its commands out
            if exc.name != name:
                raise
    return seen


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="flower-edge",
        description="Flower on heterogeneous edge devices: profile, analyze, plan, simulate.",
    )
    from flower_edge import __version__

    parser.add_argument("--version", action="version", version=f"flower-edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _modules().values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except KeyboardInterrupt:
        print("flower-edge: interrupted", file=sys.stderr)
        return 130
    except InputError as exc:
        print(f"flower-edge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except FlowerEdgeError as exc:
        print(f"flower-edge {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
