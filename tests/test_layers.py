"""Layers: imports point downwards only (DESIGN.md, "Layers"), checked by an AST walk.

Every ``import`` and ``from ... import`` counts, at module level, inside functions and under
``TYPE_CHECKING``, and so do string arguments of ``importlib.import_module(...)``,
``__import__(...)`` and ``importlib.util.find_spec(...)``. The core CLI's own promise is
checked by running it in a process where the upper layers and flwr cannot be imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: package -> top-level packages it may not import (the layer table of DESIGN.md)
FORBIDDEN: dict[str, frozenset[str]] = {
    "flower_edge": frozenset({"flwr", "strategies", "clients", "simulations"}),
    "strategies": frozenset({"clients", "simulations"}),
    "clients": frozenset({"strategies", "simulations"}),
}
#: calls whose first argument, when a string literal, names a module that gets imported
_DYNAMIC_IMPORTS = frozenset({"import_module", "__import__", "find_spec"})


def imported_modules(source: str) -> Iterator[tuple[int, str]]:
    """Yield ``(line, module)`` for every import in ``source``, dynamic ones included.

    Relative imports stay inside their own package and are skipped.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if (
                name in _DYNAMIC_IMPORTS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                yield node.lineno, first.value


def layer_violations(root: Path, forbidden: dict[str, frozenset[str]] = FORBIDDEN) -> list[str]:
    """Return ``"path:line: package imports module"`` for every import across layers."""
    found: list[str] = []
    for package, banned in sorted(forbidden.items()):
        for path in sorted((root / package).rglob("*.py")):
            for line, module in imported_modules(path.read_text(encoding="utf-8")):
                if module.split(".")[0] in banned:
                    rel = path.relative_to(root).as_posix()
                    found.append(f"{rel}:{line}: {package} imports {module}")
    return found


def test_every_package_imports_only_downwards() -> None:
    for package in FORBIDDEN:
        assert len(list((ROOT / package).rglob("*.py"))) > 3, f"{package} not found"
    assert layer_violations(ROOT) == []


def test_no_test_module_imports_another_test_module() -> None:
    tests = sorted((ROOT / "tests").glob("*.py"))
    assert any(p.name == "conftest.py" for p in tests)
    found = [
        f"{path.name}:{line}: imports {module}"
        for path in tests
        for line, module in imported_modules(path.read_text(encoding="utf-8"))
        if module.split(".")[0].startswith("test_") or module.split(".")[0] == "tests"
    ]
    assert found == [], "shared test helpers belong in tests/conftest.py"


#: issue 11's size targets: lines per file, lines per class
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 400


def oversized(root: Path, package: str) -> list[str]:
    """Return the files of ``package`` over MAX_FILE_LINES and its classes over MAX_CLASS_LINES."""
    found: list[str] = []
    for path in sorted((root / package).rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(root).as_posix()
        lines = len(source.splitlines())
        if lines >= MAX_FILE_LINES:
            found.append(f"{rel}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    found.append(f"{rel}: class {node.name} has {size} lines")
    return found


@pytest.mark.parametrize("package", ["strategies", "clients", "simulations"])
def test_files_and_classes_stay_small(package: str) -> None:
    assert oversized(ROOT, package) == []


def test_size_check_finds_long_files_and_classes(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    _write(tmp_path, "pkg/big.py", f"class Big:\n{body}\n")
    _write(tmp_path, "pkg/long.py", "x = 1\n" * MAX_FILE_LINES)
    _write(tmp_path, "pkg/ok.py", "class Small:\n    pass\n" + "y = 2\n" * 10)
    assert oversized(tmp_path, "pkg") == [
        f"pkg/big.py: class Big has {MAX_CLASS_LINES + 1} lines",
        f"pkg/long.py: {MAX_FILE_LINES} lines",
    ]


def _write(root: Path, rel: str, source: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source), encoding="utf-8")


def test_checker_finds_every_kind_of_import_across_layers(tmp_path: Path) -> None:
    _write(tmp_path, "flower_edge/__init__.py", "")
    _write(
        tmp_path,
        "flower_edge/bad.py",
        """\
        import flwr.app
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from strategies.edge import EdgeStrategy


        def later():
            import importlib
            from clients import task

            importlib.import_module("simulations.cli")
            __import__("flwr")
            importlib.util.find_spec("strategies")
            return task
        """,
    )
    _write(tmp_path, "strategies/loop.py", "from clients.task import Task\n")
    _write(tmp_path, "clients/app.py", "def f():\n    import strategies.edge\n")
    assert layer_violations(tmp_path) == [
        "clients/app.py:2: clients imports strategies.edge",
        "flower_edge/bad.py:1: flower_edge imports flwr.app",
        "flower_edge/bad.py:5: flower_edge imports strategies.edge",
        "flower_edge/bad.py:10: flower_edge imports clients",
        "flower_edge/bad.py:12: flower_edge imports simulations.cli",
        "flower_edge/bad.py:13: flower_edge imports flwr",
        "flower_edge/bad.py:14: flower_edge imports strategies",
        "strategies/loop.py:1: strategies imports clients.task",
    ]


def test_checker_accepts_downward_relative_and_lookalike_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "flower_edge/ok.py",
        """\
        import importlib
        import numpy
        from flower_edge import wire
        from . import radar
        import flwr_datasets  # another distribution, not flwr
        import clientsx

        def load(name):
            return importlib.import_module(name)  # not a literal: the user's model
        """,
    )
    _write(tmp_path, "strategies/ok.py", "import flwr\nfrom flower_edge import wire\n")
    _write(tmp_path, "clients/ok.py", "from flwr.app import Message\n")
    _write(tmp_path, "simulations/ok.py", "import strategies\nimport clients\n")
    assert layer_violations(tmp_path) == []


BLOCKED = (
    "import sys; sys.modules['simulations'] = sys.modules['strategies'] = "
    "sys.modules['clients'] = sys.modules['flwr'] = None; "
)


def _core_only(*argv: str) -> subprocess.CompletedProcess[str]:
    code = BLOCKED + f"from flower_edge.cli import main; sys.exit(main({list(argv)!r}))"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@pytest.mark.parametrize("command", ["profile", "analyze", "plan"])
def test_core_commands_run_without_the_upper_layers_and_flwr(command: str) -> None:
    done = _core_only(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: flower-edge {command}")


def test_an_upper_command_without_its_layer_says_why(tmp_path: Path) -> None:
    done = _core_only("simulate", "--scenario", "digits-20")
    assert done.returncode == 2
    assert "flower-edge simulate: error: not available here" in done.stderr
    assert "simulations" in done.stderr


def test_core_plan_runs_without_the_upper_layers(tmp_path: Path) -> None:
    profiles = tmp_path / "p.json"
    node = '{"id": "a", "resources": {"cpu": 1, "gpu": 1, "memory": 2, "disk": 1}}'
    profiles.write_text('{"nodes": [' + node + "]}")
    argv = ["plan", "--profiles", str(profiles), "--total-samples", "7"]
    done = _core_only(*argv, "--compute-share", "0.5", "--json")
    assert done.returncode == 0, done.stderr
    assert '"samples": 7' in done.stdout
    done = _core_only(*argv, "--compute-share", "0.5", "--plot", str(tmp_path / "r.png"))
    assert done.returncode == 2
    assert "flower-edge plan: error: --plot: cannot import the radar plot" in done.stderr


def test_plugin_commands_come_from_entry_points_and_cannot_replace_core_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib.metadata import EntryPoint

    from flower_edge import cli

    eps = [
        EntryPoint("plan", "simulations.cli", cli.COMMANDS_GROUP),  # a core name: ignored
        EntryPoint("simulate", "simulations.cli", cli.COMMANDS_GROUP),
        EntryPoint("broken", "no_such_package_h6.cli", cli.COMMANDS_GROUP),
    ]
    monkeypatch.setattr(
        cli, "entry_points", lambda group: eps if group == cli.COMMANDS_GROUP else []
    )
    modules, missing = cli.command_modules()
    assert list(modules) == [
        "flower_edge.cli_profile",
        "flower_edge.cli_analyze",
        "flower_edge.cli_plan",
        "simulations.cli",
    ]
    assert missing == {"broken": "ModuleNotFoundError: No module named 'no_such_package_h6'"}
    parser = cli.build_parser()
    assert parser.parse_args(
        ["plan", "--profiles", "p", "--total-samples", "1"]
    ).run.__module__ == ("flower_edge.cli_plan")
    assert cli.main(["broken", "--any", "thing"]) == 2
