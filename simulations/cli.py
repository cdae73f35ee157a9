"""``flower-edge simulate``: run a scenario through Flower's simulation engine.

Usage::

    flower-edge simulate [--scenario NAME]
                         [--strategy edge|edge-seed|fedavg|fedbuff|fedasync|all] [--clients N]
                         [--seed S] [--rounds R] [--heterogeneity H] [--threshold K] [--out DIR]
                         [--json] [--engine ray|inprocess] [--cpus N] [--ray-address ADDR]
                         [--list] [--verbose]

Without ``--json`` it prints a summary table and writes the JSON and the plots into ``--out``
(default ``runs/<scenario>-<UTC timestamp>/``, a new folder each run). With ``--json`` only the
JSON contract of :mod:`simulations.report` goes to stdout (a list for ``--strategy all``; the
engine's own output is sent to stderr), and files are written only when ``--out`` is given.
Progress goes to stderr. Every option is validated before the engine starts (exit code 2),
under its option name; an explicit ``--ray-address HOST:PORT`` must accept a TCP connection
and answer gRPC within :data:`RAY_CONNECT_TIMEOUT` seconds (:func:`check_ray_address`).
A one-line note on stderr says when ``--clients`` lowers the scenario's K, and when
``--cpus``, ``--ray-address`` or ``--threshold`` is ignored (``--engine inprocess``,
``--cpus`` with ``--ray-address``, ``--threshold`` with ``--strategy fedavg`` or
``fedasync``, which take no K). ``--list`` lists the scenarios (``--scenario NAME``: that one,
``--json``: a JSON object) and runs nothing: any other option with it is an error naming the
option (exit code 2; :mod:`simulations.cli_options`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from flower_edge import validate
from flower_edge.errors import FlowerEdgeError, InputError
from simulations.cli_options import LIST_OPTIONS, build_parser, given_options
from simulations.outputs import check_output_files, unfinished_runs, write_outputs

if TYPE_CHECKING:
    from simulations.app import SimSettings
    from simulations.report import RunResult
    from simulations.scenarios import Scenario

__all__ = ["RAY_CONNECT_TIMEOUT", "add_parser", "check_ray_address", "run"]

DEFAULT_RUNS_DIR = Path("runs")
#: seconds that an explicit ``--ray-address HOST:PORT`` has to accept a TCP connection
RAY_CONNECT_TIMEOUT = 5.0
#: an explicit ``HOST:PORT`` (``[IPv6]:PORT`` included) Ray address; other forms go unchecked
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d+)")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``simulate`` sub-command (its options: :mod:`simulations.cli_options`)."""
    p = build_parser(subparsers)
    p.set_defaults(run=run)
    return p


def _check_overrides(args: argparse.Namespace) -> Scenario:
    """Check the scenario, the strategy and the overrides under the CLI's option names.

    :class:`~simulations.app.SimSettings` checks them again, under the settings' field names;
    checking here first makes every message name the option (``--clients``, not ``clients``).

    Returns
    -------
    Scenario
        The scenario named by ``--scenario``, without the overrides.
    """
    from simulations.scenarios import (
        DATASET_SIZES,
        MAX_HETEROGENEITY,
        MAX_ROUNDS,
        MAX_SEED,
        resolve_strategies,
    )

    validate.integer(
        "--rounds", args.rounds, low=1, high=MAX_ROUNDS, allow_none=True, error=InputError
    )
    validate.integer("--seed", args.seed, low=0, high=MAX_SEED, error=InputError)
    validate.integer("--cpus", args.cpus, low=1, allow_none=True, error=InputError)
    base = _scenario(args.scenario)
    try:
        resolve_strategies(args.strategy)
    except InputError as exc:
        raise InputError(f"--strategy: {exc}") from None
    clients = validate.integer("--clients", args.clients, low=2, allow_none=True, error=InputError)
    if clients is not None and clients > base.max_clients:
        raise InputError(
            f"--clients must be <= {base.max_clients} for scenario {base.name!r}: its "
            f"{DATASET_SIZES[base.dataset]} {base.dataset} training samples cannot give "
            f"{clients} clients {base.min_client_samples} samples each"
        )
    validate.number(
        "--heterogeneity",
        args.heterogeneity,
        low=1.0,
        high=MAX_HETEROGENEITY,
        allow_none=True,
        error=InputError,
    )
    n = base.num_clients if clients is None else clients
    k = validate.integer("--threshold", args.threshold, allow_none=True, error=InputError)
    if k is not None and not 1 <= k < n:
        raise InputError(f"--threshold K must be >= 1 and < clients ({n}), got {k}")
    return base


def _scenario(name: str) -> Scenario:
    """Return the scenario ``name``; an unknown one is an error naming ``--scenario``."""
    from simulations.scenarios import resolve_scenario

    try:
        return resolve_scenario(name)
    except InputError as exc:
        raise InputError(f"--scenario: {exc}") from None


def _settings(args: argparse.Namespace) -> list[SimSettings]:
    from simulations.app import SimSettings
    from simulations.scenarios import resolve_strategies

    base = _check_overrides(args)
    runs = [
        SimSettings.create(
            args.scenario,
            name,
            seed=args.seed,
            rounds=args.rounds,
            clients=args.clients,
            heterogeneity=args.heterogeneity,
            threshold=args.threshold,
        )
        for name in resolve_strategies(args.strategy)
    ]
    k = runs[0].scenario.threshold
    if all(s.strategy in WITHOUT_K for s in runs):  # FedAvg and FedAsync have no K
        if args.threshold is not None:
            name = runs[0].strategy
            _note(f"--threshold {args.threshold} is ignored by {name} ({WITHOUT_K[name]})")
    elif args.threshold is None and k != base.threshold:
        _note(
            f"--clients {args.clients} instead of the scenario's {base.num_clients}: K "
            f"lowered from {base.threshold} to {k}, the same share of the federation "
            f"(round(K x clients / {base.num_clients}), at least 1, below the clients); "
            "set --threshold to choose K"
        )
    return runs


#: the strategies that take no K, and what they aggregate instead
WITHOUT_K: Final[dict[str, str]] = {
    "fedavg": "it waits for every client",
    "fedasync": "it aggregates every update",
}


def _note(text: str) -> None:
    """Print a one-line note on stderr (stdout may hold the JSON result)."""
    print(f"flower-edge simulate: note: {text}", file=sys.stderr)


def _engine_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """Return the Ray ``init`` arguments; note the options that the engine ignores.

    Raises
    ------
    InputError
        Naming ``--ray-address``: empty, a bad port, or a ``HOST:PORT`` that does not accept a
        TCP connection within :data:`RAY_CONNECT_TIMEOUT` seconds (:func:`check_ray_address`).
    """
    if args.engine == "inprocess":
        ignored = [
            opt
            for opt, value in (("--ray-address", args.ray_address), ("--cpus", args.cpus))
            if value is not None
        ]
        if ignored:
            _note(
                f"{' and '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} ignored with "
                "--engine inprocess (one process, no Ray)"
            )
        return None
    if args.ray_address is None and os.environ.get("RAY_ADDRESS", "").strip():
        # ray.init would attach to it anyway, and refuse the num_cpus of a local instance
        args.ray_address = os.environ["RAY_ADDRESS"].strip()
        _note(
            f"RAY_ADDRESS={args.ray_address} is set: the run attaches to that Ray cluster, as "
            "with --ray-address (unset RAY_ADDRESS for a local Ray instance)"
        )
    if args.ray_address is None:
        cores = os.cpu_count() or 1
        if args.cpus is not None and args.cpus > cores:
            _note(
                f"--cpus {args.cpus} is more than this machine's {cores} cores: Ray runs up to "
                f"{args.cpus} ClientApps at once on them, which is slower, not faster"
            )
        return None
    if args.cpus is not None:
        _note("--cpus is ignored with --ray-address (the cluster's CPUs are used)")
    check_ray_address(args.ray_address)
    return {"address": args.ray_address}


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Check a ``--ray-address`` before any engine starts.

    Ray retries an unreachable GCS address for minutes ("Failed to connect to GCS"), and a
    failed connection inside Flower's simulation engine leaves the process hanging on its
    threads; this fails within ``timeout`` seconds instead, with a message that names the
    option. The forms are ``auto`` (a cluster started by ``ray start`` must be found: the
    ``RAY_ADDRESS`` variable or Ray's record of its latest cluster, then its address is
    checked like ``HOST:PORT``), ``local``, ``HOST:PORT`` and ``ray://HOST:PORT`` (Ray
    Client); the last two must accept a TCP connection and answer an HTTP/2 preface as a
    gRPC server does (TCP alone under ``RAY_USE_TLS``).

    Parameters
    ----------
    address : str
        The ``--ray-address`` value.
    timeout : float (default: :data:`RAY_CONNECT_TIMEOUT`)
        Seconds to wait for the connection.

    Raises
    ------
    InputError
        Naming ``--ray-address``: empty, another form, a port outside 1-65535, no cluster
        found for ``auto``, no connection, or no gRPC reply.
    """
    text = address.strip()
    if not text:
        raise InputError("--ray-address must not be empty (e.g. auto, or HEAD_IP:6379)")
    if text == "local":
        return
    if text == "auto":
        resolved = _auto_address()
        if resolved is None:
            return
        text = resolved
    client = text.startswith("ray://")
    found = _HOST_PORT.fullmatch(text.removeprefix("ray://"))
    if found is None:
        raise InputError(
            f"--ray-address {address!r}: expected auto, local, HOST:PORT or ray://HOST:PORT "
            "with a numeric port (e.g. 10.0.0.5:6379)"
        )
    host, port = found.group(1).strip("[]"), int(found.group(2))
    if not 1 <= port <= 65535:
        raise InputError(f"--ray-address {address!r}: the port must be in 1-65535, got {port}")
    _check_connection(address, host, port, timeout, client=client)


def _auto_address() -> str | None:
    """Return the ``HOST:PORT`` that Ray's ``auto`` resolves to; raise InputError if none.

    ``None``: this Ray has no such helper, so Ray resolves ``auto`` itself.
    """
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return None
    try:
        resolved = canonicalize_bootstrap_address("auto")
    except Exception:  # noqa: BLE001 - a private Ray helper (ConnectionError when none runs)
        resolved = None
    if not resolved:
        raise InputError(
            "--ray-address auto: no running Ray cluster was found (no RAY_ADDRESS and no "
            "cluster started with `ray start --head` on this machine); start one, give its "
            "HOST:PORT, or leave --ray-address out to start a local Ray instance"
        )
    return str(resolved)


def _check_connection(
    address: str, host: str, port: int, timeout: float, *, client: bool = False
) -> None:
    """Raise InputError naming ``--ray-address`` if ``host:port`` accepts no TCP connection."""
    import socket

    start = (
        f"ray start --head --ray-client-server-port {port}"
        if client
        else f"ray start --head --port {port}"
    )
    what = "Ray Client server" if client else "Ray head"
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            if _speaks_grpc(conn):
                return
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise InputError(
            f"--ray-address {address!r}: no {what} answers at {host}:{port} within "
            f"{timeout:g} s ({reason}); start one there ({start}) or use --ray-address auto"
        ) from None
    # found by a new-user probe: a port of another service (Ray's dashboard, 8265) passed the
    # TCP check, then Ray retried "Failed to connect to GCS" for 5 minutes, deaf to Ctrl-C
    hint = (
        "the --ray-client-server-port of `ray start --head`, 10001 by default"
        if client
        else "the --port of `ray start --head`, 6379 by default; not the dashboard's 8265"
    )
    raise InputError(
        f"--ray-address {address!r}: {host}:{port} accepts connections but gives no gRPC reply "
        f"within {timeout:g} s, so it is no {what} (its port is {hint})"
    )


#: an HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, the Ray
#: Client server) answers with a SETTINGS frame of its own
_HTTP2_HELLO: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _speaks_grpc(conn: Any) -> bool:
    """Whether ``conn``'s server answers HTTP/2 (``True`` unasked under ``RAY_USE_TLS``)."""
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return True
    try:
        conn.sendall(_HTTP2_HELLO)
        head = conn.recv(9)
    except OSError:
        return False
    return len(head) >= 4 and head[3] == 4  # frame type 4: SETTINGS


def _out_dir(args: argparse.Namespace) -> Path | None:
    if args.out is None and args.json:
        return None
    if args.out is not None:
        out: Path = args.out
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        out = _new_folder(DEFAULT_RUNS_DIR / f"{args.scenario}-{stamp}")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise InputError(f"--out {out} is not a writable folder: {exc.strerror}") from None
    return out


def _new_folder(base: Path) -> Path:
    """Create and return ``base``, or ``base-2``, ``base-3``, ... where it exists already.

    Two runs started in the same second (``... --strategy edge & ... --strategy fedbuff &``)
    shared the default ``--out``: the later overwrote the other's ``results.json`` and
    removed its timeline (found by a new-user probe).
    """
    n = 1
    while True:
        out = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            out.mkdir(parents=True)
            return out
        except FileExistsError:
            n += 1
        except OSError as exc:
            raise InputError(f"--out {out} is not a writable folder: {exc.strerror}") from None


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (this process and its children) to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


class _Progress:
    """A one-line progress bar on stderr (a line per 10 % when stderr is not a terminal)."""

    def __init__(self, stream: TextIO, total_runs: int) -> None:
        self.stream = stream
        self.total_runs = total_runs
        self.run_index = 0
        self.label = ""
        self.last_round = -1
        self.tty = stream.isatty()
        self.line = ""
        self.open = False  # the last line is not ended (terminal) or not written (log)

    def start(self, label: str) -> None:
        self.run_index += 1
        self.label = label
        self.last_round = -1
        self.stream.write(f"[{self.run_index}/{self.total_runs}] {label}: starting the engine\n")
        self.stream.flush()

    def __call__(self, rnd: int, rounds: int, accuracy: float, virtual_time: float) -> None:
        from simulations.report import accuracy_text, seconds_text  # as in the table

        if rnd <= self.last_round:
            return
        self.last_round = rnd
        width = 24
        filled = int(width * rnd / max(rounds, 1))
        bar = "#" * filled + "." * (width - filled)
        line = (
            f"[{self.run_index}/{self.total_runs}] {self.label} [{bar}] round {rnd}/{rounds} "
            f"acc {accuracy_text(accuracy)} t {seconds_text(virtual_time)} s"
        )
        self.line, self.open = line, rnd < rounds
        if self.tty:
            self.stream.write("\r" + line + ("" if self.open else "\n"))
        elif rnd == rounds or rnd % max(1, rounds // 10) == 0:
            self.stream.write(line + "\n")
            self.open = False
        self.stream.flush()

    def finish(self) -> None:
        """End the bar of a run that stopped before its round budget, on its last round."""
        if self.open:
            self.stream.write("\n" if self.tty else self.line + "\n")
            self.stream.flush()
            self.open = False


def _list_scenarios(args: argparse.Namespace) -> int:
    """``--list``: every scenario, or ``--scenario``'s; refuse the options it would ignore."""
    from simulations.scenarios import SCENARIOS

    given = given_options(args)
    ignored = [option for option in given if option not in LIST_OPTIONS]
    if ignored:
        raise InputError(
            f"{', '.join(ignored)} cannot be given with --list, which runs nothing and takes "
            f"only --scenario and --json: leave {'it' if len(ignored) == 1 else 'them'} out, "
            "or leave out --list to run"
        )
    names = [_scenario(args.scenario).name] if "--scenario" in given else list(SCENARIOS)
    if args.json:
        print(json.dumps({name: SCENARIOS[name].description for name in names}))
        return 0
    width = max(map(len, names))
    for name in names:
        print(f"{name:<{width}}  {SCENARIOS[name].description}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the ``simulate`` sub-command; return the exit code."""
    if args.list:
        return _list_scenarios(args)
    runs = _settings(args)  # every bad option fails here, before the engine starts
    ray_init_args = _engine_options(args)
    existed = args.out is not None and args.out.exists()
    out = _out_dir(args)
    if out is not None:
        check_output_files(out, [s.strategy for s in runs])
    try:
        return _run(args, runs, ray_init_args, out)
    except BaseException:
        # a run that fails or is interrupted leaves no empty folder of its own behind
        if out is not None and not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _run(
    args: argparse.Namespace,
    runs: list[SimSettings],
    ray_init_args: dict[str, Any] | None,
    out: Path | None,
) -> int:
    """Run every strategy of ``runs``; write the outputs to ``out`` and print the results.

    When a strategy fails or is interrupted after at least one has finished, the finished
    rows are still written and printed, marked as partial (:func:`unfinished_runs`); then the
    failure or the interrupt goes on (exit code 1 or 130).
    """
    from simulations.report import partial_line, results_to_json, summary_table
    from simulations.runner import run_experiment, shared_ray_session

    progress = _Progress(sys.stderr, len(runs))
    as_list = args.strategy == "all" or len(runs) > 1
    results: list[RunResult] = []
    stop: Exception | KeyboardInterrupt | None = None  # what ended a later strategy
    guard = _stdout_to_stderr() if args.json else contextlib.nullcontext()
    with guard, shared_ray_session(args.engine, len(runs)):
        for s in runs:
            progress.start(f"{s.scenario.name}/{s.strategy}")
            try:
                result = run_experiment(
                    s,
                    engine=args.engine,
                    cpus=args.cpus,
                    ray_init_args=ray_init_args,
                    progress=progress,
                    verbose=args.verbose,
                )
            except (Exception, KeyboardInterrupt) as exc:
                if not results:  # nothing finished: nothing to keep
                    raise
                stop = exc
                break
            finally:
                progress.finish()
            results.append(result)
        unfinished = unfinished_runs([s.strategy for s in runs], len(results), stop)
        written: list[Path] = []
        failed: OSError | None = None
        try:
            written = (
                write_outputs(results, runs, out, as_list, unfinished) if out is not None else []
            )
        except OSError as exc:  # a full disk: the results still go to stdout, then exit 1
            failed = exc
    if args.json:
        print(results_to_json(results, as_list=as_list, unfinished=unfinished))
    else:
        print(summary_table(results) + (f"\n{partial_line(unfinished)}" if stop else ""))
    if failed is not None:
        name = Path(failed.filename).name if failed.filename else "its files"
        message = f"--out {out}: cannot write {name}: {failed.strerror or failed}"
        if stop is not None:  # the failure or interrupt of the run is the one to report
            _note(message)
            raise stop
        raise FlowerEdgeError(f"{message}; the results are on stdout only")
    if out is not None and not args.json:
        print(f"\nresults and plots in {out}/:")
        for path in written:
            print(f"  {path.name}")
    if stop is not None:
        kept = ", ".join(r.strategy for r in results)
        _note(f"partial run: the results of {kept} were kept" + (f" in {out}/" if out else ""))
        raise stop
    return 0
