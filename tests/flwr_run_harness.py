"""Run ``flwr run APP --stream`` offline, as a user would, and clean up after it.

``flwr run`` on the ``local`` connection starts a SuperLink with Flower's simulation engine and
leaves it running: :func:`flwr_run` stops it (and its descendants) by process id afterwards,
found by its ``FLWR_HOME``, which is a temporary folder per call. Every wait has a deadline.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil

VENV_BIN = Path(sys.executable).parent

__all__ = ["VENV_BIN", "flwr_run"]


def _local_superlinks(flwr_home: Path) -> list[psutil.Process]:
    """Return the SuperLinks that ``flwr run`` started with this ``FLWR_HOME``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if "flower-superlink" not in " ".join(proc.info["cmdline"] or []):
                continue
            if proc.environ().get("FLWR_HOME") == str(flwr_home):
                found.append(proc)
    return found


def _stop(procs: list[psutil.Process]) -> None:
    """Stop each process and its descendants by pid: SIGTERM, then SIGKILL past 15 s."""
    members: list[psutil.Process] = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            members += [proc, *proc.children(recursive=True)]
    for member in members:
        with contextlib.suppress(psutil.Error):
            member.terminate()
    _, alive = psutil.wait_procs(members, timeout=15)
    for member in alive:
        with contextlib.suppress(psutil.Error):
            member.kill()


def flwr_run(app: Path, workdir: Path, extra: list[str], timeout: float) -> str:
    """Run ``flwr run APP --stream EXTRA`` offline in ``workdir``; return its output.

    The local SuperLink that ``flwr run`` starts is stopped by its pid afterwards.
    """
    home = workdir / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    # Ray's socket paths must stay under 108 bytes: a short folder, not one under workdir
    ray = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    env = dict(os.environ)
    env.update(
        FLWR_HOME=str(home),
        RAY_TMPDIR=str(ray),
        FLWR_TELEMETRY_ENABLED="0",
        FLWR_DISABLE_UPDATE_CHECK="1",
        FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    argv = [str(VENV_BIN / "flwr"), "run", str(app), "--stream", *extra]
    try:
        done = subprocess.run(
            argv,
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()  # type: ignore[union-attr]
        raise AssertionError(
            f"flwr run did not end within {timeout:.0f} s:\n{out[-4000:]}"
        ) from None
    finally:
        _stop(_local_superlinks(home))
        shutil.rmtree(ray, ignore_errors=True)
