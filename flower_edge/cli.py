"""The ``flower-edge`` command line.

Each sub-command lives in its own module, which exposes ``add_parser(subparsers)`` and
``run(args) -> int``. Those modules import their heavy dependencies (torch, flwr, ray) inside
``run`` so that ``flower-edge --help`` stays fast.

The core commands (``profile``, ``analyze``, ``plan``) are in this package. Commands of the
upper layers (``simulate``, in ``simulations``) are found through the entry-point group
:data:`COMMANDS_GROUP`: this package never imports an upper layer by name. An upper-layer
command whose module cannot be imported (a device with only the core package, or without
flwr) is listed as unavailable, and running it says why (exit code 2); the core commands keep
working.

Exit codes: 0 success, 1 the run failed, 2 bad input (usage, invalid option or file, a command
that is not available here), 130 interrupted (Ctrl-C or SIGTERM: :func:`sigterm_as_interrupt`),
141 stdout closed early (``... | head``; :func:`console_main`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from importlib import import_module
from importlib.metadata import entry_points
from types import FrameType, ModuleType
from typing import Any, NoReturn

from flower_edge.errors import FlowerEdgeError, InputError

__all__ = [
    "COMMANDS_GROUP",
    "COMMAND_MODULES",
    "build_parser",
    "command_modules",
    "main",
    "sigterm_as_interrupt",
]

#: core sub-command name -> module implementing ``add_parser`` and ``run``
COMMAND_MODULES: dict[str, str] = {
    "profile": "flower_edge.cli_profile",
    "analyze": "flower_edge.cli_analyze",
    "plan": "flower_edge.cli_plan",
}
#: entry-point group of the upper layers' commands: ``name = "package.module"``, the module
#: implementing ``add_parser`` and ``run`` (see ``[project.entry-points]`` in pyproject.toml)
COMMANDS_GROUP = "flower_edge.commands"

Loader = Callable[[], ModuleType]


def _plugin_commands() -> dict[str, tuple[str, Loader]]:
    """Return the upper layers' commands: name -> (module path, loader), without importing."""
    found: dict[str, tuple[str, Loader]] = {}
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name in COMMAND_MODULES:  # a plugin may not replace a core command
            continue
        found[ep.name] = (ep.value, ep.load)
    return found


def command_modules(
    plugins: dict[str, tuple[str, Loader]] | None = None,
) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Import the command modules.

    Parameters
    ----------
    plugins : dict, optional
        Upper-layer commands, name -> (module path, loader) (default: the installed entry
        points of :data:`COMMANDS_GROUP`).

    Returns
    -------
    tuple of (dict, dict)
        Module path -> module of every importable command module (core first), and command
        name -> reason for each upper-layer command that could not be imported.
    """
    modules = {name: import_module(name) for name in dict.fromkeys(COMMAND_MODULES.values())}
    missing: dict[str, str] = {}
    for command, (path, load) in (_plugin_commands() if plugins is None else plugins).items():
        try:
            module = load()
        except ImportError as exc:  # its layer (or one of its dependencies) is not installed
            missing[command] = f"{type(exc).__name__}: {exc}"
            continue
        modules.setdefault(path, module)
    return modules, missing


def _add_unavailable(sub: Any, command: str, reason: str) -> None:
    """Register ``command`` as a sub-command that only reports why it is not available."""
    p: argparse.ArgumentParser = sub.add_parser(
        command, help=f"(not available here: {reason})", add_help=False
    )
    p.set_defaults(takes_any_arguments=True)

    def run(_: argparse.Namespace) -> int:
        raise InputError(
            f"not available here ({reason}); install flower-edge with its upper layers "
            "(clients, strategies, simulations) and flwr"
        )

    p.set_defaults(run=run)


def build_parser(
    plugins: dict[str, tuple[str, Loader]] | None = None,
) -> argparse.ArgumentParser:
    """Build the argument parser with every sub-command (see :func:`command_modules`)."""
    parser = argparse.ArgumentParser(
        prog="flower-edge",
        description="Flower on heterogeneous edge devices: profile, analyze, plan, simulate.",
    )
    from flower_edge import __version__

    parser.add_argument("--version", action="version", version=f"flower-edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules, missing = command_modules(plugins)
    for module in modules.values():
        module.add_parser(sub)
    for command, reason in missing.items():
        _add_unavailable(sub, command, reason)
    for sub_parser in sub.choices.values():  # main() reports stray arguments with its usage
        sub_parser.set_defaults(command_parser=sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_any_arguments", False):
        # as parse_args does, but with the sub-command's usage (found by a new-user probe:
        # `simulate --bogus` printed the top-level usage, which lists no option)
        command_parser: argparse.ArgumentParser = getattr(args, "command_parser", parser)
        command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        with sigterm_as_interrupt():  # `kill PID`, `timeout`: the same cleanup as Ctrl-C
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


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt, so the same cleanup runs; restore afterwards.

    Found by a new-user probe for ``simulate`` (``profile`` had it already): SIGTERM killed
    the process at once and left the empty ``--out`` folder that Ctrl-C removes. A library
    may set its own handler inside the block (Ray's ``init`` does); the one before the block
    comes back at its end.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def console_main() -> NoReturn:
    """Entry point of the ``flower-edge`` script: :func:`main`, then exit with its code.

    After Ctrl-C (code 130), or any other failure, the process exits at once, even if
    threads of a library are still running: Flower's simulation engine runs the ServerApp and
    its backend in non-daemon threads that do not stop on Ctrl-C or on a failed Ray
    connection, and Python would wait for them at exit (the run looked hung). A Ray session
    it started is shut down first, for at most :data:`INTERRUPT_CLEANUP_SECONDS`. A closed
    stdout (``flower-edge ... --json | head``) ends the command quietly with 141.
    """
    try:
        code = main()
    except BrokenPipeError:  # the reader of stdout went away (`... | head`): nothing to say
        code = _quiet_broken_pipe()
    except Exception:  # a bug or a library's failure: its traceback, then exit, not hang
        traceback.print_exc()
        code = 1
    if code != 0 and _other_threads_alive():
        _shutdown_ray(INTERRUPT_CLEANUP_SECONDS)
        with contextlib.suppress(BrokenPipeError, ValueError):
            sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def _quiet_broken_pipe() -> int:
    """Point stdout at /dev/null so that the exit flush raises no second error; return 141.

    141 (128 + SIGPIPE) is what a shell reports for a command that a closed pipe stopped
    (Python's documented way to handle ``BrokenPipeError``).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


#: seconds to wait for Ray to shut down after Ctrl-C before exiting anyway
INTERRUPT_CLEANUP_SECONDS = 10.0


def _other_threads_alive() -> bool:
    """Return whether a non-daemon thread other than this one is alive."""
    me = threading.current_thread()
    return any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate())


def _shutdown_ray(timeout: float) -> None:
    """Shut down a Ray session that a command started (Ray is never imported here)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    worker = threading.Thread(target=ray.shutdown, daemon=True)
    worker.start()
    worker.join(timeout)


if __name__ == "__main__":  # pragma: no cover
    console_main()
