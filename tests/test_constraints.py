"""The set-up pins the versions the recorded figures were measured with (``constraints.txt``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            assert pinned, f"constraints.txt: {line!r} is not an exact pin"
            pins[name.strip()] = pinned.strip()
    return pins


def test_setup_installs_with_the_constraints() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    installs = [ln for ln in setup.splitlines() if "pip install" in ln]
    assert installs
    assert all("-c constraints.txt" in ln for ln in installs)
    # a change of the pins reinstalls (the stamp covers both files)
    assert "cat pyproject.toml constraints.txt | sha256sum" in setup


@pytest.mark.parametrize(("name", "pinned"), sorted(_pins().items()))
def test_installed_versions_are_the_pinned_ones(name: str, pinned: str) -> None:
    try:
        installed = version(name)
    except PackageNotFoundError:  # pragma: no cover - every pin is a dependency
        pytest.fail(f"{name} is pinned in constraints.txt but not installed")
    assert installed.split("+", 1)[0] == pinned, (
        f"{name} {installed} is installed, constraints.txt pins {pinned}: run scripts/setup.sh"
    )


def test_numerics_packages_are_pinned() -> None:
    assert {"torch", "numpy", "scipy", "scikit-learn", "mnist1d", "flwr"} <= set(_pins())
