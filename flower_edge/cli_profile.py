"""``flower-edge profile``: rate this device's cpu, gpu, memory and disk (seed 000 step 2).

Usage: ``flower-edge profile [--quick] [--json] [--disk-dir PATH] [--repeats N]
[--cache FOLDER]``.

By default a readable table goes to stdout and a progress indicator to stderr; with ``--json``
stdout holds only the report's JSON (the contract of :mod:`flower_edge.profiling.report`).
With ``--cache FOLDER`` the report is also stored as ``FOLDER/profile-<mode>.json``, where a
flower-edge ClientApp whose node config sets ``profile-cache`` to that folder reuses it
(:mod:`flower_edge.profiling.store`). Exit codes follow :mod:`flower_edge.cli`: 2 for an empty,
missing or unwritable ``--disk-dir``, an empty ``--cache`` or one that cannot be written (a
folder in the place of its ``profile-<mode>.json`` is refused before profiling; a report that
cannot be stored after profiling is still printed), or a ``--repeats`` out of range; 130
when interrupted (Ctrl-C or SIGTERM); the temporary folder of the disk workloads is removed
in every case.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from flower_edge import validate
from flower_edge.cli import sigterm_as_interrupt
from flower_edge.errors import InputError

if TYPE_CHECKING:
    from flower_edge.profiling.report import Mode, ProfileReport

__all__ = ["add_parser", "format_report", "run"]

_MAX_REPEATS = 100


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``profile`` sub-command."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "profile",
        help="rate this device's cpu, gpu, memory and disk with resource-bound workloads",
        description=(
            "Run single-resource-intensive workloads per resource (cpu, gpu, memory, disk) and "
            "rate each resource by N = mean(U * E), E = samples / seconds (seed formulas 3-4)."
        ),
    )
    parser.add_argument(
        "--quick", action="store_true", help="quick mode (a client's first contact, ~3 s)"
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON report on stdout")
    parser.add_argument(
        "--disk-dir",
        metavar="PATH",
        default=None,
        help="existing writable folder for the disk workload's temporary files "
        "(default: the system's temporary folder)",
    )
    parser.add_argument(
        "--cache",
        metavar="FOLDER",
        default=None,
        help="also store the report as FOLDER/profile-<mode>.json, where a flower-edge "
        "ClientApp whose node config sets profile-cache=FOLDER reuses it (rate the device "
        "once, at enrollment)",
    )
    parser.add_argument(
        "--repeats",
        metavar="N",
        type=str,
        default=None,
        help=f"timed runs per workload, 1-{_MAX_REPEATS} (default: quick 1, full 3)",
    )
    parser.set_defaults(run=run)
    return parser


def _repeats(text: str | None) -> int | None:
    if text is None:
        return None
    return validate.integer("--repeats", validate.from_text(text, int), low=1, high=_MAX_REPEATS)


def _check_writable(path: Path, option: str, text: str, problem: str) -> None:
    """Raise InputError ``{option} {text!r} {problem}: reason`` unless ``path`` takes a folder.

    Creating (and removing) a trial folder is the real test of writability: permission bits
    say little to root or on ACLs.
    """
    from flower_edge.profiling.probe import TEMP_PREFIX

    try:
        trial = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=path)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"{option} {text!r} {problem}: {reason}") from None
    os.rmdir(trial)


def _not_empty(text: str, option: str) -> None:
    """Reject an empty folder name: ``Path("")`` would silently mean the current folder."""
    if not text.strip():
        raise InputError(f"{option} must name a folder, got {text!r}")


def _disk_dir(text: str | None) -> Path | None:
    if text is None:
        return None
    _not_empty(text, "--disk-dir")
    path = Path(text).expanduser()  # `--disk-dir=~/data`: the shell leaves that ~ alone
    if not path.exists():
        raise InputError(f"--disk-dir {text!r} does not exist")
    if not path.is_dir():
        raise InputError(f"--disk-dir {text!r} is not a folder")
    _check_writable(path, "--disk-dir", text, "is not writable")
    return path


def _cache_dir(text: str | None) -> Path | None:
    """Return the ``--cache`` folder, created if missing and checked writable before profiling."""
    if text is None:
        return None
    _not_empty(text, "--cache")
    path = Path(text).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(f"--cache {text!r} is not a writable folder: {reason}") from None
    _check_writable(path, "--cache", text, "is not a writable folder")
    return path


def _progress(stream: TextIO) -> Callable[[str, float], None]:
    tty = stream.isatty()

    def show(label: str, fraction: float) -> None:
        line = f"[{fraction * 100:3.0f}%] {label}"
        if tty:
            end = "\n" if label == "done" else ""
            stream.write(f"\r\x1b[2K{line}{end}")
        else:
            stream.write(line + "\n")
        stream.flush()

    return show


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def format_report(report: ProfileReport) -> str:
    """Return the readable table of a report."""
    host = report.host
    load = " ".join(f"{v:.2f}" for v in host.load_average)
    lines = [
        f"flower-edge profile ({report.mode}, {report.elapsed_seconds:.1f} s)",
        f"host: {host.cores} cores, {host.cpu_model or 'unknown CPU'}, "
        f"{_gib(host.memory_bytes)} memory, GPU: {host.gpu_name or 'none'}, "
        f"{host.platform or 'unknown platform'}, load average {load}",
        "",
        f"{'resource':<8} {'N = mean(U*E)':>14}  {'workload':<14} {'samples':>8} "
        f"{'seconds':>8} {'U':>5} {'E (samples/s)':>14}",
    ]
    for name, res in report.resources.items():
        if not res.available:
            lines.append(f"{name:<8} {res.evaluation:>14.1f}  unavailable: {res.reason}")
            continue
        for i, w in enumerate(res.workloads):
            head = f"{name:<8} {res.evaluation:>14.1f}" if i == 0 else " " * 23
            lines.append(
                f"{head}  {w.name:<14} {w.samples:>8d} {w.seconds:>8.4f} "
                f"{w.utilization:>5.2f} {w.intensity:>14.1f}"
            )
        if res.reason:
            lines.append(f"{'':<23}  note: {res.reason}")
    return "\n".join(lines)


def _check_cache_file(cache: Path, text: str, mode: Mode) -> None:
    """Refuse, before profiling, a ``--cache`` folder whose report name is not a file.

    Found by a new-user probe: a folder named ``profile-quick.json`` inside ``--cache`` was
    found only after the profile had run, and the report was lost (nothing on stdout).
    """
    from flower_edge.profiling.store import report_path

    path = report_path(cache, mode)
    if path.exists() and not path.is_file():
        raise InputError(
            f"--cache {text!r}: {path.name} exists and is not a file (the report is stored "
            "under that name); remove it or choose another --cache"
        )


def run(args: argparse.Namespace) -> int:
    """Run the profile and print it; return the exit code.

    The report goes to stdout before it is stored in ``--cache``, so that a failure to store
    it (a full disk) loses nothing.
    """
    repeats = _repeats(args.repeats)
    disk_dir = _disk_dir(args.disk_dir)
    cache = _cache_dir(args.cache)
    mode: Mode = "quick" if args.quick else "full"
    if cache is not None:
        _check_cache_file(cache, args.cache, mode)
    from flower_edge.profiling.probe import HostProbe

    probe = HostProbe(disk_dir=disk_dir, repeats=repeats, progress=_progress(sys.stderr))
    with sigterm_as_interrupt():  # main() holds one too; this one also serves run() alone
        report = probe.profile(mode)
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
    else:
        sys.stdout.write(format_report(report) + "\n")
    sys.stdout.flush()
    if cache is not None:
        from flower_edge.profiling.store import write_report

        try:
            path = write_report(cache, report)
        except OSError as exc:
            raise InputError(
                f"--cache {args.cache!r}: cannot store the report ({exc}); it is on stdout only"
            ) from None
        sys.stderr.write(f"stored {path}\n")
    return 0
