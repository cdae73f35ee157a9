"""The deploy/ scripts check their arguments before starting anything (fast: nothing starts)."""

from __future__ import annotations

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
    ],
)
def test_bad_arguments_exit_2_naming_the_option(script: str, args: list[str], message: str) -> None:
    done = _run(script, *args)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
