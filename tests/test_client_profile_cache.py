"""The opt-in on-disk cache of a device's profile report."""

import json
import logging
import os
import re
from pathlib import Path

import pytest
from conftest import rated_report
from flwr.app import ConfigRecord, Context, RecordDict

from clients.examples import mlp_app
from clients.profile_cache import DEFAULT_MAX_AGE, CachedProbe, node_probe
from clients.testing import instruction
from flower_edge import wire
from flower_edge.cli import main
from flower_edge.errors import ConfigError, InputError
from flower_edge.profiling import HostProbe
from flower_edge.profiling.report import (
    ProfileReport,
)
from flower_edge.profiling.store import read_report, report_path, write_report


def _report(mode: str, cpu: float) -> ProfileReport:
    report: ProfileReport = rated_report(
        cpu, memory=50.0, disk=20.0, mode=mode, cores=2, elapsed=0.5, reason="test"
    )
    return report


class CountingProbe:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def profile(self, mode: str) -> ProfileReport:
        self.calls.append(mode)
        return _report(mode, 100.0 + len(self.calls))


def test_report_is_reused_across_probe_instances_while_fresh(tmp_path: Path) -> None:
    inner = CountingProbe()
    first = CachedProbe(inner, tmp_path).profile("quick")
    again = CachedProbe(inner, tmp_path).profile("quick")  # a new run on the same device
    assert inner.calls == ["quick"]
    assert again.evaluations == first.evaluations
    CachedProbe(inner, tmp_path).profile("full")
    assert inner.calls == ["quick", "full"]
    assert (tmp_path / "profile-quick.json").is_file()


def test_stale_report_is_measured_again(tmp_path: Path) -> None:
    inner = CountingProbe()
    probe = CachedProbe(inner, tmp_path, max_age=60.0)
    probe.profile("quick")
    path = probe.path("quick")
    old = path.stat().st_mtime - 120.0
    os.utime(path, (old, old))
    second = probe.profile("quick")
    assert inner.calls == ["quick", "quick"]
    assert second.evaluations["cpu"] == pytest.approx(102.0)


@pytest.mark.parametrize("content", ['{"host": 1}', "not json", _report("full", 5.0).to_json()])
def test_invalid_or_mismatched_report_is_ignored(
    tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "profile-quick.json").write_text(content)
    inner = CountingProbe()
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        report = CachedProbe(inner, tmp_path).profile("quick")
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert inner.calls == ["quick"]
    assert report.mode == "quick"
    assert "profile" in caplog.text


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match=r"max_age \(seconds\) must be >= 0, got -1"):
        CachedProbe(CountingProbe(), max_age=-1)
    with pytest.raises(InputError, match="mode must be one of quick, full, got 'slow'"):
        CachedProbe(CountingProbe()).profile("slow")  # type: ignore[arg-type]


# ---------------------------------------------------------------- the store (pure)


def test_store_round_trip_and_staleness(tmp_path: Path) -> None:
    report = _report("quick", 7.0)
    path = write_report(tmp_path / "new", report)
    assert path == report_path(tmp_path / "new", "quick") == tmp_path / "new" / "profile-quick.json"
    now = path.stat().st_mtime
    back = read_report(tmp_path / "new", "quick", max_age=10.0, now=now + 5.0)
    assert back is not None
    assert back.evaluations == report.evaluations
    assert read_report(tmp_path / "new", "quick", max_age=10.0, now=now + 11.0) is None  # stale
    assert read_report(tmp_path / "new", "quick", max_age=10.0, now=now - 60.0) is None  # future
    assert read_report(tmp_path / "new", "full", max_age=10.0) is None  # none stored
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["profile-quick.json"]


def test_store_names_the_file_and_field_of_a_bad_report(tmp_path: Path) -> None:
    path = report_path(tmp_path, "quick")
    path.write_text(_report("full", 5.0).to_json())
    with pytest.raises(InputError, match=r"profile-quick\.json: 'mode' is 'full', not 'quick'"):
        read_report(tmp_path, "quick", max_age=60.0)
    path.write_text('{"host": 1}')
    with pytest.raises(InputError, match=r"stored profile .*profile-quick\.json: "):
        read_report(tmp_path, "quick", max_age=60.0)
    with pytest.raises(ConfigError, match=r"max_age \(seconds\) must be >= 0"):
        read_report(tmp_path, "quick", max_age=-1.0)


# ---------------------------------------------------------------- node config (no app change)


NodeConfig = dict[str, bool | float | int | str]


def _ctx(node_config: NodeConfig | None = None) -> Context:
    config: NodeConfig = {"partition-id": 0, "num-partitions": 1, **(node_config or {})}
    return Context(run_id=1, node_id=5, node_config=config, state=RecordDict(), run_config={})


def test_node_probe_follows_the_node_config(tmp_path: Path) -> None:
    assert isinstance(node_probe(_ctx()), HostProbe)  # no folder: measure every first contact
    probe = node_probe(_ctx({wire.PROFILE_CACHE: str(tmp_path)}))
    assert isinstance(probe, CachedProbe)
    assert (probe.cache_dir, probe.max_age) == (tmp_path, DEFAULT_MAX_AGE)
    probe = node_probe(_ctx({wire.PROFILE_CACHE: str(tmp_path), wire.PROFILE_MAX_AGE: 60}))
    assert isinstance(probe, CachedProbe)
    assert probe.max_age == 60.0


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({wire.PROFILE_CACHE: ""}, "node config 'profile-cache' must be a folder"),
        ({wire.PROFILE_CACHE: 3}, "node config 'profile-cache' must be a folder"),
        (
            {wire.PROFILE_CACHE: "/tmp", wire.PROFILE_MAX_AGE: -5},
            "node config 'profile-max-age' must be >= 0, got -5",
        ),
        (
            {wire.PROFILE_CACHE: "/tmp", wire.PROFILE_MAX_AGE: "day"},
            "node config 'profile-max-age' must be a number",
        ),
    ],
)
def test_node_probe_rejects_bad_node_config(config: NodeConfig, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        node_probe(_ctx(config))


def test_the_clientapp_answers_from_the_enrollment_profile(tmp_path: Path) -> None:
    """A stored report in the node's ``profile-cache`` folder answers the profile request."""
    write_report(tmp_path, _report("quick", 123.0))
    app = mlp_app
    msg = instruction(
        RecordDict({wire.CONFIG: ConfigRecord({wire.PROFILE_MODE: "quick"})}),
        wire.PROFILE_MESSAGE_TYPE,
        5,
    )
    ctx = Context(
        run_id=1,
        node_id=5,
        node_config={"partition-id": 0, "num-partitions": 4, wire.PROFILE_CACHE: str(tmp_path)},
        state=RecordDict(),
        run_config={},
    )
    reply = app(msg, ctx)
    assert not reply.has_error(), reply.error
    rec = reply.content[wire.PROFILE]
    assert rec[wire.EVAL_CPU] == pytest.approx(123.0)
    assert json.loads(str(rec[wire.PROFILE_REPORT]))["mode"] == "quick"


def test_cli_cache_stores_the_report_for_the_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "enrolled" / "node-1"
    code = main(
        ["profile", "--quick", "--json", "--disk-dir", str(tmp_path), "--cache", str(folder)]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert f"stored {folder / 'profile-quick.json'}" in err
    stored = read_report(folder, "quick", max_age=60.0)
    assert stored is not None
    assert stored.to_dict() == json.loads(out)
    assert [p.name for p in folder.iterdir()] == ["profile-quick.json"]  # no temporary files


def test_cli_cache_that_cannot_be_written_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    code = main(["profile", "--quick", "--cache", str(tmp_path / "file")])
    _, err = capsys.readouterr()
    assert code == 2
    assert f"--cache {str(tmp_path / 'file')!r} is not a writable folder" in err


def test_cli_cache_holding_a_folder_of_the_reports_name_fails_before_profiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a new-user probe: the folder was found after the profile, which was lost."""
    (tmp_path / "profile-quick.json").mkdir()

    def never(*_: object, **__: object) -> None:
        raise AssertionError("profiled before the --cache check")

    monkeypatch.setattr(HostProbe, "profile", never)
    code = main(["profile", "--quick", "--cache", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert "--cache" in err
    assert "profile-quick.json exists and is not a file" in err


def test_cli_cache_that_fails_after_profiling_keeps_the_report_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import flower_edge.profiling.store as store

    monkeypatch.setattr(HostProbe, "profile", lambda self, mode: _report(mode, 100.0))
    real_replace = os.replace

    def full_disk(src: str, dst: str) -> None:
        if str(dst).endswith("profile-quick.json"):
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", full_disk)
    code = main(["profile", "--quick", "--json", "--cache", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2
    assert json.loads(out)["mode"] == "quick"  # the report was printed all the same
    assert "No space left on device" in err
    assert "on stdout only" in err
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_a_full_disk_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small report sits in the file's buffer until the file is closed: on a full disk the
    error comes from that close, which left the temporary file behind (only ``write`` and
    ``os.replace`` failures removed it)."""
    import tempfile

    real = tempfile.NamedTemporaryFile

    class FullDisk:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.file = real(*args, **kwargs)  # type: ignore[call-overload]

        def __enter__(self) -> object:
            return self.file.__enter__()

        def __exit__(self, *exc: object) -> None:
            self.file.__exit__(*exc)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", FullDisk)
    with pytest.raises(OSError, match="No space left on device"):
        write_report(tmp_path, _report("quick", 100.0))
    assert list(tmp_path.iterdir()) == []
