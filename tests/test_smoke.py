import pytest

from flower_edge import models, wire
from flower_edge.cli import main
from flower_edge.errors import InputError


def test_wire_keys_are_unique_and_hyphenated() -> None:
    keys = {k: v for k, v in vars(wire).items() if k.isupper() and isinstance(v, str)}
    assert len(set(keys.values())) == len(keys) - 1  # PROFILE_ACTION and PROFILE share "profile"
    assert all("_" not in v for v in keys.values())


@pytest.mark.parametrize(
    ("name", "shape"), [("mlp", (4, 64)), ("cnn", (4, 1, 8, 8)), ("cnn1d", (4, 40))]
)
def test_bundled_models_run(name: str, shape: tuple[int, ...]) -> None:
    import torch

    out = models.build_model(name)(torch.zeros(shape))
    assert out.shape == (4, 10)


def test_unknown_model_lists_valid_names() -> None:
    with pytest.raises(InputError, match="bundled models: .*mlp"):
        models.build_model("nope")


def test_cli_requires_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def _console(main_body: str, thread_seconds: int) -> tuple[int, float, str]:
    """Run ``console_main`` in a child whose ``main`` is ``main_body`` (a lambda's body),
    beside a non-daemon thread that sleeps ``thread_seconds``."""
    import subprocess
    import sys
    import time

    code = (
        "import threading, time, flower_edge.cli as cli\n"
        f"threading.Thread(target=time.sleep, args=({thread_seconds},)).start()\n"
        f"cli.main = lambda: {main_body}\n"
        "cli.console_main()\n"
    )
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    return done.returncode, time.monotonic() - t0, done.stderr


def test_ctrl_c_exits_at_once_although_a_library_thread_runs() -> None:
    """Found by a new-user probe: after Ctrl-C in ``simulate`` under Ray the process printed
    ``interrupted`` and then hung, waiting for Flower's non-daemon simulation threads."""
    code, seconds, stderr = _console("130", thread_seconds=120)
    assert code == 130
    assert seconds < 30  # the thread sleeps for 120 s
    assert "Traceback" not in stderr


def test_console_exit_codes_pass_through() -> None:
    code, seconds, _ = _console("2", thread_seconds=120)
    assert code == 2
    assert seconds < 30  # a failed command does not wait for a library's threads
    code, seconds, _ = _console("0", thread_seconds=1)
    assert code == 0
    assert seconds >= 1  # a successful one waits for them, as Python does


def test_a_failure_under_a_library_thread_exits_with_its_traceback() -> None:
    """Found by a new-user probe: ``simulate --ray-address auto`` without a cluster printed
    Flower's traceback and then hung on its simulation threads."""
    code, seconds, stderr = _console("(_ for _ in ()).throw(RuntimeError('boom'))", 120)
    assert code == 1
    assert seconds < 30
    assert "RuntimeError: boom" in stderr


def test_a_closed_stdout_ends_quietly() -> None:
    """Found by a new-user probe: ``flower-edge ... --json | true`` ended in a traceback."""
    code, _, stderr = _console("(_ for _ in ()).throw(BrokenPipeError(32, 'Broken pipe'))", 0)
    assert code == 141
    assert "Traceback" not in stderr
