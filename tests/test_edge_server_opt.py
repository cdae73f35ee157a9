"""``EdgeStrategy(server_opt=...)``: a server optimizer on the mean delta (Reddi et al. 2021).

Checked against brute-force references: every candidate model (the mean and each
leave-one-out mean) is ``x + lr * u(step)`` with the optimizer's state untouched, the state
takes exactly the step of the model that became the global one, ``"sgd"`` is the plain rule,
and a resumed run continues with the saved moments.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import ToyEdge, accuracy_fn, as_numpy, flwr_logs, model

from flower_edge.errors import ConfigError, InputError
from flower_edge.server_opt import ServerOptConfig
from strategies import (
    EdgeStrategy,
    InProcessGrid,
    ManualClock,
    ShareConfig,
    ValuationConfig,
    VirtualClock,
)
from strategies.edge import _StepSum
from strategies.resume import OPTIMIZER_FILE

SHARES = ShareConfig(profile=False, total_samples=400, rebalance="off")


def _adam_direction(
    step: np.ndarray, v: np.ndarray, beta2: float, tau: float
) -> tuple[np.ndarray, np.ndarray]:
    """FedAdam with beta1 = 0 by hand: (direction, new v)."""
    v_new = beta2 * v + (1.0 - beta2) * step * step
    return step / (np.sqrt(v_new) + tau), v_new


def test_every_candidate_is_the_rule_on_its_buffer_and_commit_steps_once() -> None:
    rng = np.random.default_rng(3)
    x = [rng.normal(size=(3, 2)).astype(np.float32), np.array([5], dtype=np.int64)]
    deltas = [[rng.normal(size=(3, 2)), np.array([k + 1])] for k in range(3)]
    weights = [1.0, 2.0, 0.5]
    cfg = ServerOptConfig("adam", beta1=0.0, beta2=0.9, tau=1e-3)
    opt = cfg.build()
    v0 = rng.uniform(0.1, 1.0, size=(3, 2))
    opt.load({"m": [np.zeros((3, 2))], "v": [v0.copy()]})  # a state from earlier steps
    total = _StepSum(x, 0.1, deltas=True, optimizer=opt)
    for k, (d, w) in enumerate(zip(deltas, weights, strict=True)):
        total.add(k, d, w, checked=True)

    def brute(keep: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
        ws = [weights[k] for k in keep]
        step = sum(weights[k] * deltas[k][0] for k in keep) / sum(ws)
        count = sum(weights[k] * deltas[k][1] for k in keep) / sum(ws)
        u, v_new = _adam_direction(step, v0, 0.9, 1e-3)
        new_w = (x[0].astype(np.float64) + 0.1 * u).astype(np.float32)
        new_c = np.rint(x[1] + count).astype(np.int64)  # integers: the mean change, lr 1
        return [new_w, new_c], v_new

    full, v_full = brute([0, 1, 2])
    for got, want in zip(total.mean(), full, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    without_1, v_without_1 = brute([0, 2])
    for got, want in zip(total.mean_without(1), without_1, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert opt.v is not None
    np.testing.assert_array_equal(opt.v[0], v0)  # peeking changed nothing
    assert not np.allclose(v_without_1, v_full, rtol=1e-4)  # the candidates' steps differ
    total.commit(1)  # drop_worst left update 1 out
    np.testing.assert_allclose(opt.v[0], v_without_1, rtol=1e-6)  # the running sum is float32


def _strategy(
    server_opt: ServerOptConfig | None, threshold: int = 2, **more: object
) -> EdgeStrategy:
    return EdgeStrategy(
        threshold=threshold,
        aggregate="deltas",
        server_lr=float(more.pop("server_lr", 1.0)),  # type: ignore[arg-type]
        server_opt=server_opt,
        clock=VirtualClock(wall=ManualClock()),
        shares=SHARES,
        **more,  # type: ignore[arg-type]
    )


def _run(strategy: EdgeStrategy, rounds: int) -> list[np.ndarray]:
    grid = InProcessGrid(ToyEdge(), 4)
    result = strategy.start(grid, model(0.0), num_rounds=rounds, evaluate_fn=accuracy_fn())
    return as_numpy(result.arrays)


def test_sgd_is_the_plain_rule_and_adam_another_run() -> None:
    plain = _run(_strategy(None), 4)
    sgd = _run(_strategy(ServerOptConfig("sgd")), 4)
    for a, b in zip(plain, sgd, strict=True):
        assert a.tobytes() == b.tobytes()
    adam = _strategy(ServerOptConfig("adam", beta1=0.0), server_lr=0.01)
    moved = _run(adam, 4)
    assert not np.array_equal(moved[0], plain[0])
    assert adam.server_optimizer is not None
    assert adam.server_optimizer.v is not None


def test_a_second_run_of_the_same_strategy_starts_from_zero_moments() -> None:
    strategy = _strategy(ServerOptConfig("momentum", beta1=0.9), server_lr=0.1)
    first = _run(strategy, 3)
    again = _run(strategy, 3)
    for a, b in zip(first, again, strict=True):
        assert a.tobytes() == b.tobytes()


def test_drop_worst_commits_the_step_of_the_update_it_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    committed: list[object] = []
    real = _StepSum.commit

    def spy(self: _StepSum, key: object) -> None:
        committed.append(key)
        real(self, key)  # type: ignore[arg-type]

    monkeypatch.setattr(_StepSum, "commit", spy)
    valuation = ValuationConfig(drop_worst=True)
    adam = _strategy(ServerOptConfig("adam"), server_lr=0.01, valuation=valuation)
    _run(adam, 6)
    assert len(committed) == len(adam.history)  # one step per aggregation
    expected = []
    for record in adam.history:
        zero = [i for i, w in enumerate(record.weights) if w == 0.0]
        expected.append(
            None if not zero else (record.participants[zero[0]], record.job_ids[zero[0]])
        )
    assert committed == expected
    assert any(key is not None for key in committed)  # something was left out


def _rprop_by_hand(
    steps: list[np.ndarray], grow: float, shrink: float, lo: float, hi: float
) -> list[np.ndarray]:
    """Rprop without backtracking, coordinate by coordinate in plain Python loops."""
    rates = [1.0] * steps[0].size
    prev = [0.0] * steps[0].size
    out = []
    for step in steps:
        direction = []
        for j, value in enumerate(step.ravel().tolist()):
            g = (value > 0) - (value < 0)
            if g * prev[j] > 0:
                rates[j] = min(rates[j] * grow, hi)
            elif g * prev[j] < 0:
                rates[j] = max(rates[j] * shrink, lo)
            prev[j] = g
            direction.append(rates[j] * g)
        out.append(np.array(direction).reshape(step.shape))
    return out


def test_rprop_grows_a_rate_while_its_sign_holds_and_shrinks_it_when_it_flips() -> None:
    rng = np.random.default_rng(5)
    steps = [rng.normal(size=(4, 3)) for _ in range(12)]
    steps[3][0, 0] = 0.0  # a zero step: no move, the rate kept
    cfg = ServerOptConfig("rprop", grow=1.5, shrink=0.4, min_rate=0.2, max_rate=3.0)
    opt = cfg.build()
    want = _rprop_by_hand(steps, 1.5, 0.4, 0.2, 3.0)
    for k, (step, expected) in enumerate(zip(steps, want, strict=True)):
        peeked = opt.peek([step])
        np.testing.assert_allclose(opt.peek([step])[0], peeked[0])  # peeking changed nothing
        (got,) = opt.apply([step])
        np.testing.assert_allclose(got, expected, rtol=1e-12, err_msg=f"step {k}")
        np.testing.assert_allclose(peeked[0], expected, rtol=1e-12)
    assert opt.steps == 12
    same = [np.abs(steps[0])] * 20  # the same sign every time: the rate reaches its cap
    capped = ServerOptConfig("rprop").build()
    for step in same:
        (direction,) = capped.apply([step])
    np.testing.assert_allclose(direction, np.full((4, 3), 4.0))
    first = ServerOptConfig("rprop").build().apply([steps[0]])[0]
    np.testing.assert_array_equal(first, np.sign(steps[0]))  # the first step is "sign"'s


@pytest.mark.parametrize(
    "cfg", [ServerOptConfig("adam", beta1=0.5), ServerOptConfig("rprop", shrink=0.7)]
)
def test_a_resumed_run_continues_with_the_saved_moments(
    tmp_path: Path, cfg: ServerOptConfig
) -> None:
    """K = n - 1: every node in every round, so nothing is in flight at the checkpoint."""
    whole = _run(_strategy(cfg, 3, server_lr=0.01), 4)
    _run(_strategy(cfg, 3, server_lr=0.01, checkpoint_dir=tmp_path), 2)
    assert [p.name for p in tmp_path.glob("server-opt-*.npz")] == [OPTIMIZER_FILE.format(2)]
    resumed = _run(_strategy(cfg, 3, server_lr=0.01, checkpoint_dir=tmp_path, resume=True), 4)
    for a, b in zip(whole, resumed, strict=True):
        assert a.tobytes() == b.tobytes()
    assert [p.name for p in tmp_path.glob("server-opt-*.npz")] == [OPTIMIZER_FILE.format(4)]


def test_moments_missing_from_a_checkpoint_restart_at_zero_with_a_warning(tmp_path: Path) -> None:
    cfg = ServerOptConfig("adam", beta1=0.5)
    whole = _run(_strategy(cfg, 3, server_lr=0.01), 4)
    _run(_strategy(cfg, 3, server_lr=0.01, checkpoint_dir=tmp_path), 2)
    (tmp_path / OPTIMIZER_FILE.format(2)).unlink()
    resumed = _strategy(cfg, 3, server_lr=0.01, checkpoint_dir=tmp_path, resume=True)
    with flwr_logs() as logs:
        arrays = _run(resumed, 4)
    assert "no server optimizer moments" in logs.text
    assert len(resumed.history) == 4
    assert arrays[0].tobytes() != whole[0].tobytes()  # the moments matter: the test above bites


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"server_opt": ServerOptConfig(), "aggregate": "models"}, ConfigError, "deltas"),
        ({"server_opt": "adam", "aggregate": "deltas"}, ConfigError, "ServerOptConfig"),
    ],
)
def test_bad_settings_name_the_field(options: dict, error: type, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(error, match=match):
        EdgeStrategy(threshold=2, **options)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"kind": "lamb"}, "kind"),
        ({"beta1": 1.0}, "beta1"),
        ({"tau": 0.0}, "tau"),
        ({"kind": "rprop", "grow": 0.9}, "grow"),
        ({"kind": "rprop", "shrink": 0.0}, "shrink"),
        ({"kind": "rprop", "min_rate": 1.5}, "min_rate"),
        ({"kind": "rprop", "max_rate": 0.5}, "max_rate"),
        ({"kind": "rprop", "max_rate": float("nan")}, "max_rate"),
    ],
)
def test_a_bad_config_names_its_field(fields: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InputError, match=match):
        ServerOptConfig(**fields)
