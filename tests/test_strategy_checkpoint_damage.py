"""Resuming from a damaged checkpoint folder: an error naming the file, or a logged loss.

Found by a new-user probe (session 13): a truncated ``.npz``, a ``state.json`` of another
shape, a cut audit line or a damaged buffer raised ``BadZipFile``, ``EOFError``,
``TypeError`` or ``JSONDecodeError`` from inside the library, and a NaN global model resumed
into a run whose every update was then rejected until it stalled.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, flwr_logs, model

from flower_edge.errors import InputError
from strategies import EdgeStrategy, InProcessGrid, ManualClock, ShareConfig, VirtualClock
from strategies.checkpoint import AUDIT_FILE, BUFFER_FILE, FINISHED_FILE, STATE_FILE

pytestmark = pytest.mark.timeout(60)

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="seed")


def _edge(directory: Path, resume: bool) -> EdgeStrategy:
    return EdgeStrategy(
        threshold=3,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        checkpoint_dir=directory,
        resume=resume,
    )


def _run(rounds: int, directory: Path, resume: bool = False) -> tuple[EdgeStrategy, InProcessGrid]:
    grid = InProcessGrid(ToyEdge(speeds=[10.0, 20.0, 40.0, 80.0]), 4)
    strategy = _edge(directory, resume)
    strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return strategy, grid


def _killed_after_two(directory: Path) -> None:
    """Leave the checkpoint of a run killed after its second aggregation."""
    _run(2, directory)
    (directory / FINISHED_FILE).unlink()


def _global_file(directory: Path) -> Path:
    return next(directory.glob("global-*.npz"))


def _refused_on_resume(directory: Path, match: str) -> None:
    """Resuming from ``directory`` raises an InputError matching ``match`` before any message."""
    grid = InProcessGrid(ToyEdge(), 4)
    strategy = _edge(directory, resume=True)
    with pytest.raises(InputError, match=match):
        strategy.start(grid, model(0.0), num_rounds=4)
    assert grid.pushed == []


def _truncate(path: Path, size: int | None = None) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 if size is None else size])


def _buffer_one(directory: Path, arrays: list[np.ndarray], **fields: object) -> None:
    """Put one accepted update of node 1001 into the checkpoint's buffer."""
    np.savez(directory / "update-1001-99.npz", **{f"a{i}": a for i, a in enumerate(arrays)})
    entry: dict[str, object] = {
        "node": 1001,
        "job": 99,
        "base_version": 2,
        "num_examples": 100,
        "share": 100,
        "delay": 1.0,
        "received": 1.0,
        "late": False,
        "train_loss": None,
        "app_metrics": {},
        "file": "update-1001-99.npz",
    }
    entry.update(fields)
    (directory / BUFFER_FILE).write_text(json.dumps([entry]))


def _good_update() -> list[np.ndarray]:
    return [np.ones(3, np.float32), np.array([1], np.int64)]


def _state_as(value: object) -> Callable[[Path], None]:
    return lambda d: (d / STATE_FILE).write_text(json.dumps(value))


def _state_field(field: str, value: object) -> Callable[[Path], None]:
    def damage(d: Path) -> None:
        state = json.loads((d / STATE_FILE).read_text())
        state[field] = value
        (d / STATE_FILE).write_text(json.dumps(state))

    return damage


UNREADABLE: dict[str, tuple[Callable[[Path], None], str]] = {
    "state-a-list": (_state_as([1, 2]), "state.json is malformed: TypeError"),
    "state-keys-a-number": (_state_field("keys", 5), "state.json is malformed: TypeError"),
    "global-truncated": (lambda d: _truncate(_global_file(d)), r"global-000002.npz cannot be read"),
    "global-empty": (lambda d: _truncate(_global_file(d), 0), "global-000002.npz cannot be read"),
    "global-garbage": (
        lambda d: _global_file(d).write_bytes(b"PK\x03\x04" + b"x" * 64),
        "global-000002.npz cannot be read",
    ),
    "global-lacks-an-array": (
        lambda d: np.savez(_global_file(d), a0=np.zeros(3, np.float32)),
        r"global-000002.npz lacks the arrays \['a1'\]",
    ),
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_an_unreadable_checkpoint_is_an_input_error_naming_the_file(
    tmp_path: Path, name: str
) -> None:
    damage, match = UNREADABLE[name]
    _killed_after_two(tmp_path)
    damage(tmp_path)
    _refused_on_resume(tmp_path, match)


def test_a_nan_global_model_is_refused_before_any_message(tmp_path: Path) -> None:
    # it resumed, every update on it was rejected as NaN, and the run stalled
    _killed_after_two(tmp_path)
    arrays = {"a0": np.array([1.0, np.nan, 1.0], np.float32), "a1": np.array([5], np.int64)}
    np.savez(_global_file(tmp_path), **arrays)  # type: ignore[arg-type]
    _refused_on_resume(tmp_path, "array 'w' holds NaN or Inf")


def test_a_cut_last_audit_line_is_dropped_and_the_run_resumes(tmp_path: Path) -> None:
    # a run killed while appending the audit of its third aggregation
    _killed_after_two(tmp_path)
    with (tmp_path / AUDIT_FILE).open("a") as handle:
        handle.write('{"base_version": 2, "delay": 1.5, "job": 1')
    with flwr_logs() as logs:
        strategy, _ = _run(4, tmp_path, resume=True)
    assert len(strategy.history) == 4
    assert [m for m in logs.messages(logging.WARNING) if "last line is cut" in m]
    audit = [json.loads(line) for line in (tmp_path / AUDIT_FILE).read_text().splitlines()]
    assert sorted({e["round"] for e in audit}) == [1, 2, 3, 4]
    assert len(audit) == sum(len(h.participants) for h in strategy.history)


def test_a_damaged_audit_line_before_the_last_is_an_input_error(tmp_path: Path) -> None:
    _killed_after_two(tmp_path)
    lines = (tmp_path / AUDIT_FILE).read_text().splitlines()
    lines[1] = '{"round": "two"}'
    (tmp_path / AUDIT_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="audit.jsonl line 2 is not an audit entry"):
        _run(4, tmp_path, resume=True)


BUFFER_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "list-truncated": (
        lambda d: (d / BUFFER_FILE).write_text('[{"node": 1001, "job'),
        "buffered updates lost: buffer.json cannot be read",
    ),
    "list-a-dict": (
        lambda d: (d / BUFFER_FILE).write_text('{"node": 1001}'),
        "buffer.json holds a dict, not a list",
    ),
    "arrays-truncated": (
        lambda d: (_buffer_one(d, _good_update()), _truncate(d / "update-1001-99.npz")),
        "update-1001-99.npz cannot be read",
    ),
    "entry-malformed": (
        lambda d: _buffer_one(d, _good_update(), share="all"),
        "buffer.json entry is malformed",
    ),
    "arrays-nan": (
        lambda d: _buffer_one(d, [np.full(3, np.nan, np.float32), np.array([1], np.int64)]),
        "buffered update of node 1001 lost: array 0 contains NaN or Inf",
    ),
}


@pytest.mark.parametrize("name", sorted(BUFFER_DAMAGE))
def test_a_damaged_buffer_is_logged_as_lost_and_the_run_resumes(tmp_path: Path, name: str) -> None:
    damage, match = BUFFER_DAMAGE[name]
    _killed_after_two(tmp_path)
    damage(tmp_path)
    with flwr_logs() as logs:
        strategy, _ = _run(4, tmp_path, resume=True)
    assert len(strategy.history) == 4
    assert all(99 not in h.job_ids for h in strategy.history)
    assert [m for m in logs.messages(logging.WARNING) if match in m], logs.messages()


def test_a_readable_buffered_update_is_still_restored(tmp_path: Path) -> None:
    # the counterpart of the damaged buffers: the same entry, intact, is aggregated once
    _killed_after_two(tmp_path)
    _buffer_one(tmp_path, _good_update())
    strategy, _ = _run(4, tmp_path, resume=True)
    assert [h.round for h in strategy.history if 99 in h.job_ids] == [3]
