"""start-supernode.sh stops the ClientApp processes its SuperNode leaves behind (fast: a fake
flower-supernode, nothing of Flower starts).

Found by a deployment probe (flwr 1.42): after a SuperLink restart a ClientApp of the old run
kept retrying its pull from the SuperNode's --port, and stayed, an orphan, after the SuperNode
was stopped with ``kill SCRIPT_PID``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import deploy_harness
import pytest
from deploy_harness import free_port

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _fake_venv(tmp_path: Path, port: int, other_port: int) -> Path:
    """A venv whose flower-supernode leaves three 'ClientApps' behind and exits (each ignores
    SIGTERM, as a stuck one can): one of its own --port in its process group, as Flower starts
    them; one of another node's --port; one of its --port in another session (another node
    started on that port since, or another user's)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    app = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
    script = bin_dir / "flower-supernode"
    script.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        f"for port, apart in (({port}, False), ({other_port}, False), ({port}, True)):\n"
        "    child = subprocess.Popen(\n"
        f"        [sys.executable, '-c', {app!r}, 'flwr-clientapp', '--runtime-api-address',\n"
        "         f'127.0.0.1:{port}', '--token', 't', '--insecure'],\n"
        "        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,\n"
        "        stderr=subprocess.DEVNULL, start_new_session=apart)\n"
        f"    with open({str(tmp_path / 'pids')!r}, 'a') as h:\n"
        "        h.write(f'{child.pid}\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir.parent


def test_clientapps_left_behind_by_the_node_are_stopped_and_others_kept(
    tmp_path: Path,
) -> None:
    port, other = free_port(), free_port()
    venv = _fake_venv(tmp_path, port, other)
    env = dict(os.environ, FLOWER_EDGE_VENV=str(venv))
    pids: list[int] = []
    try:
        done = subprocess.run(
            [
                "bash",
                str(DEPLOY / "start-supernode.sh"),
                "--superlink",
                "127.0.0.1:1",
                "--insecure",
                "--port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            start_new_session=True,  # its own process group, as a job of a shell or a service
        )
        pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
        own, other_port, other_group = pids
        assert done.returncode == 0
        assert f"left behind by this SuperNode: {own}\n" in done.stderr
        time.sleep(0.5)
        assert not _alive(own)  # SIGTERM ignored: killed after its grace
        assert _alive(other_port)  # another node's ClientApp is not touched
        assert _alive(other_group)  # nor one of this port outside the script's process group
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_free_port_never_hands_out_a_port_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may offer a just-probed port again; the harness skips it (two SuperNodes on
    one port: "address already in use", seen in a real-deployment benchmark)."""
    offered = iter([40001, 40001, 40001, 40002])

    class Probe:
        def __enter__(self) -> Probe:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def bind(self, address: tuple[str, int]) -> None:
            self.port = next(offered)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(socket, "socket", lambda *a: Probe())
    monkeypatch.setattr(deploy_harness, "_HANDED_OUT", set())
    assert (deploy_harness.free_port(), deploy_harness.free_port()) == (40001, 40002)
