"""Harness for tests on Flower's real deployment runtime, on 127.0.0.1 only.

A :class:`Deployment` starts a SuperLink and SuperNodes through the repository's own scripts
(``deploy/start-superlink.sh``, ``deploy/start-supernode.sh``), so the tests exercise exactly
what the "Run on devices" guide tells users to run. Every process it starts gets its own
session (process group); :meth:`Deployment.close` stops each one by its process id, together
with the descendants Flower spawned (SuperExec, ServerApp and ClientApp processes, some of
which start their own sessions), first with SIGTERM and then, past a deadline, SIGKILL.
Ports are chosen free at run time; ``FLWR_HOME`` is a temporary folder per process; every
wait has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
VENV_BIN = Path(sys.executable).parent
CONNECTION = "edge-test"

__all__ = [
    "result_of",
    "CONNECTION",
    "DEPLOY",
    "REPO",
    "Deployment",
    "Proc",
    "RunTimeoutError",
    "free_port",
    "run_id_of",
    "toml_value",
    "wait_until",
]


#: every port :func:`free_port` handed out in this process
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago, never the same one twice.

    The kernel may offer a port again as soon as its probe socket is closed: a SuperNode that
    has not bound its port yet (a start takes seconds on a loaded host) would then share it
    with the next one, which fails with "address already in use" (seen in the twenty-first
    session's real-deployment benchmark: two of 8 SuperNodes were given port 51235).
    """
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free TCP port on 127.0.0.1 that was not handed out before")


def port_open(port: int) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def result_of(log: str) -> dict[str, Any]:
    """Return the last ``FLOWER-EDGE-RESULT {...}`` JSON a ServerApp printed in ``log``."""
    found = re.findall(r"FLOWER-EDGE-RESULT (\{.*\})", log)
    assert found, log[-5000:]
    data: dict[str, Any] = json.loads(found[-1])
    return data


RUN_STARTED = re.compile(r"Successfully started run (\d+)")


def run_id_of(log: str) -> int | None:
    """Return the run id ``flwr run`` printed when the SuperLink accepted the run."""
    found = RUN_STARTED.search(log)
    return int(found.group(1)) if found else None


class RunTimeoutError(TimeoutError):
    """``flwr run`` outlived its limit; the run was stopped on the SuperLink.

    Attributes
    ----------
    run_id : int or None
        The run the SuperLink had started (None: it never printed one).
    log : str
        Everything the CLI streamed before it was stopped.
    """

    def __init__(self, message: str, *, run_id: int | None, log: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.log = log


def wait_until(cond: Callable[[], bool], timeout: float, what: str, every: float = 0.25) -> None:
    """Poll ``cond`` until it holds; raise ``TimeoutError`` naming ``what`` past ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def toml_value(value: object) -> str:
    """Render a Python scalar as a TOML value for ``--run-config`` / ``--node-config``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class Proc:
    """A process started by the harness, its log file and its command."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str]

    @property
    def pid(self) -> int:
        """Process id of the started process (a deploy script, parent or ``exec`` of Flower's)."""
        return self.popen.pid

    def text(self) -> str:
        """Return everything the process wrote so far (stdout and stderr)."""
        return self.log.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        """Return whether the process is still running."""
        return self.popen.poll() is None

    def count(self, pattern: str) -> int:
        """Return how many times the regular expression occurs in the log."""
        return len(re.findall(pattern, self.text()))


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def kill_tree(proc: Proc, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Stop ``proc`` and every descendant, each by its pid; SIGKILL what outlives ``timeout``."""
    members = _tree(proc.pid)
    for member in members:
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
            member.send_signal(sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the session the harness created (pgid == pid)
    _, alive = psutil.wait_procs(members, timeout=timeout)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=timeout)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.popen.wait(timeout=timeout)


@dataclass
class Deployment:
    """A SuperLink, SuperNodes and the ``flwr`` CLI on loopback, in a private folder.

    Parameters
    ----------
    workdir : Path
        Empty folder for logs, ``FLWR_HOME`` folders and certificates.
    tls : bool (default: False)
        Run with TLS; certificates come from ``deploy/gen-certs.sh``.
    auth : bool (default: False)
        SuperNode authentication (needs ``tls``): each node's public key is registered with
        ``flwr supernode register`` before the node starts.
    """

    workdir: Path
    tls: bool = False
    auth: bool = False
    port: int = field(default_factory=free_port)
    procs: list[Proc] = field(default_factory=list)
    superlink: Proc | None = None
    nodes: dict[int, Proc] = field(default_factory=dict)
    node_configs: dict[int, dict[str, object]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.auth and not self.tls:
            raise ValueError("auth=True needs tls=True (Flower requires TLS for node auth)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.certs = self.workdir / "certificates"
        if self.tls:
            self._check(
                [str(DEPLOY / "gen-certs.sh"), "-o", str(self.certs), "-n", "6", "-b", "2048"],
                timeout=120,
            )
        self._check(self._connection_command(), timeout=60, home="cli")

    # ------------------------------------------------------------------ environment
    def env(self, home: str) -> dict[str, str]:
        """Environment of a started process: offline Flower, its own ``FLWR_HOME``."""
        env = dict(os.environ)
        flwr_home = self.workdir / f"home-{home}"
        flwr_home.mkdir(exist_ok=True)
        env.update(
            FLWR_HOME=str(flwr_home),
            FLWR_TELEMETRY_ENABLED="0",
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
            FLOWER_EDGE_VENV=str(VENV_BIN.parent),
            PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
            PYTHONUNBUFFERED="1",
        )
        return env

    def _connection_command(self) -> list[str]:
        cmd = [str(DEPLOY / "add-connection.sh"), CONNECTION, f"127.0.0.1:{self.port}"]
        cmd += ["--ca", str(self.certs / "ca.crt")] if self.tls else ["--insecure"]
        return [*cmd, "--default"]

    def _check(
        self, argv: list[str], timeout: float, home: str = "cli"
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv,
            env=self.env(home),
            cwd=self.workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{argv[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
            )
        return done

    def _spawn(self, name: str, argv: list[str], home: str) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(
                argv,
                env=self.env(home),
                cwd=self.workdir,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = Proc(name, popen, log, argv)
        self.procs.append(proc)
        return proc

    # ------------------------------------------------------------------ SuperLink
    def start_superlink(
        self, timeout: float = 60.0, database: Path | None = None, in_memory: bool = False
    ) -> Proc:
        """Start the SuperLink on ``self.port`` and wait until it accepts connections.

        Its state goes to ``database`` (default: the script's, ``superlink-PORT.db`` in
        ``workdir``), or nowhere with ``in_memory``.
        """
        argv = [str(DEPLOY / "start-superlink.sh"), "--port", str(self.port)]
        argv += ["--certs", str(self.certs)] if self.tls else ["--insecure"]
        if self.auth:
            argv.append("--auth")
        if database is not None:
            argv += ["--database", str(database)]
        if in_memory:
            argv.append("--in-memory")
        self.superlink = self._spawn("superlink", argv, "superlink")
        proc = self.superlink

        def ready() -> bool:
            if not proc.alive():
                raise RuntimeError(f"SuperLink exited early:\n{proc.text()[-3000:]}")
            return port_open(self.port) and "startup complete" in proc.text()

        wait_until(ready, timeout, "SuperLink listening")
        return proc

    def activated_nodes(self) -> int:
        """Return how many node activations the SuperLink has logged so far."""
        return 0 if self.superlink is None else self.superlink.count(r"Activated node_id=")

    # ------------------------------------------------------------------ SuperNodes
    def register_nodes(self, indices: list[int], timeout: float = 120.0) -> None:
        """Register the nodes' public keys (``flwr supernode register``, run concurrently)."""
        procs = []
        for index in indices:
            key = self.certs / "keys" / f"supernode-{index + 1}.pub"
            argv = [str(VENV_BIN / "flwr"), "supernode", "register", str(key), CONNECTION]
            procs.append(self._spawn(f"register-{index}", argv, "cli"))
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.popen.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{proc.name} did not finish within {timeout:.0f} s") from None
            if proc.popen.returncode != 0:
                raise RuntimeError(f"{proc.name} failed:\n{proc.text()}")

    def start_supernode(
        self, index: int, node_config: Mapping[str, object], register: bool = True
    ) -> Proc:
        """Start SuperNode ``index`` with ``--node-config`` built from ``node_config``."""
        if self.auth and register and index not in self.node_configs:
            self.register_nodes([index])
        self.node_configs[index] = dict(node_config)
        config = " ".join(f"{k}={toml_value(v)}" for k, v in node_config.items())
        argv = [
            str(DEPLOY / "start-supernode.sh"),
            "--superlink",
            f"127.0.0.1:{self.port}",
            "--port",
            str(free_port()),
            "--node-config",
            config,
        ]
        argv += ["--ca", str(self.certs / "ca.crt")] if self.tls else ["--insecure"]
        if self.auth:
            argv += ["--auth-key", str(self.certs / "keys" / f"supernode-{index + 1}")]
        proc = self._spawn(f"supernode-{index}", argv, f"node-{index}")
        self.nodes[index] = proc
        return proc

    def start_supernodes(self, configs: list[dict[str, object]], timeout: float = 90.0) -> None:
        """Start one SuperNode per config and wait until the SuperLink activated all of them."""
        before = self.activated_nodes()
        if self.auth:
            self.register_nodes([i for i in range(len(configs)) if i not in self.node_configs])
        for index, config in enumerate(configs):
            self.node_configs.setdefault(index, dict(config))
            self.start_supernode(index, config)
        self.wait_activated(before + len(configs), timeout)

    def wait_activated(self, total: int, timeout: float) -> None:
        """Wait until the SuperLink has logged ``total`` node activations in all."""
        try:
            wait_until(lambda: self.activated_nodes() >= total, timeout, "activations")
        except TimeoutError:
            raise TimeoutError(
                f"{total} SuperNode activations not within {timeout:.0f} s (the SuperLink log "
                f"has {self.activated_nodes()}; the SuperNodes' logs say why)"
            ) from None

    # ------------------------------------------------------------------ flwr CLI
    def submit(self, app_dir: Path, run_config: Mapping[str, object] | None = None) -> Proc:
        """Start ``flwr run APP edge-test --stream`` in the background; return its process."""
        argv = [str(VENV_BIN / "flwr"), "run", str(app_dir), CONNECTION, "--stream"]
        if run_config:
            argv += [
                "--run-config",
                " ".join(f"{k}={toml_value(v)}" for k, v in run_config.items()),
            ]
        runs = sum(1 for p in self.procs if p.name.startswith("flwr-run"))
        return self._spawn(f"flwr-run-{runs}", argv, "cli")

    def run_app(
        self, app_dir: Path, run_config: Mapping[str, object] | None = None, timeout: float = 120
    ) -> str:
        """Run the app to completion (``flwr run --stream``); return the streamed log."""
        proc = self.submit(app_dir, run_config)
        try:
            proc.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            log = proc.text()
            run_id = run_id_of(log)
            if run_id is not None:  # the CLI only streamed it: the run itself goes on
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.stop_run(run_id)
            raise RunTimeoutError(
                f"flwr run did not finish within {timeout:.0f} s (run {run_id}, stopped):\n"
                f"{log[-4000:]}",
                run_id=run_id,
                log=log,
            ) from None
        if proc.popen.returncode != 0:
            raise RuntimeError(f"flwr run failed ({proc.popen.returncode}):\n{proc.text()}")
        return proc.text()

    def stop_run(self, run_id: int, timeout: float = 60.0) -> None:
        """Stop run ``run_id`` on the SuperLink (``flwr stop``; raises if the CLI fails)."""
        self._check([str(VENV_BIN / "flwr"), "stop", str(run_id), CONNECTION], timeout)

    # ------------------------------------------------------------------ teardown
    def stop(self, proc: Proc, sig: int = signal.SIGTERM) -> None:
        """Stop one started process and its descendants (SIGKILL past a deadline)."""
        kill_tree(proc, sig)

    def close(self) -> None:
        """Stop every process this deployment started, newest first, each by its pid."""
        for proc in reversed(self.procs):
            kill_tree(proc)

    def logs(self) -> str:
        """Return the tail of every log, for assertion messages."""
        return "\n".join(f"===== {p.name}\n{p.text()[-2500:]}" for p in self.procs)


@contextlib.contextmanager
def deployment(workdir: Path, *, tls: bool = False, auth: bool = False) -> Iterator[Deployment]:
    """Yield a :class:`Deployment`; stop all its processes on exit, whatever happened."""
    dep = Deployment(workdir, tls=tls, auth=auth)
    try:
        yield dep
    finally:
        dep.close()
