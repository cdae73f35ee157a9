"""Bad input of the command line: a one-line error naming the option, exit code 2.

``plan --plot`` paths, non-UTF-8 input files, ``analyze`` batches that cannot be allocated or
do not fit the model in the shapes-only mode, ``strategy = "all"`` in a run config,
unreachable ``--ray-address``, and the smaller checks and notes of ``simulate`` and
``profile``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from conftest import fails, plan_argv

from flower_edge.cli import main
from flower_edge.errors import ConfigError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "simulations.md"


# ---------------------------------------------------------------- plan --plot
def test_plan_plot_into_an_existing_folder(
    profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fails(plan_argv(profiles, "--plot", str(tmp_path)), capsys, "--plot", "is a folder")


def test_plan_plot_in_a_missing_folder(
    profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "nope" / "r.png"
    fails(plan_argv(profiles, "--plot", str(target)), capsys, "--plot", "does not exist")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs")
def test_plan_plot_in_sysfs(profiles: str, capsys: pytest.CaptureFixture[str]) -> None:
    # sysfs takes no new file, even from root
    fails(plan_argv(profiles, "--plot", "/sys/kernel/r.png"), capsys, "--plot", "not writable")
    assert not Path("/sys/kernel/r.png").exists()


def test_plan_plot_in_an_unwritable_folder(
    profiles: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import tempfile

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    line = fails(plan_argv(profiles, "--plot", str(tmp_path / "r.png")), capsys, "--plot")
    assert "is not writable: Permission denied" in line


def test_plan_plot_write_error_names_plot(
    profiles: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import flower_edge.cli_plan as cli_plan

    def plotter(
        evaluations: Any, share: float, labels: Sequence[str], path: str, **options: bool
    ) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli_plan, "radar_plotter", lambda: plotter)
    line = fails(plan_argv(profiles, "--plot", str(tmp_path / "r.png")), capsys, "--plot")
    assert "No space left on device" in line


def test_plan_plot_still_writes(
    profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    target = tmp_path / "r.png"
    assert main(plan_argv(profiles, "--plot", str(target))) == 0
    assert target.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.json", "r.png"]  # no trial
    capsys.readouterr()


def test_radar_plot_closes_the_figure_when_writing_fails(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from simulations.plots import plot_radar

    before = set(plt.get_fignums())
    with pytest.raises(IsADirectoryError):
        plot_radar([[1.0, 0.0, 2.0, 1.0], [2.0, 1.0, 1.0, 1.0]], 0.5, ["a", "b"], tmp_path)
    assert set(plt.get_fignums()) == before


# ---------------------------------------------------------------- plan inputs
@pytest.mark.parametrize("option", ["--profiles", "--observations"])
def test_plan_non_utf8_file(
    option: str, profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "b.json"
    bad.write_bytes(b"\xff\xfe")
    argv = plan_argv(profiles)
    if option == "--profiles":
        argv[argv.index(profiles)] = str(bad)
    else:
        argv += ["--observations", str(bad)]
    fails(argv, capsys, option, str(bad), "not UTF-8")


@pytest.mark.parametrize("option", ["--profiles", "--observations"])
def test_plan_reads_utf8_with_a_byte_order_mark(
    option: str, profiles: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file saved by a Windows editor starts with a BOM: it was 'not valid JSON'."""
    argv = plan_argv(profiles, "--json")
    if option == "--profiles":
        source = Path(profiles)
        argv[argv.index(profiles)] = str(tmp_path / "bom.json")
    else:
        source = tmp_path / "o.json"
        source.write_text("{}", encoding="utf-8")
        argv += ["--observations", str(tmp_path / "bom.json")]
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["nodes"]


def test_plan_negative_max_rows(profiles: str, capsys: pytest.CaptureFixture[str]) -> None:
    fails(plan_argv(profiles, "--max-rows", "-1"), capsys, "--max-rows must be an integer >= 0")


# ---------------------------------------------------------------- analyze
def test_analyze_huge_batch_is_rejected_before_allocating(
    capsys: pytest.CaptureFixture[str],
) -> None:
    t0 = time.perf_counter()
    fails(["analyze", "mlp", "--input-shape", "99999999999,64"], capsys, "--input-shape")
    assert time.perf_counter() - t0 < 30


def test_analyze_allocation_failure_names_input_shape(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    def no_memory(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory\nmore detail")

    monkeypatch.setattr(torch, "zeros", no_memory)
    line = fails(["analyze", "mlp", "--input-shape", "32,64"], capsys, "--input-shape 32,64")
    assert "can't allocate memory" in line
    assert "more detail" not in line


@pytest.mark.parametrize("text", ["32,,64", "32,64,", ",32,64", "32, ,64"])
def test_analyze_empty_shape_field(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    fails(["analyze", "mlp", "--input-shape", text], capsys, "--input-shape", repr(text))


def test_analyze_shapes_only_rejects_a_dtype_that_does_not_fit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["analyze", "mlp", "--input-shape", "32,64", "--input-dtype", "int64"]
    shapes_only = fails(argv, capsys, "does not fit the model", "--input-dtype")
    assert "Long" in shapes_only
    fails([*argv, "--execute"], capsys, "does not fit the model", "Long")


def test_plan_model_rejects_a_dtype_that_does_not_fit(
    profiles: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--profiles", profiles, "--total-samples", "100", "--model", "mlp"]
    argv += ["--input-shape", "32,64", "--input-dtype", "float64"]
    fails(argv, capsys, "does not fit the model", "--input-dtype")


def test_analyze_fit_check_leaves_the_model_as_it_was() -> None:
    import torch
    from torch import nn

    from flower_edge.cli_analyze import check_input_fits

    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_input_fits(model, (32, 4), "float32")
    assert model.training
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


# ---------------------------------------------------------------- run config
def test_run_config_strategy_all() -> None:
    from simulations.settings import SimSettings

    with pytest.raises(ConfigError, match=r"^run config 'strategy' must name one strategy") as e:
        SimSettings.from_run_config({"strategy": "all"})
    assert "edge, edge-seed, fedavg, fedbuff, fedasync" in str(e.value)
    assert "flower-edge simulate --strategy all" in str(e.value)
    with pytest.raises(ConfigError, match=r"^strategy must name one strategy"):
        SimSettings.create("digits-20", "all")
    with pytest.raises(ConfigError, match=r"^run config 'strategy' must name one strategy") as e:
        SimSettings.from_run_config({"strategy": "fedprox"})  # unknown: 'all' is not offered
    assert "(edge, edge-seed, fedavg, fedbuff, fedasync), got 'fedprox'" in str(e.value)


# ---------------------------------------------------------------- simulate
@pytest.fixture
def closed_port() -> int:
    """A local port that nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A local gRPC server's port (Ray's GCS and Ray Client server speak gRPC)."""
    from concurrent import futures

    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(None)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never answers (not gRPC)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


@pytest.mark.parametrize("form", ["127.0.0.1:{}", "ray://127.0.0.1:{}"])
def test_check_ray_address_wants_grpc_not_just_tcp(
    form: str, silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a new-user probe: a port that accepts TCP but is no Ray head (the dashboard's)
    passed the check; Ray then retried "Failed to connect to GCS" for 5 minutes."""
    import http.server
    import threading

    from flower_edge.errors import InputError
    from simulations.cli import check_ray_address

    monkeypatch.delenv("RAY_USE_TLS", raising=False)
    with pytest.raises(InputError, match=r"accepts connections but gives no gRPC reply"):
        check_ray_address(form.format(silent_port), timeout=0.5)
    web = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:  # an HTTP/1.1 server (such as Ray's dashboard) answers, but not with HTTP/2
        with pytest.raises(InputError, match=r"no gRPC reply .*not the dashboard's 8265"):
            check_ray_address(f"127.0.0.1:{web.server_address[1]}", timeout=2.0)
    finally:
        web.shutdown()
        web.server_close()
    monkeypatch.setenv("RAY_USE_TLS", "1")  # a TLS head takes no plain preface: TCP only
    check_ray_address(form.format(silent_port), timeout=0.5)


def test_simulate_unreachable_ray_address(
    closed_port: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["simulate", "--strategy", "edge", "--rounds", "1", "--out", str(out)]
    t0 = time.perf_counter()
    fails([*argv, "--ray-address", f"127.0.0.1:{closed_port}"], capsys, "--ray-address")
    assert time.perf_counter() - t0 < 30
    assert not out.exists()  # nothing written, no engine


def test_check_ray_address(listening_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from flower_edge.errors import InputError
    from simulations.cli import check_ray_address

    check_ray_address(f"127.0.0.1:{listening_port}")
    check_ray_address(f"localhost:{listening_port}")
    with pytest.raises(InputError, match=r"^--ray-address .*port must be in 1-65535"):
        check_ray_address("127.0.0.1:70000")
    with pytest.raises(InputError, match=r"^--ray-address must not be empty"):
        check_ray_address(" ")

    def timeout(*args: Any, **kwargs: Any) -> Any:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", timeout)
    with pytest.raises(InputError, match=r"^--ray-address '10\.0\.0\.1:6379'.*within 5 s"):
        check_ray_address("10.0.0.1:6379")
    check_ray_address("local")  # no connection attempted: create_connection would raise
    with pytest.raises(InputError, match=r"^--ray-address 'ray://head:10001'.*Ray Client"):
        check_ray_address("ray://head:10001")


@pytest.mark.parametrize("bad", ["nonsense", "127.0.0.1:abc", "ray://h:abc", "host:"])
def test_check_ray_address_names_the_forms(bad: str) -> None:
    """Found by a new-user probe: these went to Ray, which printed a traceback and hung."""
    from flower_edge.errors import InputError
    from simulations.cli import check_ray_address

    with pytest.raises(InputError, match=r"expected auto, local, HOST:PORT or ray://HOST:PORT"):
        check_ray_address(bad)


def test_check_ray_address_auto_needs_a_running_cluster(
    listening_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray._private import services

    from flower_edge.errors import InputError
    from simulations.cli import check_ray_address

    def none_found(addr: str, temp_dir: str | None = None) -> str | None:
        raise ConnectionError("Could not find any running Ray instance")

    monkeypatch.setattr(services, "canonicalize_bootstrap_address", none_found)
    with pytest.raises(InputError, match=r"^--ray-address auto: no running Ray cluster"):
        check_ray_address("auto")
    monkeypatch.setattr(
        services, "canonicalize_bootstrap_address", lambda a, t=None: f"127.0.0.1:{listening_port}"
    )
    check_ray_address("auto")  # resolved to a HOST:PORT that answers


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--clients", "1"], "--clients must be an integer >= 2, got 1"),
        (["--clients", "5000"], "--clients must be <= 179 for scenario 'digits-20'"),
        (["--heterogeneity", "0.5"], "--heterogeneity must be in [1, 1000000], got 0.5"),
        (["--threshold", "0"], "--threshold K must be >= 1 and < clients (20), got 0"),
        (["--clients", "4", "--threshold", "4"], "--threshold K must be >= 1 and < clients (4)"),
        (["--scenario", "nope"], "--scenario: unknown scenario 'nope'"),
        (["--strategy", "nope"], "--strategy: unknown strategy 'nope'"),
    ],
)
def test_simulate_messages_name_the_options(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = fails(["simulate", "--engine", "inprocess", "--out", str(tmp_path / "o"), *argv], capsys)
    assert re.search(r"error: " + re.escape(message), line), line
    assert not (tmp_path / "o").exists()


def _notes(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run ``simulate`` up to ``--out`` (a file: exit 2 before the engine); return the notes."""
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    assert main(["simulate", "--strategy", "edge", "--out", str(blocker), *argv]) == 2
    err = capsys.readouterr().err
    assert "--out" in err
    return [line for line in err.splitlines() if ": note: " in line]


def test_simulate_notes_a_lowered_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (note,) = _notes(["--clients", "2"], tmp_path, capsys)
    assert "--clients 2" in note
    assert "K lowered from 4 to 1" in note
    # fewer clients keep K's share of the federation: the run stays semi-asynchronous
    (note,) = _notes(["--clients", "10"], tmp_path, capsys)
    assert "K lowered from 4 to 2" in note
    assert _notes(["--clients", "2", "--threshold", "1"], tmp_path, capsys) == []
    assert _notes(["--clients", "20"], tmp_path, capsys) == []
    assert _notes(["--clients", "40"], tmp_path, capsys) == []


def test_simulate_notes_ignored_engine_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--engine", "inprocess", "--ray-address", "127.0.0.1:1", "--cpus", "2"]
    (note,) = _notes(argv, tmp_path, capsys)  # no connection attempted either
    assert "--ray-address and --cpus are ignored with --engine inprocess" in note
    (note,) = _notes(["--engine", "inprocess", "--cpus", "2"], tmp_path, capsys)
    assert "--cpus is ignored with --engine inprocess" in note
    (note,) = _notes(["--ray-address", "local", "--cpus", "2"], tmp_path, capsys)
    assert "--cpus is ignored with --ray-address" in note
    assert _notes(["--engine", "inprocess"], tmp_path, capsys) == []
    # found by a new-user probe: --cpus 1000 on 2 cores started 12 workers and stalled
    many = str((os.cpu_count() or 1) + 1)
    (note,) = _notes(["--cpus", many], tmp_path, capsys)
    assert f"--cpus {many} is more than this machine's" in note
    assert _notes(["--cpus", "1"], tmp_path, capsys) == []


def test_simulate_list_is_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    from simulations.scenarios import SCENARIOS

    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(SCENARIOS)
    starts = {
        line.index(sc.description) for line, sc in zip(lines, SCENARIOS.values(), strict=True)
    }
    assert len(starts) == 1, lines
    for line, name in zip(lines, SCENARIOS, strict=True):
        assert line.startswith(name + " ")


def test_docs_list_every_scenario() -> None:
    from simulations.scenarios import SCENARIOS

    rows = [
        line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith("| `")
    ]
    for name in SCENARIOS:
        assert any(row.startswith(f"| `{name}`") for row in rows), name


# ---------------------------------------------------------------- profile
@pytest.mark.parametrize("option", ["--cache", "--disk-dir"])
@pytest.mark.parametrize("value", ["", "  "])
def test_profile_empty_folder_name(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fails(["profile", "--quick", option, value], capsys, f"{option} must name a folder")


def test_file_and_folder_options_expand_a_tilde(
    profiles: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--profiles=~/nodes.json`` and ``--disk-dir=~/data``: the shell leaves a ``~`` after
    ``=`` alone; they said 'No such file' and 'does not exist' (--cache, --out and --plot
    expanded it)."""
    from flower_edge import cli_profile

    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(plan_argv("~/nodes.json", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["nodes"]
    assert cli_profile._disk_dir("~") == tmp_path


def test_analyze_finds_a_model_file_in_the_current_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a new-user probe: ``flower-edge analyze mymodel:make`` beside ``mymodel.py``
    said "No module named 'mymodel'": the script's ``sys.path`` starts at its ``bin`` folder."""
    import sys

    (tmp_path / "user_model_s14.py").write_text(
        "from torch import nn\n\ndef make():\n    return nn.Sequential(nn.Linear(8, 2))\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "user_model_s14", raising=False)
    argv = ["analyze", "user_model_s14:make", "--input-shape", "4,8", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["operators"]
    fails(["analyze", "no_model_s14:make", "--input-shape", "4,8"], capsys, "No module named")


def test_simulate_takes_ray_address_from_the_environment(
    closed_port: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``RAY_ADDRESS`` set and no ``--ray-address``: ray.init attaches to it and refused the
    ``num_cpus`` of a local instance; it is now taken as ``--ray-address`` and checked."""
    from simulations.runner import _backend_config

    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed_port}")
    out = tmp_path / "out"
    argv = ["simulate", "--strategy", "edge", "--rounds", "1", "--out", str(out)]
    fails(argv, capsys, "--ray-address")
    assert not out.exists()
    assert "num_cpus" not in _backend_config(None, 1.0, None)["init_args"]
    monkeypatch.delenv("RAY_ADDRESS")
    assert _backend_config(3, 1.0, None)["init_args"]["num_cpus"] == 3
