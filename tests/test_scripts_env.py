"""``scripts/env.sh``: the temporary folder it makes is removed by the scripts that source it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in bash after sourcing env.sh with the remover trapped, as run.sh does."""
    body = f'source "{ROOT}/scripts/env.sh"\ntrap flower_edge_remove_tmp EXIT\n{script}'
    return subprocess.run(
        ["bash", "-c", body], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("FLOWER_EDGE_TMP", "FLWR_HOME", "RAY_TMPDIR")
    }
    env.update(extra)
    return env


def test_own_folder_removed_and_exit_status_kept() -> None:
    done = _run(
        'echo "$FLOWER_EDGE_TMP"; test -d "$FLWR_HOME" && test -d "$RAY_TMPDIR"; exit 3', _env()
    )
    assert done.returncode == 3, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("flower-edge."), folder
    assert not folder.exists()


def test_callers_folder_left_alone(tmp_path: Path) -> None:
    given = tmp_path / "mine"
    given.mkdir()
    done = _run('echo "$FLOWER_EDGE_TMP"', _env(FLOWER_EDGE_TMP=str(given)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(given)
    assert (given / "flwr-home").is_dir()


def test_scripts_trap_the_remover() -> None:
    for name in ("scripts/run.sh", "scripts/test.sh", "deploy/ci.sh"):
        text = (ROOT / name).read_text()
        assert "trap flower_edge_remove_tmp EXIT" in text, name
        assert "exec " not in text.split("trap flower_edge_remove_tmp EXIT", 1)[1], name
