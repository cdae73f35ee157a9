"""The deploy/ scripts check their arguments before starting anything (fast: nothing starts)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(DEPLOY / script), *args], capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    "script", ["start-superlink.sh", "start-supernode.sh", "add-connection.sh"]
)
def test_help_prints_the_usage_and_exits_0(script: str) -> None:
    done = _run(script, "--help")
    assert done.returncode == 0
    assert "--insecure" in done.stdout


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("start-superlink.sh", ["--insecure", "--port", "99999"], "--port must be 1-65535"),
        ("start-superlink.sh", ["--insecure", "--port", "0"], "--port must be 1-65535"),
        ("start-supernode.sh", ["--insecure", "--superlink", "nohostport"], "HOST:PORT"),
        ("start-supernode.sh", ["--insecure", "--superlink", "h:70000"], "HOST:PORT"),
        ("start-supernode.sh", ["--insecure", "--superlink", ":9092"], "HOST:PORT"),
        ("add-connection.sh", ["bad name", "127.0.0.1:9093", "--insecure"], "NAME must be"),
        ("add-connection.sh", ["ok", "nohost", "--insecure"], "ADDRESS must be HOST:PORT"),
        ("add-connection.sh", ["ok", "127.0.0.1:9093", "--ca", "/nonexistent"], "cannot read --ca"),
        # found by a deployment probe: these printed only the usage, or a raw mkdir error
        ("add-connection.sh", ["ok", "127.0.0.1:9093"], "give exactly one of --insecure and --ca"),
        ("add-connection.sh", ["ok", "127.0.0.1"], "ADDRESS must be HOST:PORT"),
        ("add-connection.sh", ["ok"], "give NAME and HOST:PORT"),
        ("gen-certs.sh", ["-o", "/proc/flower-edge-nope"], "gen-certs: cannot create -o"),
    ],
)
def test_bad_arguments_exit_2_naming_the_option(script: str, args: list[str], message: str) -> None:
    done = _run(script, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "script", ["start-superlink.sh", "start-supernode.sh", "add-connection.sh", "gen-certs.sh"]
)
def test_help_ends_with_the_last_line_of_the_header_comment(script: str) -> None:
    """Found by a code review: start-superlink.sh --help printed lines 5-18 of a header that
    ends at line 19, leaving out its 'Environment: FLOWER_EDGE_VENV' line."""
    lines = (DEPLOY / script).read_text().splitlines()[1:]
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    done = _run(script, "--help")
    assert done.returncode == 0
    last = header[-1].removeprefix("#").removeprefix(" ")  # the '# ' marks
    assert done.stdout.splitlines()[-1] == last


def test_gen_certs_help_prints_the_usage_and_exits_0() -> None:
    for flag in ("--help", "-h"):
        done = _run("gen-certs.sh", flag)
        assert done.returncode == 0
        assert "-o OUTDIR" in done.stdout
        # found by a new-user probe: the help was the script's raw comment lines, '# '
        # marks and all, followed by its first line of code ('set -euo pipefail')
        lines = done.stdout.splitlines()
        assert lines[0].startswith("Generate development TLS certificates"), done.stdout
        assert any(line.startswith("Usage: deploy/gen-certs.sh [-o OUTDIR]") for line in lines)
        assert not [line for line in lines if line.startswith("#") or "set -e" in line]
        assert lines[-1].startswith("For prototyping only")


def test_a_database_folder_that_cannot_be_made_exits_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = _run(
        "start-superlink.sh", "--insecure", "--port", str(port), "--database", "/proc/x/s.db"
    )
    assert done.returncode == 2
    assert "start-superlink: cannot create the folder of --database" in done.stderr


WHOLE = "partition-id and num-partitions must both be given as whole numbers"
NODE = ["--insecure", "--superlink", "127.0.0.1:9092", "--port", "1"]  # port 1: never reached


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("partition-id=abc num-partitions=3", "value of 'partition-id' must be a number"),
        ("partition-id", "entry 'partition-id' is not KEY=VALUE"),
        ("partition-id=0 num-partitions", "entry 'num-partitions' is not KEY=VALUE"),
        ("partition-id=5 num-partitions=3", "need 0 <= partition-id < num-partitions"),
        ("num-partitions=0", WHOLE),
        ("partition-id=1.5 num-partitions=3", WHOLE),
    ],
)
def test_a_bad_node_config_exits_2_before_starting(config: str, message: str) -> None:
    done = _run("start-supernode.sh", *NODE, "--node-config", config)
    assert done.returncode == 2
    assert f"--node-config: {message}" in done.stderr
    assert "Traceback" not in done.stderr


def _listening() -> tuple[socket.socket, int]:
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", 0))
    held.listen()
    return held, held.getsockname()[1]


def test_a_port_in_use_exits_2_and_leaves_no_database(tmp_path: Path) -> None:
    held, port = _listening()
    with held:
        done = subprocess.run(
            ["bash", str(DEPLOY / "start-superlink.sh"), "--insecure", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=tmp_path,
        )
        assert done.returncode == 2
        assert f"127.0.0.1:{port} is in use" in done.stderr
        assert list(tmp_path.iterdir()) == []  # no superlink-<port>.db
        node = _run(
            "start-supernode.sh", "--insecure", "--superlink", "127.0.0.1:9", "--port", str(port)
        )
        assert node.returncode == 2
        assert f"--port {port} is in use" in node.stderr
        assert "Traceback" not in node.stderr


@pytest.mark.parametrize(
    "name", ["superlink-9092.db", "superlink-9092.db-wal", "superlink-9092.db-shm"]
)
def test_the_default_database_and_its_sqlite_files_are_ignored_by_git(name: str) -> None:
    """start-superlink.sh's default database in the repository root leaves no untracked files
    (SQLite keeps a -wal and a -shm file beside it while the SuperLink runs)."""
    root = DEPLOY.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(
        ["git", "-C", str(root), "check-ignore", "-q", name], capture_output=True, timeout=30
    )
    assert done.returncode == 0, f"{name} is not ignored by .gitignore"
